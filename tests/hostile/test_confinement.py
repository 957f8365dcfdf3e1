"""One tool policy and confinement that follows symlinks (issue 28 items 2, 3, 11): code a tool runs must really
be in the project (or a folder the config allows), a script a step wrote waits for a person as `shell` does,
and a skill's files, folder and snapshot links may not lead out of it — refused before a run starts and named
by `validate` with file:line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hostile.hostile_support import cli, refused
from stepline.model import ToolCall
from stepline.tools import ToolPipeline, ToolPolicy, default_registry

SKILL = Path("_bmad") / "mini" / "tiny-build"


def _run_script(project: Path, script: str, policy: ToolPolicy | None = None) -> dict[str, object]:
    pipeline = ToolPipeline(default_registry(), policy)
    result = pipeline.run(ToolCall(name="runScript", args={"script": script}), step_id="s", project_root=project,
                          approvals=lambda gate: "approved")
    return result.model_dump(mode="json")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "evil.py").write_text("open('ran-evil', 'w').write('x')\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_run_script_refuses_a_script_outside_the_project(project: Path, outside: Path, how: str) -> None:
    if how == "symlink":
        (project / "tools").mkdir()
        os.symlink(outside / "evil.py", project / "tools" / "helper.py")
        script = "tools/helper.py"
    else:
        script = str(outside / "evil.py") if how == "absolute" else "../elsewhere/evil.py"
    result = _run_script(project, script)
    assert result["status"] == "refused" and "is outside the project" in str(result["error"]), result
    assert "tools.allowed_paths" in str(result["error"])
    assert not (project / "ran-evil").exists()
    allowed = _run_script(project, script, ToolPolicy(allowed_paths=[str(outside)]))
    assert allowed["status"] == "ok", allowed
    assert (project / "ran-evil").exists()


def test_a_script_a_step_wrote_waits_for_approval_as_shell_does(project: Path) -> None:
    """writeFile then runScript: the script is no file the workflow names, so it is high risk: a non-interactive
    run blocks at its gate and the script does not run (it printed uid=0 before)."""
    (project / "flow.yaml").write_text("id: f\nsteps:\n  - id: s\n    name: S\n", encoding="utf-8")
    (project / "script.yaml").write_text(json.dumps({"steps": {"s": [
        {"call_tool": {"name": "writeFile", "args": {"path": "pwn.py",
                                                      "content": "open('pwned', 'w').write('x')\n"}}},
        {"call_tool": {"name": "runScript", "args": {"script": "pwn.py"}}},
        {"finish": {"summary": "done"}}]}}), encoding="utf-8")
    outcome = cli("run", "flow.yaml", "--script", "script.yaml", "--non-interactive", "--json", "-C", str(project))
    assert outcome.code == 9, outcome
    assert (project / "pwn.py").is_file() and not (project / "pwned").exists()
    gates = cli("gates", json.loads(outcome.out)["run_id"], "--json", "-C", str(project))
    assert [g["gate_id"] for g in json.loads(gates.out)] == ["tool:runScript:s"]


def test_a_ccw_grep_outside_the_project_does_not_run(project: Path, tmp_path: Path) -> None:
    import shutil

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "ccw_run" / "WFS-pre-analysis"
    session = project / ".workflow" / "active" / "WFS-pre-analysis"
    shutil.copytree(fixtures, session)
    (tmp_path / "secret.txt").write_text("token=hunter2\n", encoding="utf-8")
    task = session / ".task" / "IMPL-1.json"
    data = json.loads(task.read_text(encoding="utf-8"))
    data["flow_control"]["pre_analysis"] = [{"step": "peek", "action": "grep", "output_to": "x", "on_error": "fail",
                                             "command": f"Grep(token, {tmp_path / 'secret.txt'})"}]
    task.write_text(json.dumps(data), encoding="utf-8")
    outcome = cli("ccw", "execute", "-y", "--executor", "dry-run", "--json", "-C", str(project))
    assert outcome.code == 8, outcome
    assert "outside the project root" in outcome.out and "hunter2" not in outcome.out
    journal = next((project / ".stepline" / "runs").glob("run-*/journal.jsonl")).read_text(encoding="utf-8")
    assert "hunter2" not in journal and '"ToolStarted"' not in journal


def test_a_step_file_symlinked_out_of_the_skill_is_refused_and_validated(mini: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.md").write_text("# Step 3\n\nSecret instructions.\n", encoding="utf-8")
    step = mini / SKILL / "step-03-do.md"
    step.unlink()
    step.symlink_to(tmp_path / "outside.md")
    refused(mini, SKILL, f"{step}:1:", "outside the skill")


def test_a_skill_folder_symlinked_from_outside_is_refused_and_validated(mini: Path, tmp_path: Path) -> None:
    real = tmp_path / "shared-skill"
    (mini / SKILL).rename(real)
    (mini / SKILL).symlink_to(real)
    refused(mini, SKILL, "SKILL.md:1:", f"the skill folder is a symlink to {real}")


def test_a_snapshot_link_that_leaves_the_skill_is_refused_before_the_run_starts(mini: Path) -> None:
    """Item 11: `validate` called it an error, `run` exited 0 (README: refused before a run starts)."""
    (mini.parent / "x.md").write_text("# outside\n", encoding="utf-8")
    step = mini / SKILL / "step-02-plan.md"
    step.write_text(step.read_text(encoding="utf-8").replace("[[bmad-snapshot:step-03-do.md]]",
                                                             "[[bmad-snapshot:../../../../x.md]]"), encoding="utf-8")
    refused(mini, SKILL, f"{step}:", "[[bmad-snapshot:../../../../x.md]] leaves the skill")


def test_a_ccw_task_id_holding_a_path_is_one_line_and_an_error_of_validate(project: Path) -> None:
    """A task id names its step and its summary file (.summaries/<id>-summary.md): one that holds a path was a
    traceback for `ccw execute` and only a warning for `validate`."""
    import shutil

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "ccw_run" / "WFS-phased"
    session = project / ".workflow" / "active" / "WFS-phased"
    shutil.copytree(fixtures, session)
    escape = "../../../../outside"
    task = session / ".task" / "IMPL-1.json"
    task.write_text(task.read_text(encoding="utf-8").replace('"IMPL-1"', json.dumps(escape), 1), encoding="utf-8")
    todo = session / "TODO_LIST.md"
    todo.write_text(todo.read_text(encoding="utf-8").replace("**IMPL-1**", f"**{escape}**"), encoding="utf-8")
    outcome = cli("ccw", "execute", "-y", "--executor", "dry-run", "-q", "-C", str(project))
    assert outcome.code == 4 and len(outcome.errors) == 1, outcome
    assert "IMPL-1.json" in outcome.err and "may not hold a slash" in outcome.err
    checked = cli("validate", str(session), "-C", str(project))
    assert checked.code == 10 and "error: task id '../../../../outside' may not hold a slash" in checked.out, checked
    assert not list(project.parent.rglob("outside-summary.md"))
