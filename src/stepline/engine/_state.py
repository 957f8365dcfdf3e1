"""Run state is a fold over the journal: :func:`apply` is the one place an event changes a :class:`Run`.

The live engine appends an event and then applies it; loading a run applies the same events in order, so the
state after a crash is exactly the state the journal describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stepline.model import Event, EventType, Run, RunStatus, RunStep, StepStatus

__all__ = ["CallLog", "apply", "stamp"]

_E = EventType


@dataclass(slots=True)
class CallLog:
    """The journaled calls of steps that are not finished yet, by deterministic key (what replay reads)."""

    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorded: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)
    #: Bumped whenever a variable changes, so views of the variables (redacted copies) can be cached.
    variables_version: int = 0
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def forget_step(self, step_id: str) -> None:
        """Drop the calls of a finished step (they will never be replayed), keeping memory flat."""
        prefix = step_id + "/"
        for table in (self.started, self.recorded):
            if table:  # usually empty: a pure executor's steps journal no calls
                for key in [k for k in table if k.startswith(prefix)]:
                    del table[key]


def stamp(run: Run, last: Event | None) -> None:
    """Note in ``run`` the last journal record folded into it (done once per snapshot, not per event)."""
    if last is not None:
        run.journal_seq = last.seq
        run.updated_at = last.time


def apply(run: Run, event: Event, calls: CallLog) -> None:
    """Fold one journal record into ``run`` (and the replay tables in ``calls``)."""
    fold = _RUN_FOLDS.get(event.type)
    if fold is not None:
        fold(run, event.data, calls)
        return
    step_fold = _STEP_FOLDS.get(event.type)
    if step_fold is not None and event.step_id is not None:
        step_fold(run.step(event.step_id), event.data, event.time, calls)


_RunFold = Callable[[Run, dict[str, Any], CallLog], None]
_StepFold = Callable[[RunStep, dict[str, Any], str, CallLog], None]


def _call_recorded(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    calls.recorded[data["key"]] = data
    if data.get("op") == "set_var":
        run.variables[data["args"]["name"]] = data["args"].get("value")
        calls.variables_version += 1


def _call_started(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    calls.started[data["key"]] = data


def _run_running(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.RUNNING
    run.blocked_reason = None
    run.error = None


def _run_completed(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.COMPLETED


def _run_failed(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.FAILED
    run.error = data.get("error")


def _run_blocked(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.BLOCKED
    run.blocked_reason = data.get("reason")


def _variable_set(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.variables[data["name"]] = data.get("value")
    calls.variables_version += 1


def _cursor_moved(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.cursor.update(data)


def _answer_given(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    calls.answers[data["gate_id"]] = str(data.get("answer", ""))


def _gate_decided(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    calls.decisions[data["gate_id"]] = data


def _step_started(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    if step.status != StepStatus.RUNNING:
        step.transition(StepStatus.RUNNING)
    step.attempts = int(data.get("attempt", step.attempts + 1))
    step.name = data.get("name", step.name)
    if step.started_at is None or not data.get("resumed"):
        step.started_at = at
    step.ended_at = None
    step.blocked_reason = None
    if data.get("inputs") is not None:
        step.inputs = data["inputs"]


def _step_completed(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.COMPLETED)
    step.ended_at = at
    step.error = None
    step.outputs = list(data.get("outputs") or [])
    step.summary = data.get("summary")
    step.choice = data.get("choice")
    step.guardrails = list(data.get("guardrails") or [])
    calls.forget_step(step.step_id)


def _step_failed(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.FAILED)
    step.ended_at = at
    step.error = data.get("error")


def _step_blocked(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.BLOCKED)
    step.blocked_reason = data.get("reason")


def _step_skipped(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.SKIPPED)
    step.ended_at = at
    step.error = data.get("reason")


def _tool_done(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.tools.append(data)


def _artifact_ready(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    if data.get("path") and data["path"] not in step.outputs:
        step.outputs.append(data["path"])


def _validation_failed(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    if data.get("guardrail"):
        step.guardrails.append(data)


#: One fold per kind of record that changes the run or the replay tables, and one per kind that changes a
#: step (records without a step id change nothing); every other kind is an audit record only.
_RUN_FOLDS: dict[str, _RunFold] = {
    _E.CALL_RECORDED: _call_recorded,
    _E.CALL_STARTED: _call_started,
    _E.WORKFLOW_STARTED: _run_running,
    _E.WORKFLOW_RESUMED: _run_running,
    _E.WORKFLOW_COMPLETED: _run_completed,
    _E.WORKFLOW_FAILED: _run_failed,
    _E.WORKFLOW_BLOCKED: _run_blocked,
    _E.VARIABLE_SET: _variable_set,
    _E.CURSOR_MOVED: _cursor_moved,
    _E.ANSWER_GIVEN: _answer_given,
    _E.HUMAN_GATE_APPROVED: _gate_decided,
    _E.HUMAN_GATE_REJECTED: _gate_decided,
}
_STEP_FOLDS: dict[str, _StepFold] = {
    _E.STEP_STARTED: _step_started,
    _E.STEP_COMPLETED: _step_completed,
    _E.STEP_FAILED: _step_failed,
    _E.STEP_BLOCKED: _step_blocked,
    _E.STEP_SKIPPED: _step_skipped,
    _E.TOOL_COMPLETED: _tool_done,
    _E.TOOL_FAILED: _tool_done,
    _E.ARTIFACT_READY: _artifact_ready,
    _E.VALIDATION_FAILED: _validation_failed,
}
