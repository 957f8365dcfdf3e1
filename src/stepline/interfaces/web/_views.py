"""What the dashboard shows of a run and of a CCW session, as plain JSON-ready data (the API returns it, the
pages render it). Read-only: the run is rebuilt from its journal by :meth:`Engine.load`, the audit files are
read as they are, CCW sessions through :mod:`stepline.ccw`'s readers. Nothing here writes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline._paths import confine
from stepline.errors import NotFoundError, OutsideRootError
from stepline.executors import ROW
from stepline.model import Event, Run
from stepline.store import RunDir, RunSummary

if TYPE_CHECKING:
    from stepline import Engine
    from stepline.sprint import SprintProject

__all__ = [
    "EVIDENCE_LEGEND",
    "HIDDEN_EVENTS",
    "MAX_ARTIFACT_BYTES",
    "artifact_content",
    "artifacts_view",
    "ccw_board",
    "drr_view",
    "event_detail",
    "event_view",
    "events_page",
    "evidence_view",
    "gate_card",
    "gates_view",
    "project_diff",
    "question_view",
    "run_view",
    "sprint_view",
    "summary_view",
]

#: Journal records that are not events of the run's story (replay bookkeeping), as ``stepline show`` hides them.
HIDDEN_EVENTS = frozenset({"CallStarted", "CallRecorded", "CursorMoved"})
#: An artifact larger than this is shown cut (its sha256 is always that of the whole file).
MAX_ARTIFACT_BYTES = 2_000_000


def summary_view(row: RunSummary, shown: str, parent: str | None) -> dict[str, Any]:
    """A runs-list row."""
    return {**asdict(row), "shown_status": shown, "parent_run_id": parent}


def event_detail(event_type: str, data: dict[str, Any]) -> str:
    """One line saying what an event is about: the error, reason, file, gate, check or summary."""
    if data.get("guardrail"):
        return f"{data['guardrail']} ({data.get('stage')}): " + "; ".join(map(str, data.get("details") or []))
    if data.get("gate") and "checked" in data:
        return f"{data['gate']}: " + ("; ".join(map(str, data.get("issues") or [])) or "passed")
    if event_type == "WorkflowStarted":
        return f"{data.get('workflow', '')} ({data.get('format', '')}, {data.get('executor', '')})"
    if data.get("tool"):
        status = data.get("status") or data.get("error") or ""
        return f"{data['tool']} ({data.get('risk', '')} risk){': ' + str(status) if status else ''}"
    for key in ("error", "reason", "path", "gate_id", "summary", "name", "claim"):
        if data.get(key):
            return str(data[key])
    return ""


def event_view(event: Event) -> dict[str, Any]:
    """An event as the timeline shows it (its whole data is in the API's events list)."""
    return {"seq": event.seq, "time": event.time, "type": event.type, "step_id": event.step_id,
            "detail": event_detail(event.type, event.data)}


def events_page(events: list[Event], *, after: int, limit: int, hidden: bool) -> dict[str, Any]:
    """Events with ``seq`` > ``after``, at most ``limit``; ``hidden``: also the replay bookkeeping records."""
    chosen = [e for e in events if e.seq > after and (hidden or e.type not in HIDDEN_EVENTS)]
    page = chosen[:limit]
    return {"events": [{**event_view(e), "data": e.data} for e in page],
            "next_after": page[-1].seq if page else after, "more": len(chosen) > limit,
            "last_seq": events[-1].seq if events else 0}


def run_view(run: Run, timeline: dict[str, Any], *, parent: str | None,
             children: Iterable[RunSummary]) -> dict[str, Any]:
    """A run: its fields, steps, pending gates, model usage, its parent and child runs."""
    from stepline.service import resume_command, secrets_in_artifacts

    usage = timeline.get("usage") or {}
    totals = timeline.get("usage_total") or dict.fromkeys(ROW, 0)
    spans = {span["step_id"]: span for span in timeline.get("steps") or []}
    finished = run.status.value == "completed"
    return {
        "run_id": run.run_id,
        "workflow": run.workflow.id,
        "workflow_name": run.workflow.name,
        "format": run.workflow.format,
        "status": run.status.value,
        "mode": run.mode,
        "executor": run.executor,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "blocked_reason": run.blocked_reason,
        "error": run.error,
        "journal_seq": run.journal_seq,
        "parent_run_id": run.parent_run_id or parent,
        "forked_at": run.forked_at,
        "children": [{"run_id": c.run_id, "workflow": c.workflow, "status": c.status} for c in children],
        "steps": [{"step_id": s.step_id, "name": s.name, "status": s.status.value, "attempts": s.attempts,
                   "started_at": s.started_at or spans.get(s.step_id, {}).get("started_at"),
                   "ended_at": s.ended_at or spans.get(s.step_id, {}).get("ended_at"),
                   "error": s.error, "blocked_reason": s.blocked_reason, "summary": s.summary,
                   "outputs": list(s.outputs),
                   # A completed run's flow did not need this step (a sprint story's `defer`, a branch not taken).
                   "not_needed": finished and s.status.value == "pending"} for s in run.steps.values()],
        "pending_gates": [gate_card(run, g) for g in timeline.get("gates") or [] if g.get("status") == "pending"],
        "continue_with": resume_command(run.run_id, run.workflow.format),
        "usage": {"steps": usage, "total": totals},
        "secrets_in_artifacts": secrets_in_artifacts(run),
    }


#: How much of a gated step's text and of the project's diff a gate card shows.
MAX_GATE_TEXT = 4000
MAX_DIFF_CHARS = 30_000


def gate_card(run: Run, gate: dict[str, Any]) -> dict[str, Any]:
    """A pending gate with what a person decides on: the gated step (its name, text and the outputs it
    declares) and what approving and rejecting do. (The page adds what the run wrote and the project's diff.)"""
    step = next((s for s in run.workflow.steps if s.id == gate.get("step_id")), None)
    name = f"Step {step.id} ({step.name})" if step is not None and step.name else f"Step {gate.get('step_id')}"
    kind = gate.get("kind")
    if kind == "question":
        approve, reject = f"{name} gets your answer when the run continues.", None
    elif kind == "tool":
        approve = "The tool call runs when the run continues."
        reject = f"The tool call is refused; {name[0].lower()}{name[1:]} fails if it needs it."
    else:
        approve = f"{name} does its work when the run continues."
        reject = (f"{name} is not done, and the run goes on without it." if step is not None
                  and step.on_reject == "skip" else f"{name} fails, and the run with it.")
    body = step.body.strip() if step is not None else ""
    return {**gate, **question_view(gate), "step_name": step.name if step is not None else None,
            "step_text": body[:MAX_GATE_TEXT], "step_text_cut": len(body) > MAX_GATE_TEXT,
            "declared_outputs": list(step.outputs) if step is not None else [],
            "approve": approve, "reject": reject}


def question_view(gate: dict[str, Any]) -> dict[str, Any]:
    """A question gate as its buttons show it: ``choices`` (each ``key`` and ``label``, as recorded with the
    question, whatever asked it: a menu, a choice, a checkpoint; empty: it takes free text) and ``question``, its
    text without the options it lists (the buttons show them). Another gate: no choices, its reason."""
    from pydantic import ValidationError

    from stepline.engine import gate_choices, gate_question
    from stepline.model import Gate

    try:
        recorded = Gate.model_validate(gate)
    except ValidationError:  # gates.json edited by hand: shown as it is, answered as free text
        return {"question": str(gate.get("reason") or ""), "choices": []}
    if recorded.kind != "question":
        return {"question": recorded.reason, "choices": []}
    choices = gate_choices(recorded)
    question = gate_question(recorded)
    listed = "  ".join(f"[{c.key}] {c.label}" for c in choices if c.label)
    if listed and question.endswith(listed):  # a menu's line of options: the buttons say them
        question = question[:-len(listed)].rstrip().rstrip(":")
    return {"question": question, "choices": [c.model_dump() for c in choices]}


def project_diff(project_root: Path) -> dict[str, Any] | None:
    """The project's changes not yet committed (``git diff HEAD``, new files by name), cut at
    :data:`MAX_DIFF_CHARS`; None when the project is not a git work tree or has no change."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(project_root), *args], capture_output=True, text=True,
                                  timeout=10, errors="replace")
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    if not (project_root / ".git").exists():
        return None
    text = git("diff", "HEAD", "--no-color", "--no-ext-diff", "--", ".", ":(exclude).stepline")
    new = git("ls-files", "--others", "--exclude-standard", "--", ".", ":(exclude).stepline")
    if text is None or new is None or not (text or new.strip()):
        return None
    return {"text": text[:MAX_DIFF_CHARS], "cut": len(text) > MAX_DIFF_CHARS, "new_files": new.split()}


def gates_view(run_dir: RunDir) -> dict[str, Any]:
    """A run's gates, pending and decided, and the decisions' records."""
    gates = [g for g in _records(run_dir, "gates.json")]
    return {"pending": [g for g in gates if g.get("status") == "pending"],
            "decided": [g for g in gates if g.get("status") != "pending"],
            "approvals": _records(run_dir, "approvals.json")}


def _records(run_dir: RunDir, name: str) -> list[dict[str, Any]]:
    found = run_dir.read(name, []) or []
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _artifact_path(project_root: Path, recorded: str) -> Path:
    """Where a recorded artifact is on disk, refused (:class:`OutsideRootError`) when it leads out of the project."""
    return confine(project_root, recorded)


def artifacts_view(run_dir: RunDir, project_root: Path) -> list[dict[str, Any]]:
    """The run's artifacts as recorded (path, sha256, step), and whether the file on disk still has that hash."""
    rows = []
    for record in _records(run_dir, "artifacts.json"):
        row = dict(record)
        try:
            path = _artifact_path(project_root, str(record.get("path", "")))
            row["current_sha256"] = _sha256(path) if path.is_file() else None
        except (OutsideRootError, OSError):
            row["current_sha256"] = None
        row["exists"] = row["current_sha256"] is not None
        row["unchanged"] = row["current_sha256"] == record.get("sha256")
        rows.append(row)
    return rows


def artifact_content(run_dir: RunDir, project_root: Path, path: str) -> dict[str, Any]:
    """One artifact the run recorded: its text (cut at :data:`MAX_ARTIFACT_BYTES`), its sha256 now and as
    recorded. Only files in the run's ``artifacts.json`` are shown.

    Raises:
        NotFoundError: the run recorded no such artifact, or the file is gone.
    """
    records = [r for r in _records(run_dir, "artifacts.json") if r.get("path") == path]
    if not records:
        raise NotFoundError(f"run {run_dir.run_id} recorded no artifact {path!r}",
                            hint=f"GET /api/runs/{run_dir.run_id}/artifacts lists them")
    on_disk = _artifact_path(project_root, path)
    try:
        data = on_disk.read_bytes()
    except OSError as exc:
        raise NotFoundError(f"artifact {path}: {exc.strerror or exc}") from None
    sha = hashlib.sha256(data).hexdigest()
    recorded = records[-1].get("sha256")
    cut = data[:MAX_ARTIFACT_BYTES]
    return {"path": path, "step_id": records[-1].get("step_id"), "size": len(data), "sha256": sha,
            "recorded_sha256": recorded, "unchanged": sha == recorded, "truncated": len(data) > len(cut),
            "content": cut.decode("utf-8", errors="replace"),
            "markdown": path.lower().endswith((".md", ".markdown"))}


#: The evidence records' codes in a person's words: the run page says these, its legend (EVIDENCE_LEGEND) the codes.
STRENGTH_WORDS = {"L0": "asserted", "L1": "checked", "L2": "verified", "invalid": "invalid"}
FIT_WORDS = {"CL1": "loose", "CL2": "close", "CL3": "exact"}
#: What each evidence term means, one sentence each: (the word shown, the code in evidence.json, the meaning).
EVIDENCE_LEGEND = (
    ("asserted", "L0", "Strength: the claim is stated, and nothing has checked it yet."),
    ("checked", "L1", "Strength: the claim was checked (a review, an inspection) and held."),
    ("verified", "L2", "Strength: the claim was verified by a test or a measurement, the strongest kind."),
    ("invalid", "invalid", "Strength: the record was found wrong, and it never counts."),
    ("loose fit", "CL1", "The evidence comes from another context than the claim's, so half its reliability counts "
                         "(×0.5)."),
    ("close fit", "CL2", "The evidence comes from a context like the claim's, so most of its reliability counts "
                         "(×0.8)."),
    ("exact fit", "CL3", "The evidence comes from the claim's own context, so all of its reliability counts (×1.0)."),
    ("score", "reliability × fit", "How much one record assures its claim: its reliability times its fit."),
    ("weakest link", "WLNK", "The lowest score among the valid, unexpired records of a step (or of the run): the "
                             "assurance is only as strong as its weakest record."),
)


def evidence_view(run_dir: RunDir) -> dict[str, Any]:
    """Evidence records with each one's score (reliability × congruence) and expiry, and the weakest link
    (WLNK) per step and for the whole run, expired and invalid records left out as the engine leaves them."""
    from pydantic import ValidationError

    from stepline.evidence import is_expired, score, wlnk
    from stepline.model import Evidence

    rows: list[dict[str, Any]] = []
    valid: dict[str, list[Evidence]] = {}
    for raw in _records(run_dir, "evidence.json"):
        row = dict(raw)
        row.update(strength=STRENGTH_WORDS.get(str(raw.get("level")), str(raw.get("level", ""))),
                   fit=FIT_WORDS.get(str(raw.get("congruence") or "CL3"), str(raw.get("congruence"))))
        try:
            record = Evidence.model_validate(raw)
        except ValidationError as exc:
            row.update(problem=f"not a valid evidence record: {exc.errors()[0]['msg']}", expired=None, score=None)
            rows.append(row)
            continue
        try:
            expired = is_expired(record)
        except ValueError:
            expired = None
        row.update(score=score(record), expired=expired)
        rows.append(row)
        if not expired and record.level != "invalid":
            valid.setdefault(record.step_id or "-", []).append(record)
    every = [r for records in valid.values() for r in records]
    return {"records": rows, "wlnk_by_step": {step: wlnk(records) for step, records in valid.items()},
            "wlnk": wlnk(every) if every else None}


def drr_view(run_dir: RunDir) -> list[dict[str, Any]]:
    """The design rationale records of the run's decisions."""
    return _records(run_dir, "drr.json")


# --- the sprint loop -----------------------------------------------------------------------------------------


def sprint_view(project: SprintProject, engine: Engine) -> dict[str, Any]:
    """The sprint board as its page shows it: each entry of sprint-status.yaml with its story's run (the loop's
    state, the stages it went through in order, the one it is at, tokens and cost against the story's budget),
    the budgets of config/sprint.yaml, and deferred-work.md. Stages the flow never started are not shown: a
    committed story's unused ``defer`` is no step left to do."""
    from stepline.sprint import board_rows, load_sprint_config

    budgets = load_sprint_config(project.root).budgets
    limit = budgets.story
    rows = board_rows(project, engine.store)
    for row in rows:
        row["stages"] = []
        if row["run"] is not None:
            run_dir = engine.store.open(row["run"])
            run = engine.load(run_dir)
            row["stages"] = [{"id": sid, "status": step.status.value, "choice": step.choice}
                             for sid, step in sorted(run.steps.items(), key=lambda item: item[1].started_at or "")
                             if step.status.value != "pending"]
            row["driven"] = run_dir.holder() is not None
        row["budget_used"] = max((row["tokens"] / limit.tokens) if limit.tokens else 0.0,
                                 (row["cost_usd"] / limit.cost_usd) if limit.cost_usd else 0.0)
    deferred = project.board_path.with_name("deferred-work.md")
    try:
        deferred_text = deferred.read_text(encoding="utf-8", errors="replace") if deferred.is_file() else None
    except OSError:
        deferred_text = None
    if deferred_text is not None:  # the loop's own markers (HTML comments) would show as text
        deferred_text = re.sub(r"^<!-- stepline .*?-->\n?", "", deferred_text, flags=re.MULTILINE)
    stories = [r for r in rows if r["kind"] == "story"]
    return {"board": _shown_path(project.board_path, project.root), "entries": rows,
            "budgets": {"mode": budgets.mode, "on_exceeded": budgets.on_exceeded,
                        "story": limit.model_dump(), "loop": budgets.run.model_dump()},
            "totals": {"tokens": sum(r["tokens"] for r in stories),
                       "cost_usd": round(sum(r["cost_usd"] for r in stories), 4),
                       "done": sum(1 for r in stories if r["status"] == "done"), "stories": len(stories)},
            "deferred": deferred_text, "deferred_path": _shown_path(deferred, project.root)}


def _shown_path(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


# --- CCW sessions --------------------------------------------------------------------------------------------


def ccw_board(session_dir: Path) -> dict[str, Any]:
    """A CCW session as a board: its tasks with their wave (the planner's, over all tasks), status, group,
    agent, dependencies and summary (``.summaries/<id>-summary.md`` when it exists)."""
    from stepline.ccw import infer_agent, plan_workflow_waves, read_ccw_session

    session = read_ccw_session(session_dir)
    spec = session.to_workflow_spec()
    wave_of: dict[str, int] = {}
    for wave in plan_workflow_waves(spec, completed=()):
        for task_id in (*wave.tasks, *wave.containers_completed):
            wave_of.setdefault(task_id, wave.index)
    summaries = session_dir / ".summaries"
    tasks = []
    for task_id, ref in session.tasks.items():
        summary_path = summaries / f"{task_id}-summary.md"
        try:
            summary = summary_path.read_text(encoding="utf-8", errors="replace") if summary_path.is_file() else None
        except OSError:
            summary = None
        tasks.append({"id": task_id, "title": ref.title, "status": session.status[task_id],
                      "wave": wave_of.get(task_id), "group": ref.execution_group,
                      "agent": infer_agent(ref.agent, ref.type), "depends_on": list(ref.depends_on),
                      "parent": ref.parent, "container": bool(session.children.get(task_id)),
                      "summary": summary})
    leaves = [t for t in tasks if not t["container"]]
    return {"session_id": session.session_id, "path": str(session.session_dir), "layout": session.layout,
            "project": str(session.session.get("project") or session.session.get("description") or ""),
            "status": session.session.get("status"), "execution_model": session.strategy.model,
            "done": sum(1 for t in leaves if t["status"] == "completed"), "total": len(leaves),
            "conflicts": list(session.conflicts), "tasks": tasks}
