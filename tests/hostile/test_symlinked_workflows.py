"""Confinement through symlinks for BMAD micro-file and legacy workflows and CCW sessions (issue 28 item 3): a
step file, instructions file or template that is a symlink to a file outside the project, and a CCW session
folder linked in from outside, are refused before a run starts (exit 4, one line naming the file and where it
leads) and named by `validate` with file:line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hostile.hostile_support import cli, refused

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MENUS = Path("_bmad") / "demo" / "workflows" / "menus"


def _link_out(file: Path, outside: Path) -> Path:
    """Move ``file`` outside the project and leave a symlink to it in its place; return where it went."""
    target = outside / file.name
    shutil.move(file, target)
    file.symlink_to(target)
    return target


@pytest.fixture
def microfile(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "microfile_run" / "project", project)
    return project


def test_the_microfile_fixture_runs_as_it_is(microfile: Path) -> None:
    """The control: without a symlink the same workflow runs and validates."""
    run = cli("run", str(MENUS), "--executor", "dry-run", "--yolo", "-q", "-C", str(microfile))
    assert run.code == 0, run
    assert "symlink" not in cli("validate", str(MENUS), "-C", str(microfile)).out


@pytest.mark.parametrize("name", ["steps/step-02-draft.md", "steps/step-01-start.md", "menus.template.md"])
def test_a_microfile_file_symlinked_out_of_the_project_is_refused(microfile: Path, tmp_path: Path,
                                                                  name: str) -> None:
    target = _link_out(microfile / MENUS / name, tmp_path)
    refused(microfile, MENUS, f"a symlink to {target}, outside the project")


def test_a_microfile_step_named_where_it_is_linked_from(microfile: Path, tmp_path: Path) -> None:
    """The escape is reported where the step file is named (file:line), not only as the file itself."""
    _link_out(microfile / MENUS / "steps" / "step-02-draft.md", tmp_path)
    check = cli("validate", str(MENUS), "-C", str(microfile))
    assert f"{microfile / MENUS / 'steps' / 'step-01-start.md'}:4:" in check.out, check


def test_a_microfile_workflow_folder_symlinked_from_outside_is_refused(microfile: Path, tmp_path: Path) -> None:
    real = tmp_path / "menus"
    shutil.move(microfile / MENUS, real)
    (microfile / MENUS).symlink_to(real)
    refused(microfile, MENUS, f"a symlink to {real / 'workflow.md'}, outside the project")


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "wf").mkdir(parents=True)
    shutil.copytree(FIXTURES / "bmad_run" / "tpl", project / "wf" / "tpl")
    return project


def test_the_legacy_fixture_runs_as_it_is(legacy: Path) -> None:
    run = cli("run", "wf/tpl", "--executor", "dry-run", "--yolo", "-q", "-C", str(legacy), "--var", "topic=t")
    assert run.code == 0, run


@pytest.mark.parametrize(("name", "line"), [("instructions.xml", 4), ("template.md", 5), ("workflow.yaml", None)])
def test_a_legacy_file_symlinked_out_of_the_project_is_refused(legacy: Path, tmp_path: Path, name: str,
                                                               line: int | None) -> None:
    target = _link_out(legacy / "wf" / "tpl" / name, tmp_path)
    refused(legacy, Path("wf/tpl"), f"a symlink to {target}, outside the project")
    if line is not None:
        check = cli("validate", "wf/tpl", "-C", str(legacy))
        assert f"{legacy / 'wf' / 'tpl' / 'workflow.yaml'}:{line}:" in check.out, check


@pytest.fixture
def ccw(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / ".workflow" / "active").mkdir(parents=True)
    shutil.copytree(FIXTURES / "ccw_run" / "WFS-phased", project / ".workflow" / "active" / "WFS-phased")
    return project


def test_a_ccw_session_folder_symlinked_from_outside_is_refused(ccw: Path, tmp_path: Path) -> None:
    session = Path(".workflow") / "active" / "WFS-phased"
    assert cli("validate", str(session), "-C", str(ccw)).code == 0
    real = tmp_path / "WFS-phased"
    shutil.move(ccw / session, real)
    (ccw / session).symlink_to(real)
    refused(ccw, session, f"the session folder is a symlink to {real}, outside the project")
    execute = cli("ccw", "execute", "--resume-session", "WFS-phased", "--executor", "dry-run", "-C", str(ccw))
    assert execute.code == 4 and f"a symlink to {real}" in execute.err, execute
