"""Work in progress a skill would offer to resume (issue 16.8): a step-file skill's output whose frontmatter
`stepsCompleted` shows steps done, a sections skill's document whose `status` is not final. Unattended, the
runtime resumes and journals why; in normal mode the person is asked (resume / start over)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.families import load_workflow, register_drivers
from stepline.interfaces.cli._app import run_cli
from stepline.model import Event, Run, StepStatus
from stepline.skills._resume import output_mentions, steps_in_progress

from .conftest import Recorder

register_drivers()

BUILD = Path("_bmad") / "mini" / "tiny-build"
DOC = Path("_bmad") / "mini" / "tiny-doc"


def _drive(project: Path, skill: Path, mode: str, resume: str | None = None) -> tuple[Run, Recorder]:
    recorder = Recorder()
    engine = Engine(project_root=project, executor=recorder, mode=mode)
    if resume is not None:
        return asyncio.run(engine.resume(resume)), recorder
    return asyncio.run(engine.start(load_workflow(project / skill, project_root=project))), recorder


def _events(project: Path, run: Run) -> list[Event]:
    return list(Engine(project_root=project).store.open(run.run_id).events())


def _calls(events: list[Event], op: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "CallRecorded" and e.data.get("op") == op]


def _done(run: Run) -> list[str]:
    return [sid for sid, step in run.steps.items() if step.status == StepStatus.COMPLETED]


def _build_log(project: Path, done: str) -> Path:
    log = project / "out" / "work" / "build-log.md"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"---\nstepsCompleted: {done}\n---\n# Log\n", encoding="utf-8")
    return log


def test_steps_completed_names_steps_by_number_or_name(tmp_path: Path) -> None:
    """`stepsCompleted` entries may be numbers or step names; all done or none done is not in progress."""
    steps = ["step-01-route", "step-02-plan", "step-03-do"]
    files = {"a.md": "[1, 2]", "b.md": "['step-01-route']", "c.md": "[1, 2, 3]", "d.md": "[]", "e.md": "['step-02']"}
    for name, done in files.items():
        (tmp_path / name).write_text(f"---\nstepsCompleted: {done}\n---\n", encoding="utf-8")
    (tmp_path / "broken.md").write_text("---\nstepsCompleted: [1\n---\n", encoding="utf-8")  # not YAML: skipped
    found = steps_in_progress([tmp_path / n for n in [*files, "broken.md"]], steps, tmp_path / "skill")
    assert [(f.path.name, f.resume_at) for f in found] == [("a.md", "step-03-do"), ("b.md", "step-02-plan"),
                                                           ("e.md", "step-01-route")]
    assert output_mentions(["Save to {planning_artifacts}/epics.md", "and `{{.work_folder}}/log.md` then",
                            "again {planning_artifacts}/epics.md"]) == ["{planning_artifacts}/epics.md",
                                                                        "{{.work_folder}}/log.md"]


def test_unattended_a_half_done_step_file_skill_resumes_at_its_first_step_not_done(mini: Path) -> None:
    """#yolo: build-log.md says steps 1 and 2 are done, so the run goes on at step-03-do; step-01's file is never
    handed over, step-02 is skipped, and the runtime's decision is journaled with its reason."""
    log = _build_log(mini, "[1, 2]")
    run, recorder = _drive(mini, BUILD, "yolo")
    assert run.status == "completed", run.error
    assert _done(run) == ["activate", "on-activation", "step-01-route", "step-03-do", "step-04-review"]
    assert run.steps["step-02-plan"].status == StepStatus.SKIPPED
    assert "step-01-route" not in [r.step_id for r in recorder.work()]
    offer = _calls(_events(mini, run), "resume")
    assert len(offer) == 1 and offer[0]["result"]["by"] == "runtime"
    assert offer[0]["result"]["document"] == str(log) and offer[0]["result"]["resume_at"] == "step-03-do"
    assert "unattended (yolo)" in offer[0]["result"]["reason"]
    assert run.variables["resume_from"] == str(log)


@pytest.mark.parametrize(("answer", "path"), [
    ("resume", ["activate", "on-activation", "step-01-route", "step-03-do", "step-04-review"]),
    ("start over", ["activate", "on-activation", "step-01-route", "step-02-plan", "step-03-do", "step-04-review"]),
])
def test_in_normal_mode_the_person_chooses_resume_or_start_over(mini: Path, answer: str, path: list[str]) -> None:
    """Nobody at a terminal: the run blocks on the offer at the first step file; the person's answer decides."""
    _build_log(mini, "['step-01-route', 'step-02-plan']")
    run, _ = _drive(mini, BUILD, "normal")
    assert run.status == "blocked" and run.steps["step-01-route"].status == StepStatus.BLOCKED
    assert run_cli(["answer", run.run_id, answer, "--project-root", str(mini)]) == 0
    run, _ = _drive(mini, BUILD, "normal", resume=run.run_id)
    if run.status == "blocked":  # starting over reaches step-02's checkpoint
        assert run_cli(["answer", run.run_id, "A", "--project-root", str(mini)]) == 0
        run, _ = _drive(mini, BUILD, "normal", resume=run.run_id)
    assert run.status == "completed", run.error
    assert _done(run) == path
    offer = _calls(_events(mini, run), "resume")[0]["result"]
    assert offer["by"] == "person" and offer["choice"] == answer


def test_unattended_an_in_progress_document_is_resumed(mini: Path) -> None:
    """#yolo: a draft in tiny-doc's output folder is resumed by the runtime (Create, bound to its folder),
    not offered to the executor as an intent question; the mode's request is told to resume it."""
    draft = mini / "out" / "work" / "docs" / "doc-1" / "doc.md"
    draft.parent.mkdir(parents=True)
    draft.write_text("---\nstatus: draft\n---\n# Doc\n", encoding="utf-8")
    (draft.parent / "notes.md").write_bytes(b"---\nstatus: draft\n---\n\xff\xfe")  # not UTF-8: not offered
    run, recorder = _drive(mini, DOC, "yolo")
    assert run.status == "completed", run.error
    assert not [r for r in recorder.requests if r.kind == "answer"]
    assert run.variables["intent"] == "create" and run.variables["doc_workspace"] == str(draft.parent)
    offer = _calls(_events(mini, run), "resume")[0]["result"]
    assert offer["by"] == "runtime" and offer["document"] == str(draft) and "status: draft" in offer["reason"]
    mode_request = next(r for r in recorder.work() if r.step_id == "intent")
    assert str(draft) in mode_request.context["resume"]


@pytest.mark.parametrize(("skill", "mode", "offered"), [
    (Path("_bmad") / "mini" / "v6-shims" / "tiny-old", None, True),  # the shim pre-resolves Create
    (DOC, "create", True),
    (DOC, "validate", False),
])
def test_a_given_create_intent_still_offers_to_resume(mini: Path, skill: Path, mode: str | None,
                                                      offered: bool) -> None:
    """Create given by a shim or --mode keeps the skill's offer to resume a draft; another mode does not."""
    draft = mini / "out" / "work" / "docs" / "doc-1" / "doc.md"
    draft.parent.mkdir(parents=True)
    draft.write_text("---\nstatus: draft\n---\n# Doc\n", encoding="utf-8")
    engine = Engine(project_root=mini, executor=Recorder(), mode="yolo")
    run = asyncio.run(engine.start(load_workflow(mini / skill, project_root=mini, mode=mode)))
    assert run.status == "completed", run.error
    events = _events(mini, run)
    assert bool(_calls(events, "resume")) is offered
    assert (run.variables.get("resume_from") == str(draft)) is offered
    if offered:
        assert "given (pre-resolved); unattended (yolo)" in _calls(events, "intent")[0]["result"]["reason"]
