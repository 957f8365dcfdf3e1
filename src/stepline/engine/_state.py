"""Run state is a fold over the journal: :func:`apply` is the one place an event changes a :class:`Run`.

The live engine appends an event and then applies it; loading a run applies the same events in order, so the
state after a crash is exactly the state the journal describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepline.model import Event, EventType, Run, RunStatus, StepStatus

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
            for key in [k for k in table if k.startswith(prefix)]:
                del table[key]


def stamp(run: Run, last: Event | None) -> None:
    """Note in ``run`` the last journal record folded into it (done once per snapshot, not per event)."""
    if last is not None:
        run.journal_seq = last.seq
        run.updated_at = last.time


def apply(run: Run, event: Event, calls: CallLog) -> None:
    """Fold one journal record into ``run`` (and the replay tables in ``calls``)."""
    kind, data, sid = event.type, event.data, event.step_id
    if kind == _E.CALL_RECORDED:
        calls.recorded[data["key"]] = data
        if data.get("op") == "set_var":
            run.variables[data["args"]["name"]] = data["args"].get("value")
            calls.variables_version += 1
        return
    if kind == _E.CALL_STARTED:
        calls.started[data["key"]] = data
        return
    if kind in (_E.WORKFLOW_STARTED, _E.WORKFLOW_RESUMED):
        run.status = RunStatus.RUNNING
        run.blocked_reason = None
        run.error = None
    elif kind == _E.WORKFLOW_COMPLETED:
        run.status = RunStatus.COMPLETED
    elif kind == _E.WORKFLOW_FAILED:
        run.status = RunStatus.FAILED
        run.error = data.get("error")
    elif kind == _E.WORKFLOW_BLOCKED:
        run.status = RunStatus.BLOCKED
        run.blocked_reason = data.get("reason")
    elif kind == _E.VARIABLE_SET:
        run.variables[data["name"]] = data.get("value")
        calls.variables_version += 1
    elif kind == _E.CURSOR_MOVED:
        run.cursor.update(data)
    elif kind in (_E.ANSWER_GIVEN,):
        calls.answers[data["gate_id"]] = str(data.get("answer", ""))
    elif kind in (_E.HUMAN_GATE_APPROVED, _E.HUMAN_GATE_REJECTED):
        calls.decisions[data["gate_id"]] = data
    elif sid is not None:
        _apply_step(run, kind, data, sid, event.time, calls)


def _apply_step(run: Run, kind: str, data: dict[str, Any], sid: str, at: str, calls: CallLog) -> None:
    step = run.step(sid)
    if kind == _E.STEP_STARTED:
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
    elif kind == _E.STEP_COMPLETED:
        step.transition(StepStatus.COMPLETED)
        step.ended_at = at
        step.error = None
        step.outputs = list(data.get("outputs") or [])
        step.summary = data.get("summary")
        step.choice = data.get("choice")
        step.guardrails = list(data.get("guardrails") or [])
        calls.forget_step(sid)
    elif kind == _E.STEP_FAILED:
        step.transition(StepStatus.FAILED)
        step.ended_at = at
        step.error = data.get("error")
    elif kind == _E.STEP_BLOCKED:
        step.transition(StepStatus.BLOCKED)
        step.blocked_reason = data.get("reason")
    elif kind == _E.STEP_SKIPPED:
        step.transition(StepStatus.SKIPPED)
        step.ended_at = at
        step.error = data.get("reason")
    elif kind in (_E.TOOL_COMPLETED, _E.TOOL_FAILED):
        step.tools.append(data)
    elif kind == _E.ARTIFACT_READY:
        if data.get("path") and data["path"] not in step.outputs:
            step.outputs.append(data["path"])
    elif kind == _E.VALIDATION_FAILED and data.get("guardrail"):
        step.guardrails.append(data)
