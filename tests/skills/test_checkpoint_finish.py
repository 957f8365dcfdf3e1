"""A skill step's checkpoints are said in the finish of the step's own work request (issue 21: one model turn
per step): whether a prose condition holds, and in #yolo the option the model chooses as the user. The separate
``decide`` / ``answer`` requests stay the fallback for an executor whose finish does not say; a chosen option's
handler is a request of its own only when it has work beyond moving on; normal mode still asks the person once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from stepline import Engine
from stepline.executors import StepRequest, StepSession
from stepline.families import load_workflow, register_drivers
from stepline.stepchain._checkpoints import handler_has_work as _handler_has_work

from .conftest import Recorder

register_drivers()

STEP = """# Step 1: Plan

Write the plan.

1. Size check. If the plan feels too large for one change:
   - HALT and ask human: `[S] Split` | `[K] Keep`
   - On **S**: Split the plan into two files.
   - On **K**: Continue to the checkpoint.

### CHECKPOINT

HALT and ask human: `[A] Approve` | `[E] Edit`

- **A**: Continue to step 2.
- **E**: Apply the changes, then return to CHECKPOINT.

## NEXT

Read fully and follow `./step-02-end.md`
"""
SIZE, APPROVE = 6, 12  # the checkpoints' lines


class Saying(Recorder):
    """Finishes the step's work request with ``say`` as its choice (None: says nothing, like a script)."""

    def __init__(self, say: str | None) -> None:
        super().__init__()
        self.say = say

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.kind == "work" and request.step_id == "step-01-plan" and request.choices:
            self.requests.append(request)
            await session.finish(choice=self.say, summary="planned")
            return
        await super().perform(request, session)


def _run(tmp_path: Path, executor: Recorder, mode: str = "yolo", step: str = STEP) -> tuple[Any, list[Any]]:
    project = tmp_path / "project"
    root = project / "skills" / "tiny-plan"
    root.mkdir(parents=True)
    (root / "SKILL.md").write_text("---\nname: tiny-plan\ndescription: A plan.\n---\n# Tiny plan\n\n"
                                   "## On Activation\n\nGreet.\n\n## Execution\n\n"
                                   "Read fully and follow `./step-01-plan.md`.\n", encoding="utf-8")
    (root / "step-01-plan.md").write_text(step, encoding="utf-8")
    (root / "step-02-end.md").write_text("# Step 2: End\n\nSay goodbye.\n", encoding="utf-8")
    engine = Engine(project_root=project, executor=executor, mode=mode)
    run = asyncio.run(engine.start(load_workflow(root, project_root=project)))
    return run, list(engine.store.open(run.run_id).events())


def _journal(events: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.data["op"], e.data["result"]) for e in events
            if e.type == "CallRecorded" and e.data["op"] in ("checkpoint-condition", "checkpoint")]


def test_yolo_the_condition_and_the_answer_come_with_the_work(tmp_path: Path) -> None:
    """The model finishes with the unconditional checkpoint's [A]: the size check does not hold (said by the
    executor, why journaled), [A] is the user's answer, its handler only moves on: one request for the step."""
    executor = Saying(f"line {APPROVE}: [A]")
    run, events = _run(tmp_path, executor)
    assert run.status == "completed", run.error
    step = [r for r in executor.requests if r.step_id == "step-01-plan"]
    assert [r.kind for r in step] == ["work"]
    assert step[0].choices == [f"line {APPROVE}: [A]", f"line {APPROVE}: [E]", f"line {SIZE}: [S]",
                               f"line {SIZE}: [K]"] and step[0].menu == []
    assert "## Checkpoints (say in your finish)" in step[0].content and "too large for one change" in step[0].content
    (op1, condition), (op2, answer) = _journal(events)
    assert (op1, condition["holds"], condition["by"]) == ("checkpoint-condition", False, "executor")
    assert f"line {APPROVE}: [A]" in condition["reason"]
    assert (op2, answer["choice"], answer["by"], answer["asked"]) == (
        "checkpoint", "A", "executor", "in the finish of the step's work")
    assert answer["handler"] == "moves on only: no request"


def test_yolo_a_stop_with_work_gets_its_handler_request(tmp_path: Path) -> None:
    """The model says the size check holds and chooses [S]: its handler has work (a request of its own); the
    checkpoint after it was not said, so it is the fallback answer request."""
    executor = Saying(f"line {SIZE}: [S]")
    run, events = _run(tmp_path, executor)
    assert run.status == "completed", run.error
    step = [(r.kind, r.title) for r in executor.requests if r.step_id == "step-01-plan"]
    assert step[1:] == [("work", f"[S] Split at step-01-plan.md:{SIZE}"),
                        ("answer", f"answer as the user: step-01-plan.md:{APPROVE}")]
    asked = next(r for r in executor.requests if r.kind == "answer")  # the question, once: in its own part
    assert asked.question == f"step-01-plan.md:{APPROVE}: Select an option: [A] Approve  [E] Edit"
    journal = _journal(events)
    assert [(op, r.get("holds", r.get("choice")), r["by"]) for op, r in journal] == [
        ("checkpoint-condition", True, "executor"), ("checkpoint", "S", "executor"),
        ("checkpoint", "A", "executor")]
    assert "asked" not in journal[2][1]


def test_a_finish_that_says_nothing_falls_back_to_decide_and_answer(tmp_path: Path) -> None:
    executor = Saying(None)
    run, events = _run(tmp_path, executor)
    assert run.status == "completed", run.error
    kinds = [r.kind for r in executor.requests if r.step_id == "step-01-plan"]
    assert kinds == ["work", "decide", "answer"]
    assert [(op, r["by"]) for op, r in _journal(events)] == [("checkpoint-condition", "executor"),
                                                            ("checkpoint", "executor")]


def test_normal_mode_the_person_is_asked_once(tmp_path: Path) -> None:
    """Normal mode: the finish says whether the size check stops (`line N: stop`) or not (`continue`); the
    [A]/[E] checkpoint is the person's, asked once (the run blocks on it), never offered to the model."""
    executor = Saying("continue")
    run, events = _run(tmp_path, executor, mode="normal")
    assert run.status == "blocked", run.error
    work = next(r for r in executor.requests if r.step_id == "step-01-plan")
    assert work.choices == ["continue", f"line {SIZE}: stop"] and work.menu == []
    assert [r.kind for r in executor.requests if r.step_id == "step-01-plan"] == ["work"]
    assert [(op, r["holds"], r["by"]) for op, r in _journal(events)] == [("checkpoint-condition", False, "executor")]
    asked = [e.data for e in events if e.type == "StepBlocked"]
    assert len(asked) == 1 and asked[0]["gate_id"] == f"ask:step-01-plan/1/checkpoint/{APPROVE}/0"


class PersonsVoice(Saying):
    """An executor whose menu choice is the person's own (a terminal, an MCP agent relaying them)."""

    speaks_for_user = True


def test_normal_mode_a_finish_that_says_no_stop_is_not_taken_as_the_menu_answer(tmp_path: Path) -> None:
    """The finish says `continue` (no conditional stop); the checkpoint after it has a `[C] Continue` option: that
    word is not the person's answer to it, the person is still asked."""
    executor = PersonsVoice("continue")
    run, events = _run(tmp_path, executor, mode="normal",
                       step=STEP.replace("`[A] Approve` | `[E] Edit`", "`[C] Continue` | `[E] Edit`"))
    assert run.status == "blocked", run.error
    assert [e.data["gate_id"] for e in events if e.type == "StepBlocked"] == [
        f"ask:step-01-plan/1/checkpoint/{APPROVE}/0"]
    assert [op for op, _ in _journal(events)] == ["checkpoint-condition"]


def test_a_handler_that_only_moves_on_is_no_work() -> None:
    assert not _handler_has_work("Continue to checkpoint with full spec.")
    assert not _handler_has_work("→ Step 3")
    assert _handler_has_work("Apply changes, then return to CHECKPOINT 1.")
    assert _handler_has_work("Re-read `{spec_file}` from disk. Then set status `ready-for-dev`. → Step 3.")
