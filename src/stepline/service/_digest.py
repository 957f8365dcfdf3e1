"""What ``status``, ``show`` and ``list`` print of a run, without folding its journal on every call.

A 20,000-step run holds 40,000 journal records: folding them takes seconds, and ``list`` did it (to check each
run as ``doctor`` does) for every run on every call. The digest holds what those commands print: the run's
list row and first damage, its header, the steps and events worth a look (failures, gates, retries, checks that
failed, and the last ones) and its model usage. It is kept beside the journal (``summary.json``, see
:mod:`stepline.store._summary`): derived data, valid only for the files it was made from, rebuilt from the
journal whenever they differ and saved again. ``--all`` and ``--json`` read the journal itself.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from stepline.service._facts import context_detail, context_lines, one_line, run_errors, secrets_in_artifacts

if TYPE_CHECKING:
    from stepline.engine import Engine
    from stepline.model import Event, Run
    from stepline.store import RunDir, RunStore, RunSummary

__all__ = ["KEEP", "LAST", "VERSION", "Digest", "digest_of", "event_detail", "make_digest", "record_digest",
           "row_of", "summary_row"]

#: The digest's shape; a saved digest of another version is rebuilt.
VERSION = 3  # 3: usage columns as executors.ROW (input the whole prompt, cache reads and writes apart)
#: The last steps and events always shown.
LAST = 20
#: At most this many steps, events, errors, contexts or usage rows worth a look are kept (the latest).
KEEP = 200

#: Events worth a look in a long run, besides the last ones: the run's life, failures, gates, checks that failed.
_NOTABLE = frozenset({
    "WorkflowStarted", "WorkflowResumed", "WorkflowCompleted", "WorkflowFailed", "WorkflowBlocked",
    "WorkflowStepFailed", "StepBlocked", "StepRetry", "ValidationFailed", "HumanGateRequired", "HumanGateApproved",
    "HumanGateRejected", "ToolFailed", "ToolApprovalRequired", "ContextDrift", "AnswerGiven"})
_HIDDEN = frozenset({"CallStarted", "CursorMoved", "CallRecorded"})

#: A digest: the JSON document saved in summary.json (see make_digest).
Digest = dict[str, Any]


def _listed(value: Any) -> list[Any]:
    """A record's list of findings as a list (a record edited by hand may hold anything: show it as it is)."""
    if isinstance(value, list):
        return value
    return [] if value is None or value == "" else [value]


def event_detail(data: dict[str, Any]) -> str:
    """What `show` says about one event: the error, reason, file, gate or summary; a check's name and findings."""
    if data.get("guardrail"):
        return f"{data['guardrail']} ({data.get('stage')}): " + "; ".join(map(str, _listed(data.get("details"))))
    if data.get("gate") and "checked" in data:  # a validation gate
        return f"{data['gate']}: " + ("; ".join(map(str, _listed(data.get("issues")))) or "passed")
    context = context_detail(data)  # TELIS: a context resolved, a source drifted
    if context is not None:
        return context
    if "answer" in data and data.get("gate_id"):  # an answer given (AnswerGiven)
        return f"{data['gate_id']}: {data['answer']!r} by {data.get('by') or '?'}"
    return str(data.get("error") or data.get("reason") or data.get("path") or data.get("gate_id")
               or data.get("summary") or "")


def _pick(total: int, notable: list[int], keep: int | None, around: int | None = None) -> list[int]:
    """The indexes to show of ``total`` rows: all of them when ``keep`` is None or they are few, else the last
    ``keep`` notable ones and the :data:`LAST` rows before ``around`` (default: the end) and as many from it."""
    if keep is None or total <= keep + LAST:
        return list(range(total))
    around = total if around is None else around
    return sorted({*notable[-keep:], *range(max(0, around - LAST), min(total, around + LAST))})


def make_digest(run_dir: RunDir, run: Run, events: list[Event], *, keep: int | None = KEEP) -> Digest:
    """The digest of a whole run (loaded, ``events`` its journal): with ``keep=None`` every step and event. A
    long run's steps: the failed, blocked, running and retried ones, the last that started and the next ones."""
    steps = list(run.steps.values())
    notable_steps = [n for n, s in enumerate(steps) if s.status.value in ("failed", "blocked", "running")
                     or s.attempts > 1]
    next_up = next((n for n in range(len(steps) - 1, -1, -1) if steps[n].status.value != "pending"), -1) + 1
    shown_steps = _pick(len(steps), notable_steps, keep, next_up)
    public = [event for event in events if event.type not in _HIDDEN]
    notable_events = [n for n, e in enumerate(public) if e.type in _NOTABLE or "guardrail" in e.data]
    from stepline.engine import build_timeline
    from stepline.executors import ROW

    timeline = build_timeline(run_dir, events, whole=False)
    usage: dict[str, dict[str, float]] = timeline["usage"]
    usage_rows = list(usage.items())
    if keep is not None and len(usage_rows) > keep:  # the costliest steps, in the run's order
        costly = set(heapq.nlargest(keep, usage, key=lambda sid: (usage[sid]["cost_usd"], usage[sid]["calls"])))
        usage_rows = [(sid, bucket) for sid, bucket in usage_rows if sid in costly]
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.status.value] = counts.get(step.status.value, 0) + 1
    errors = run_errors(run)
    contexts = context_lines(run)
    return {
        "row": row_of(run, damage=None),
        "run": {
            "workflow": run.workflow.id, "format": run.workflow.format, "status": run.status.value,
            "blocked_reason": run.blocked_reason, "error": run.error, "counts": counts, "total": len(steps),
            "steps": [[n, s.step_id, s.name, s.status.value, s.attempts, one_line(s.error)]
                      for n in shown_steps for s in (steps[n],)],
            "events_total": len(public),
            "events": [[e.seq, e.time, e.step_id or "", e.type, one_line(event_detail(e.data))]
                       for n in _pick(len(public), notable_events, keep) for e in (public[n],)],
            "usage_total": [timeline["usage_total"][name] for name in ROW],
            "usage_steps": len(usage),
            "usage": [[sid, *(bucket.get(name, 0) for name in ROW)] for sid, bucket in usage_rows],
            "errors_total": len(errors),
            "errors": [list(error) for error in (errors if keep is None else errors[-keep:])],
            "contexts_total": len(contexts),
            "contexts": contexts if keep is None else contexts[-keep:],
            "secrets": secrets_in_artifacts(run),
            "answers": [[e.step_id or "", str(e.data.get("gate_id") or ""), str(e.data.get("answer") or ""),
                         str(e.data.get("by") or "")] for e in events if e.type == "AnswerGiven"],
        },
    }


def row_of(run: Run, *, damage: str | None) -> dict[str, Any]:
    """The fields of a run's :class:`RunSummary` a digest keeps (its live pid is read each time)."""
    done = sum(1 for step in run.steps.values() if step.status.value in ("completed", "skipped"))
    return {"workflow": run.workflow.id, "status": run.status.value, "created_at": run.created_at,
            "updated_at": run.updated_at, "steps_done": done, "steps_total": len(run.steps), "damage": damage}


def record_digest(run_dir: RunDir, run: Run, events: list[Event]) -> None:
    """Save the digest of a run this process just drove (its journal in memory): ``status``, ``show`` and
    ``list`` then read it instead of the journal."""
    from stepline.store import fingerprint, save_summary

    save_summary(run_dir, fingerprint(run_dir), VERSION, make_digest(run_dir, run, events))


def digest_of(engine: Engine, run_dir: RunDir) -> Digest:
    """The run's digest: the saved one when it matches the run's files, else rebuilt (the run checked as
    ``stepline doctor`` checks it, then loaded) and saved. A damaged run's digest has no ``row`` and no ``run``,
    only its first ``damage``; one being driven is rebuilt from its journal each time and not saved."""
    from stepline.store import read_summary, save_summary

    key, digest = read_summary(run_dir, VERSION)
    if digest is not None:
        return digest
    digest = _rebuilt(engine, run_dir)
    save_summary(run_dir, key, VERSION, digest)
    return digest


def _rebuilt(engine: Engine, run_dir: RunDir) -> Digest:
    from stepline.errors import JournalError, RunStateError

    first = engine.diagnose(run_dir).first()
    if first is None:
        try:
            run = engine.load(run_dir)
        except (JournalError, RunStateError) as exc:  # changed since the diagnosis, or not started
            return {"row": None, "damage": exc.format_message()}
        return make_digest(run_dir, run, run_dir.events())
    return {"row": None, "damage": first.short()}


def summary_row(store: RunStore, engine: Engine, run_id: str) -> RunSummary:
    """What ``stepline list`` shows of a run: its digest's row when the run's files are those it was made from;
    else the run is checked as ``stepline doctor`` checks it and its digest rebuilt (not for a run being driven:
    its row comes from its manifest, with the first damage ``doctor`` finds)."""
    from dataclasses import replace

    from stepline.store import RunDir, RunSummary, read_summary, save_summary

    run_dir = RunDir(store.root / run_id)
    key, digest = read_summary(run_dir, VERSION)
    if digest is not None and digest.get("row") is not None:
        return RunSummary(run_id=run_id, live_pid=None, **digest["row"])
    row = store.summary(run_id)
    if row.damage is not None or row.status == "starting":
        return row
    if digest is None:
        if row.live_pid is not None:
            first = engine.diagnose(run_dir).first()
            if first is None:
                return row
            return replace(row, status="damaged", damage=first.short())
        digest = _rebuilt(engine, run_dir)
        save_summary(run_dir, key, VERSION, digest)
    if digest.get("row") is None:
        return replace(row, status="damaged", damage=digest.get("damage"))
    return RunSummary(run_id=run_id, live_pid=None, **digest["row"])
