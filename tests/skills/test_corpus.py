"""BMAD v6.11.0, installed by `stepline bmad install`: the layout BMAD's installer makes, and every skill run to
completion with the dry-run executor in #yolo, following its chain."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stepline import Engine
from stepline.bmad import install_bmad
from stepline.families import load_workflow, register_drivers
from stepline.model import StepStatus
from stepline.skills._skill import read_skill_files

from .conftest import CORPUS_V611, FIXTURE

pytestmark = [pytest.mark.corpus,
              pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")]

register_drivers()


def _skills() -> list[str]:
    if not CORPUS_V611.is_dir():
        return []
    return sorted(str(p.parent.relative_to(CORPUS_V611 / "src")) for p in (CORPUS_V611 / "src").rglob("SKILL.md"))


def test_install_lays_out_a_skill_era_tree(tmp_path: Path) -> None:
    """Modules under _bmad/<code>/, shared scripts without their tests, central config split team/user,
    the agents' roster, and _bmad/custom/ with personal overrides git-ignored."""
    project = tmp_path / "shop"
    report = install_bmad(CORPUS_V611, project, {"user_name": "Ada"})
    bmad = project / "_bmad"
    assert [m.name for m in report.modules] == ["core", "bmm"]
    assert (bmad / "bmm" / "ship" / "bmad-build" / "step-02-plan.md").is_file()
    assert sorted(p.name for p in (bmad / "scripts").iterdir()) == [
        "config_utils.py", "memlog.py", "render_skill.py", "resolve_config.py", "resolve_customization.py"]
    team = tomllib.loads((bmad / "config.toml").read_text(encoding="utf-8"))
    user = tomllib.loads((bmad / "config.user.toml").read_text(encoding="utf-8"))
    assert team["core"]["output_folder"] == "{project-root}/_bmad-output" and "user_name" not in team["core"]
    assert user["core"]["user_name"] == "Ada"
    assert team["modules"]["bmm"]["planning_artifacts"] == "{project-root}/_bmad-output/planning-artifacts"
    assert user["modules"]["bmm"] == {"user_skill_level": "intermediate"}
    assert team["agents"]["bmad-agent-pm"]["name"] == "John"
    assert (bmad / "custom" / ".gitignore").read_text(encoding="utf-8") == "*.user.toml\n"
    assert (bmad / "bmm" / "config.yaml").is_file()  # the older per-module config is kept for older prose


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("v611-runs") / "project"
    install_bmad(CORPUS_V611, project, {})
    return project


@pytest.mark.parametrize("skill", _skills())
def test_every_skill_runs_to_completion(installed: Path, skill: str) -> None:
    """The skill completes in #yolo with dry-run; a step-file skill runs every step of its default chain."""
    module = "core" if skill.startswith("core-skills") else "bmm"
    folder = installed / "_bmad" / module / skill.split("/", 1)[1]
    engine = Engine(project_root=installed, executor="dry-run", mode="yolo")
    workflow = load_workflow(folder, project_root=installed)
    run = asyncio.run(engine.start(workflow))
    assert run.status == "completed", [(s, r.error) for s, r in run.steps.items() if r.error]
    done = [sid for sid, step in run.steps.items() if step.status == StepStatus.COMPLETED]
    assert all(step.status in (StepStatus.COMPLETED, StepStatus.SKIPPED) for step in run.steps.values())
    if workflow.format == "bmad-legacy":  # its steps are <workflow> XML (create-story …): run one by one
        # framed by the skill's activation, as any skill is
        steps = [sid for sid in done if sid.startswith("step-")]
        assert workflow.name == folder.name and done[0] == "activate" and steps[:2] == ["step-1", "step-2"], (
            workflow.name, done)
        return
    files = read_skill_files(folder)
    if files.kind == "shim":
        files = read_skill_files(Path(workflow.meta["skills"][files.forward_to]["root"]))
    target = files
    if target.kind == "step-files":
        chain, name = [], target.first_step
        while name is not None and name not in chain:
            chain.append(name)
            name = target.steps[name].next
        # (a step continued after a route it took runs again as a visit: ``step-01@2``)
        assert [s for s in done if s.startswith("step-") and "@" not in s] == [Path(n).stem for n in chain]
        assert len(chain) > 1
    else:
        assert done[:2] == ["activate", "on-activation"] or done[:3] == ["shim", "activate", "on-activation"]
        # its own sections (a skill it hands over to runs under its own name: ``bmad-build:…``)
        sections = [s.id for s in workflow.steps if s.meta.get("role") in ("section", "body") and ":" not in s.id]
        # the sections ran, or the intent's own request (Validate names none), or the activation was all of it
        assert set(sections) & set(done) or "intent" in done or not sections


def test_a_module_installed_later_keeps_what_is_there(tmp_path: Path) -> None:
    """Installing an external module into a v6.11.0 project adds its config tables and scripts; core's and
    bmm's stay, and the BMAD script that renders skills still works on the result."""
    project = tmp_path / "shop"
    install_bmad(CORPUS_V611, project, {})
    install_bmad(FIXTURE, project, {})
    bmad = project / "_bmad"
    team = tomllib.loads((bmad / "config.toml").read_text(encoding="utf-8"))
    assert sorted(team["modules"]) == ["bmm", "mini"] and team["core"]["output_folder"]
    assert {"memlog.py", "note.py"} <= {p.name for p in (bmad / "scripts").iterdir()}
    printed = subprocess.run([sys.executable, str(bmad / "scripts" / "render_skill.py"), "--project-root",
                              str(project), "--skill", str(bmad / "mini" / "tiny-build")],
                             capture_output=True, text=True, check=True).stdout
    rendered = Path(printed.strip().removeprefix("read and follow ")).parent / "step-01-route.md"
    assert f"work goes to `{project}/out/work`" in rendered.read_text(encoding="utf-8")
