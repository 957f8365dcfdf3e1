"""Run state is a fold over the journal: :func:`apply` is the one place an event changes a :class:`Run`.

The live engine appends an event and then applies it; loading a run applies the same events in order, so the
state after a crash is exactly the state the journal describes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from stepline._paths import escape
from stepline.errors import JournalError, OutsideRootError
from stepline.executors import Ledger
from stepline.model import Event, EventType, InvalidTransition, Run, RunStatus, RunStep, StepStatus

__all__ = ["CallLog", "apply", "fold", "stamp"]

_E = EventType
_RECORDED = EventType.CALL_RECORDED.value


@dataclass(slots=True)
class CallLog:
    """The journaled calls of steps that are not finished yet, by deterministic key (what replay reads)."""

    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorded: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)
    #: Bumped whenever a variable changes, so views of the variables (redacted copies) can be cached.
    variables_version: int = 0
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The usage of the run's calls (every step's, kept when a step's calls are forgotten).
    ledger: Ledger = field(default_factory=Ledger)

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
        if event.type == _RECORDED:  # a usage that is no object of numbers: TypeError, a damaged record
            calls.ledger.record(run.run_id, event.step_id, event.data["key"], str(event.data.get("op", "")),
                                event.data.get("result"), at=event.time)
        return
    step_fold = _STEP_FOLDS.get(event.type)
    if step_fold is not None and event.step_id is not None:
        step_fold(run.step(event.step_id), event.data, event.time, calls)


def fold(run: Run, events: Iterable[Event], calls: CallLog, *, path: str, hint: str | None = None) -> None:
    """Fold a journal's records into ``run`` in order (loading a run): a record that cannot happen in the run
    the records before it made — a step completed twice, a call without its key, data of the wrong shape —
    is a :class:`JournalError` naming ``path`` and its line (the n-th record is on line n). A record naming a
    file outside the run's project (no run writes one: the journal was edited) is an
    :class:`OutsideRootError` there: what reads the journal back (a resume, fork, replay) acts on those files."""
    for line, event in enumerate(events, 1):
        try:
            apply(run, event, calls)
        except (InvalidTransition, KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise JournalError(f"record seq {event.seq} ({event.type}) cannot follow the records before it: "
                               f"{_what(exc)}", path=path, line=line, hint=hint) from None
        named = _file_named(event)
        if named is not None and escape(run.project_root, named, follow=False) is not None:
            raise OutsideRootError(f"record seq {event.seq} ({event.type}) names the file {named!r}, outside the "
                                   f"project {run.project_root}", path=path, line=line, hint=hint)


def _file_named(event: Event) -> str | None:
    """The project file a record names, that a resume or time travel writes, truncates or removes."""
    data = event.data
    if event.type == _E.ARTIFACT_READY.value:
        named = data.get("path")
    elif event.type in (_E.CALL_STARTED.value, _E.CALL_RECORDED.value) and data.get("op") == "write_output":
        args = data.get("args")
        named = args.get("path") if isinstance(args, dict) else None
    else:
        return None
    return named if isinstance(named, str) else None


def _what(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"its data has no {exc.args[0]!r}" if exc.args else "a field is missing"
    if isinstance(exc, InvalidTransition):
        return str(exc)
    return f"its data is not what it must be ({exc})"


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is not an object")
    return value


def _text(data: dict[str, Any], name: str) -> str | None:
    """``data[name]``: a text or absent (what a reader prints: an error, a reason, a summary)."""
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} is not a string")
    return value


def _records(data: dict[str, Any], name: str) -> list[Any]:
    """``data[name]``: a list (of objects, for guardrail reports) or absent."""
    value = data.get(name) or []
    if not isinstance(value, list) or (name == "guardrails" and not all(isinstance(v, dict) for v in value)):
        raise TypeError(f"{name} is not a list" + (" of objects" if name == "guardrails" else ""))
    return list(value)


def _key(data: dict[str, Any]) -> str:
    key = data["key"]
    if not isinstance(key, str):
        raise TypeError("key is not a string")
    if data.get("args") is not None:
        _mapping(data["args"], "args")
    return key


_RunFold = Callable[[Run, dict[str, Any], CallLog], None]
_StepFold = Callable[[RunStep, dict[str, Any], str, CallLog], None]


def _call_recorded(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    key = _key(data)
    if data.get("op") == "set_var":
        args = _mapping(data["args"], "args")
        run.variables[str(args["name"])] = args.get("value")
        calls.variables_version += 1
    calls.recorded[key] = data


def _call_started(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    calls.started[_key(data)] = data


def _run_running(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.RUNNING
    run.blocked_reason = None
    run.error = None


def _run_completed(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.COMPLETED


def _run_failed(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.FAILED
    run.error = _text(data, "error")


def _run_blocked(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.status = RunStatus.BLOCKED
    run.blocked_reason = _text(data, "reason")


def _variable_set(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.variables[str(data["name"])] = data.get("value")
    calls.variables_version += 1


def _cursor_moved(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    run.cursor.update(data)


def _answer_given(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    calls.answers[str(data["gate_id"])] = str(data.get("answer", ""))


def _gate_decided(run: Run, data: dict[str, Any], calls: CallLog) -> None:
    if data.get("decision") not in ("approved", "rejected"):
        raise ValueError("decision is not 'approved' or 'rejected'")
    calls.decisions[str(data["gate_id"])] = data


def _step_started(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    if step.status != StepStatus.RUNNING:
        step.transition(StepStatus.RUNNING)
    step.attempts = int(data.get("attempt", step.attempts + 1))
    if "name" in data:
        step.name = _text(data, "name")  # type: ignore[assignment]  # None when the spec has none, as before
    if step.started_at is None or not data.get("resumed"):
        step.started_at = at
    step.ended_at = None
    step.blocked_reason = None
    if data.get("inputs") is not None:
        step.inputs = _mapping(data["inputs"], "inputs")


def _step_completed(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.COMPLETED)
    step.ended_at = at
    step.error = None
    step.outputs = [str(path) for path in _records(data, "outputs")]
    step.summary = _text(data, "summary")
    step.choice = _text(data, "choice")
    step.guardrails = _records(data, "guardrails")
    calls.forget_step(step.step_id)


def _step_failed(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.FAILED)
    step.ended_at = at
    step.error = _text(data, "error")


def _step_blocked(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.BLOCKED)
    step.blocked_reason = _text(data, "reason")


def _step_skipped(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.transition(StepStatus.SKIPPED)
    step.ended_at = at
    step.error = _text(data, "reason")


def _context_resolved(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.telis_context = _mapping(data["context"], "context")


def _tool_done(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    step.tools.append(data)


def _artifact_ready(step: RunStep, data: dict[str, Any], at: str, calls: CallLog) -> None:
    path = _text(data, "path")
    if path and path not in step.outputs:
        step.outputs.append(path)


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
    _E.CONTEXT_RESOLVED: _context_resolved,
    _E.TOOL_FAILED: _tool_done,
    _E.ARTIFACT_READY: _artifact_ready,
    _E.VALIDATION_FAILED: _validation_failed,
}
