"""Conditional checkpoints (issue 16.4): a step file's `HALT and ask human:` nested under a condition (or opening
with one) stops for the person only when the condition holds — decided by the runtime when it can read it (a
`{workflow.<x>}` flag, a config or run value, a file on disk, a frontmatter field), else by the executor's
decide; each decision journaled with its reason and who made it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.families import load_workflow, register_drivers
from stepline.model import Event
from stepline.skills._skill import checkpoints_in

from .conftest import CORPUS_V611, Recorder

register_drivers()

STEP = """# Step 1: Plan

Write the plan to `{spec_file}`.

1. Review gate. If `{workflow.review_gate}` is `on`:
   - HALT and ask human: `[A] Approve` | `[R] Revise`
   - On **A**: Go on.
   - On **R**: Revise the plan.

If `{project-root}/STOP.md` exists, HALT and ask human: `[C] Continue` | `[X] Abort`

2. Size check. If the plan feels too large for one change:
   - HALT and ask human: `[S] Split` | `[K] Keep`

3. If `{spec_file}` has `status: draft`:
   - HALT and ask human: `[F] Finish the draft` | `[N] New spec`

## NEXT

Read fully and follow `./step-02-end.md`
"""


def _skill(project: Path, gate: str) -> Path:
    root = project / "skills" / "tiny-gate"
    root.mkdir(parents=True)
    (root / "SKILL.md").write_text("---\nname: tiny-gate\ndescription: A gate.\n---\n# Tiny gate\n\n"
                                   "## On Activation\n\nGreet.\n\n## Execution\n\n"
                                   "Read fully and follow `./step-01-plan.md`.\n", encoding="utf-8")
    (root / "customize.toml").write_text(f'[workflow]\nreview_gate = "{gate}"\n', encoding="utf-8")
    (root / "step-01-plan.md").write_text(STEP, encoding="utf-8")
    (root / "step-02-end.md").write_text("# Step 2: End\n\nSay goodbye.\n", encoding="utf-8")
    return root


def _conditions(events: list[Event]) -> list[dict[str, Any]]:
    return [{"line": e.data["args"]["line"], **e.data["result"]} for e in events
            if e.type == "CallRecorded" and e.data["op"] == "checkpoint-condition"]


def test_a_nested_or_leading_condition_is_kept_with_its_checkpoint() -> None:
    """The reader keeps each checkpoint's condition (the line it hangs from, or its own `If …,`) and its
    `On **K**:` handlers; an unconditional one has none."""
    found = checkpoints_in(STEP)
    assert [(c.line, c.condition) for c in found] == [
        (6, "Review gate. If `{workflow.review_gate}` is `on`:"),
        (10, "If `{project-root}/STOP.md` exists"),
        (13, "Size check. If the plan feels too large for one change:"),
        (16, "If `{spec_file}` has `status: draft`:")]
    assert found[0].handlers == {"A": "Go on.", "R": "Revise the plan."}
    assert checkpoints_in("HALT and ask human: `[A] Approve` | `[E] Edit`\n")[0].condition is None


@pytest.mark.parametrize(("gate", "asked"), [("on", ["A"]), ("off", [])])
def test_the_runtime_decides_what_it_can_read_and_the_executor_the_rest(tmp_path: Path, gate: str,
                                                                        asked: list[str]) -> None:
    """review_gate from customize.toml, STOP.md's absence and the spec's frontmatter are the runtime's to
    decide; "feels too large" is the executor's decide; only a checkpoint whose condition holds is asked."""
    project = tmp_path / "project"
    spec = project / "spec.md"
    project.mkdir()
    spec.write_text("---\nstatus: ready\n---\n# Spec\n", encoding="utf-8")
    root = _skill(project, gate)
    recorder = Recorder()
    engine = Engine(project_root=project, executor=recorder, mode="yolo")
    workflow = load_workflow(root, project_root=project, variables={"spec_file": "spec.md"})
    run = asyncio.run(engine.start(workflow, {"spec_file": "spec.md"}))
    assert run.status == "completed", run.error
    events = list(engine.store.open(run.run_id).events())
    decided = _conditions(events)
    assert [(d["line"], d["holds"], d["by"]) for d in decided] == [
        (6, gate == "on", "runtime"), (10, False, "runtime"), (13, False, "executor"), (16, False, "runtime")]
    assert "{workflow.review_gate} = '" + gate + "'" in decided[0]["reason"]
    assert "STOP.md is missing" in decided[1]["reason"] and "status: ready" in decided[3]["reason"]
    decides = [r for r in recorder.requests if r.kind == "decide"]
    assert [r.condition for r in decides] == ["Size check. If the plan feels too large for one change:"]
    choices = [e.data["result"]["choice"] for e in events
               if e.type == "CallRecorded" and e.data["op"] == "checkpoint"]
    assert choices == asked


def test_a_file_that_exists_stops_for_the_person(tmp_path: Path) -> None:
    """STOP.md on disk and a draft spec: both checkpoints are asked, by the runtime's reading of the disk."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "STOP.md").write_text("stop\n", encoding="utf-8")
    (project / "spec.md").write_text("---\nstatus: draft\n---\n", encoding="utf-8")
    root = _skill(project, "off")
    engine = Engine(project_root=project, executor=Recorder(), mode="yolo")
    run = asyncio.run(engine.start(load_workflow(root, project_root=project, variables={"spec_file": "spec.md"}),
                                   {"spec_file": "spec.md"}))
    assert run.status == "completed", run.error
    events = list(engine.store.open(run.run_id).events())
    assert [(d["line"], d["holds"]) for d in _conditions(events)] == [(6, False), (10, True), (13, False), (16, True)]
    assert [e.data["result"]["choice"] for e in events
            if e.type == "CallRecorded" and e.data["op"] == "checkpoint"] == ["C", "F"]


@pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_bmad_builds_scope_checkpoints_are_conditional() -> None:
    """bmad-build's split-or-keep checkpoints hang from prose conditions (the executor's decide); CHECKPOINT 1 is
    unconditional."""
    build = CORPUS_V611 / "src" / "bmm-skills" / "ship" / "bmad-build"
    plan = checkpoints_in((build / "step-02-plan.md").read_text(encoding="utf-8"))
    assert [(c.options[0][0], c.condition) for c in plan] == [
        ("S", "Token count check (see SCOPE STANDARD). If spec exceeds 1600 tokens:"), ("A", None)]
    route = checkpoints_in((build / "step-01-clarify-and-route.md").read_text(encoding="utf-8"))
    assert [c.options[0][0] for c in route] == ["S"] and route[0].condition is not None


def test_a_resumed_step_keeps_the_decision_it_journaled(tmp_path: Path) -> None:
    """Normal mode: STOP.md exists, so the run blocks on that checkpoint; STOP.md is removed before the person
    answers and the run resumes: the journaled decision stands (the checkpoint is still the one answered)."""
    from stepline.interfaces.cli._app import run_cli

    project = tmp_path / "project"
    project.mkdir()
    (project / "STOP.md").write_text("stop\n", encoding="utf-8")
    root = _skill(project, "off")
    engine = Engine(project_root=project, executor=Recorder(), mode="normal")
    run = asyncio.run(engine.start(load_workflow(root, project_root=project)))
    assert run.status == "blocked", run.error
    (project / "STOP.md").unlink()
    assert run_cli(["answer", run.run_id, "C", "--project-root", str(project)]) == 0
    run = asyncio.run(Engine(project_root=project, executor=Recorder(), mode="normal").resume(run.run_id))
    assert run.status == "completed", run.error
    events = list(engine.store.open(run.run_id).events())
    assert [(d["line"], d["holds"]) for d in _conditions(events)][:2] == [(6, False), (10, True)]
    assert [e.data["result"]["choice"] for e in events
            if e.type == "CallRecorded" and e.data["op"] == "checkpoint"] == ["C"]
