"""``timeline.json``: one ordered view of a run built from its events, artifacts, gates, evidence and DRRs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stepline.executors import Ledger, usage_row
from stepline.model import Event, EventType
from stepline.store import RunDir

__all__ = ["build_timeline", "write_timeline"]

_HIDDEN = {EventType.CALL_STARTED.value, EventType.CURSOR_MOVED.value}
# Plain strings, looked up once: the loop below runs once per journal record.
_RECORDED = EventType.CALL_RECORDED.value
_STARTED = EventType.STEP_STARTED.value
_ENDED = {EventType.STEP_COMPLETED.value, EventType.STEP_FAILED.value, EventType.STEP_BLOCKED.value,
          EventType.STEP_SKIPPED.value}


def build_timeline(run_dir: RunDir, events: Iterable[Event] | None = None, *, whole: bool = True) -> dict[str, Any]:
    """Return the run's timeline: public events in order, each step's span, and the audit records.

    ``events`` saves re-reading the journal when the caller has them in memory already. ``whole=False`` is the
    form ``timeline.json`` keeps: each event without its data (the journal's record with the same ``seq``
    holds it) and no step spans (the events give them), so that the file does not restate the journal.
    """
    entries: list[dict[str, Any]] = []
    steps: dict[str, dict[str, Any]] = {}
    ledger = Ledger()
    for event in run_dir.events() if events is None else events:
        kind, sid = event.type, event.step_id
        if kind == _RECORDED:
            # A model's (or an agent's) call journals its usage with its result; a person's answers (the human
            # executor's memo) carry none and are no model call.
            ledger.record(run_dir.run_id, sid, str(event.data.get("key", "")), str(event.data.get("op", "")),
                          event.data.get("result"), at=event.time)
            continue
        if kind in _HIDDEN:
            continue
        if not whole:
            entries.append({"seq": event.seq, "time": event.time, "type": kind, "step_id": sid})
            continue
        entries.append({"seq": event.seq, "time": event.time, "type": kind, "step_id": sid, "data": event.data})
        if sid:
            span = steps.get(sid)
            if span is None:
                span = steps[sid] = {"step_id": sid, "attempts": 0}
            if kind == _STARTED:
                span.setdefault("started_at", event.time)
                span["attempts"] = event.data.get("attempt", span["attempts"])
            elif kind in _ENDED:
                span["ended_at"] = event.time
                span["status"] = kind
    timeline: dict[str, Any] = {"run_id": run_dir.run_id, "events": entries}
    if whole:
        timeline["steps"] = list(steps.values())
    timeline.update({
        "artifacts": run_dir.read("artifacts.json", []) or [],
        "gates": run_dir.read("gates.json", []) or [],
        "approvals": run_dir.read("approvals.json", []) or [],
        "evidence": run_dir.read("evidence.json", []) or [],
        "drr": run_dir.read("drr.json", []) or [],
        "tool_results": run_dir.read("tool_results.json", []) or [],
        "usage": {step: usage_row(used) for step, used in ledger.by(lambda entry: entry.step_id).items()},
        "usage_total": usage_row(ledger.total()),
    })
    return timeline


def write_timeline(run_dir: RunDir, events: Iterable[Event] | None = None) -> None:
    """Rebuild and write ``timeline.json`` atomically, in its short form (``build_timeline(whole=False)``):
    the order of the run's public events, their kinds, times and steps, next to the audit records.
    ``stepline show`` and ``export`` rebuild the whole timeline from the journal.

    Not synced: it is derived from the journal and the other documents, and whoever reads a run's timeline
    rebuilds it from them; its two fsyncs were a seventh of a short run's end.
    """
    run_dir.write("timeline.json", build_timeline(run_dir, events, whole=False), compact=True, durable=False)
