"""Paths on the command line (issue 14): relative to the current folder, like every CLI; `-C DIR` works as in
`git -C` (as if started in DIR: the project folder, and what relative paths are taken from)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from stepline.interfaces.cli._app import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

WORKFLOW_YAML = """name: demo
config_source: "{project-root}/_bmad/demo/config.yaml"
output_folder: "{config_source}:output_folder"
installed_path: "{project-root}/_bmad/demo/workflows/demo"
instructions: "{installed_path}/instructions.xml"
"""
INSTRUCTIONS = '<workflow>\n<step n="1" goal="Say hello">\n  <action>Say hello</action>\n</step>\n</workflow>\n'


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder of the command, holding a BMAD project ``p/`` and a native workflow in ``p/flow.yaml``."""
    wf = tmp_path / "p" / "_bmad" / "demo" / "workflows" / "demo"
    wf.mkdir(parents=True)
    (tmp_path / "p" / "_bmad" / "demo" / "config.yaml").write_text("output_folder: '{project-root}/out'\n")
    (wf / "workflow.yaml").write_text(WORKFLOW_YAML)
    (wf / "instructions.xml").write_text(INSTRUCTIONS)
    (tmp_path / "p" / "flow.yaml").write_text(yaml.safe_dump({"id": "flow", "steps": [
        {"id": "a", "outputs": ["a.md"]}]}))
    (tmp_path / "p" / "script.yaml").write_text(yaml.safe_dump({"steps": {"a": [
        {"write_output": {"content": "# a\n"}}, {"finish": {"summary": "wrote a"}}]}}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _runs(root: Path) -> list[str]:
    folder = root / ".stepline" / "runs"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_path_is_taken_from_the_current_folder_not_the_project_root(here: Path) -> None:
    """The issue's own command: `run p/_bmad/…/workflow.yaml --project-root p` runs p's workflow (it used to
    look for p/p/_bmad/…)."""
    code = run_cli(["run", "p/_bmad/demo/workflows/demo/workflow.yaml", "--project-root", "p",
                    "--executor", "dry-run", "--yolo", "-q"])
    assert code == 0
    assert len(_runs(here / "p")) == 1 and not (here / ".stepline").exists()


def test_script_and_config_are_taken_from_the_current_folder_too(here: Path) -> None:
    """--script and --config given with --project-root are relative to where the command runs."""
    (here / "p" / "config").mkdir()
    (here / "p" / "config" / "other.yaml").write_text("runtime: {storage_root: elsewhere}\n")
    code = run_cli(["run", "p/flow.yaml", "--project-root", "p", "--script", "p/script.yaml",
                    "--config", "p/config/other.yaml", "-q"])
    assert code == 0
    assert (here / "p" / "a.md").read_text() == "# a\n"
    assert len(list((here / "p" / "elsewhere").iterdir())) == 1 and not (here / "p" / ".stepline").exists()
    assert run_cli(["list", "--project-root", "p", "--config", "p/config/other.yaml", "--json"]) == 0


def test_dash_c_works_as_git_dash_c(here: Path) -> None:
    """`-C p`: p is the project, and the workflow, --script and --output paths are taken from p."""
    assert run_cli(["run", "_bmad/demo/workflows/demo", "-C", "p", "--executor", "dry-run", "--yolo", "-q"]) == 0
    assert run_cli(["run", "flow.yaml", "--script", "script.yaml", "-C", "p", "-q"]) == 0
    runs = _runs(here / "p")
    assert len(runs) == 2
    assert run_cli(["export", runs[0], "-C", "p", "-o", "run.json"]) == 0
    assert json.loads((here / "p" / "run.json").read_text())["run"]["run_id"] == runs[0]
    assert run_cli(["status", runs[1], "-C", "p", "--json"]) == 0


def test_dash_c_then_project_root_is_taken_from_dash_c(here: Path) -> None:
    """With both, --project-root is relative to -C's folder (git: `-C` first, then everything else)."""
    assert run_cli(["run", "p/flow.yaml", "-C", str(here), "--project-root", "p", "--script", "p/script.yaml",
                    "-q"]) == 0
    assert len(_runs(here / "p")) == 1


def test_export_output_is_taken_from_the_current_folder(here: Path) -> None:
    """`export -o FILE --project-root p` writes FILE here, not into p."""
    assert run_cli(["run", "p/flow.yaml", "--project-root", "p", "--script", "p/script.yaml", "-q"]) == 0
    run_id = _runs(here / "p")[0]
    assert run_cli(["export", run_id, "--project-root", "p", "-o", "out.json"]) == 0
    assert (here / "out.json").is_file() and not (here / "p" / "out.json").exists()


def test_validate_takes_paths_from_the_current_folder_or_dash_c(here: Path, capsys: pytest.CaptureFixture[str]) \
        -> None:
    """`validate` agrees with `run`: relative to the current folder, or to -C's."""
    assert run_cli(["validate", "p/_bmad", "--project-root", "p"]) == 0
    assert run_cli(["validate", "_bmad", "-C", "p"]) == 0
    assert "0 error(s)" in capsys.readouterr().out


def test_ccw_session_folder_is_taken_from_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A session given as a folder: relative to the current folder with --project-root, to DIR with -C."""
    shutil.copytree(FIXTURES / "ccw" / "project-active", tmp_path / "proj")
    monkeypatch.chdir(tmp_path)
    assert run_cli(["ccw", "status", "proj/.workflow/active/WFS-auth-system", "--project-root", "proj",
                    "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["session"] == "WFS-auth-system"
    assert run_cli(["ccw", "status", ".workflow/active/WFS-auth-system", "-C", "proj", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["session"] == "WFS-auth-system"
    assert run_cli(["ccw", "sessions", "--project-root", "proj", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_a_missing_folder_is_one_line_and_exit_3(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A -C or --project-root that is no folder: not found, naming it."""
    assert run_cli(["list", "-C", "nope"]) == 3
    assert "nope: no such folder" in capsys.readouterr().err
    assert run_cli(["list", "--project-root", "nope"]) == 3
    assert "no such project folder" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run"], ["resume"], ["status"], ["list"], ["history"], ["show"], ["export"],
                                     ["gates"], ["approve"], ["reject"], ["answer"], ["validate"], ["mcp"],
                                     ["providers"], ["ccw", "sessions"], ["ccw", "execute"], ["ccw", "status"],
                                     ["ccw", "complete"], ["ccw", "check"], ["bmad", "install"]])
def test_every_command_offers_dash_c_and_says_what_paths_are_relative_to(
        command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same two options, with the same help, on every command that takes a project."""
    monkeypatch.setenv("COLUMNS", "200")
    assert run_cli([*command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "-C, --directory DIR " in text and "as `git -C`" in text
    assert "--project-root" in text
    assert "taken from the current folder" in text
