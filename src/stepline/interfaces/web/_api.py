"""The REST API under ``/api`` (its OpenAPI document is ``/api/openapi.json``): runs, events (paged and live),
artifacts, evidence, DRRs, gates and their decisions, CCW sessions. Every route needs the token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field

from stepline.errors import JournalError, NotFoundError, RunStateError
from stepline.interfaces.web._index import file_stat, shown_status
from stepline.interfaces.web._state import WebState, authenticate, check_cross_site, state_of
from stepline.interfaces.web._tail import JournalTail, TailReset
from stepline.interfaces.web._views import (
    HIDDEN_EVENTS,
    artifact_content,
    artifacts_view,
    ccw_board,
    drr_view,
    event_view,
    events_page,
    evidence_view,
    gates_view,
    run_view,
    summary_view,
)
from stepline.store import RunDir

if TYPE_CHECKING:
    from stepline.sprint import SprintProject

__all__ = ["POLL_SECONDS", "SPRINT_STORY", "api", "continuation_view", "run_detail", "runs_page", "sprint_project",
           "start_continuation"]

#: The workflow id of a sprint story's run starts with this (the sprint loop names them so).
SPRINT_STORY = "sprint-story:"

#: How often a live stream looks at the journal's size and modification time.
POLL_SECONDS = 0.25
#: A comment line sent when nothing happened for this long, so that proxies and browsers keep the stream.
KEEPALIVE_SECONDS = 15.0

# Declared for the OpenAPI document (an "Authorize" button); the check itself is `authenticate`.
_bearer = HTTPBearer(auto_error=False, description="The token `stepline serve` printed (or --token).")


def _authenticated(request: Request, _: Annotated[Any, Depends(_bearer)] = None) -> str:
    return authenticate(request)


Auth = Annotated[str, Depends(_authenticated)]
State = Annotated[WebState, Depends(state_of)]
api = APIRouter(prefix="/api", dependencies=[Depends(_authenticated)])


class Decision(BaseModel):
    """An approval or a rejection."""

    by: str = Field(min_length=1, description="Who decides (recorded in approvals.json).")
    notes: str | None = Field(default=None, description="Why (recorded with the decision).")


class Answer(BaseModel):
    """The answer to a pending question."""

    by: str = Field(min_length=1, description="Who answers.")
    answer: str = Field(description="The answer; for a menu, the key of an option.")


def runs_page(state: WebState, status: str | None, workflow: str | None, page: int, per_page: int) -> dict[str, Any]:
    """One page of the runs list (newest first), as the API returns it."""
    found = state.index.page(status=status, workflow=workflow, page=page, per_page=per_page)
    return {"runs": [summary_view(row, shown_status(row), found.parents.get(row.run_id)) for row in found.rows],
            "total": found.total, "page": found.page, "per_page": found.per_page, "pages": found.pages}


def run_detail(state: WebState, run_id: str) -> dict[str, Any]:
    """A run rebuilt from its journal; a damaged run directory is ``status: damaged`` with the error, one that
    recorded nothing yet ``starting`` (its process is alive) or ``not started``."""
    from stepline.engine import build_timeline

    run_dir = state.run_dir(run_id)
    try:
        run = state.load(run_dir)
        timeline = build_timeline(run_dir)
    except RunStateError as exc:
        # It recorded nothing yet: its process is setting up its first steps, or it stopped before (a full disk).
        starting = run_dir.holder() is not None
        return {"run_id": run_dir.run_id, "status": "starting" if starting else "not started",
                "damage": None if starting else exc.format_message(), "parent_run_id": None, "children": []}
    except JournalError as exc:
        return {"run_id": run_dir.run_id, "status": "damaged", "damage": exc.format_message(),
                "parent_run_id": state.index.parent_of(run_dir.run_id),
                "children": [{"run_id": c.run_id, "workflow": c.workflow, "status": c.status}
                             for c in state.index.children_of(run_dir.run_id)]}
    return {**run_view(run, timeline, parent=state.index.parent_of(run.run_id),
                       children=state.index.children_of(run.run_id)), "driver_pid": run_dir.holder(),
            "continuation": continuation_view(state, run.run_id),
            "cannot_go_on_here": None if run.status.value == "completed" else state.runs.unattended(run_dir)}


def continuation_view(state: WebState, run_id: str) -> dict[str, Any] | None:
    """Whether this server continues the run now, and what stopped it when it could not go on."""
    continuation = state.continuations.get(run_id)
    return None if continuation is None else {"active": continuation.active, "error": continuation.error}


def start_continuation(state: WebState, run_id: str) -> dict[str, Any]:
    """Continue a run in the background once no gate of it waits (RunStateError naming the gate otherwise)."""
    pending, _ = state.runs.pending_gates(run_id)
    if pending:
        gate = pending[0]
        raise RunStateError(f"run {run_id} waits for a person at {gate.get('gate_id')} ({gate.get('reason')})",
                            hint="decide it first: POST …/gates/{gate}/approve, /reject or /answer")
    state.continuations.start(run_id)
    return {"run_id": run_id, "continuing": True, "stream": f"/api/runs/{run_id}/stream"}


@api.get("/runs", summary="List runs (newest first, paged)")
def list_runs(state: State,
              status: Annotated[str | None, Query(description="running, blocked, completed, failed, damaged, "
                                                              "interrupted or not started")] = None,
              workflow: Annotated[str | None, Query(description="A part of the workflow id")] = None,
              page: Annotated[int, Query(ge=1)] = 1,
              per_page: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    """Every run of the project from its manifest, filtered and paged; a damaged run is listed with its damage."""
    return runs_page(state, status, workflow, page, per_page)


@api.get("/runs/{run_id}", summary="A run: steps, pending gates, usage, parent and child runs")
def get_run(state: State, run_id: str) -> dict[str, Any]:
    """The run as its journal has it (a unique part of the id is enough)."""
    return run_detail(state, run_id)


@api.get("/runs/{run_id}/events", summary="A run's journal events (paged)")
def get_events(state: State, run_id: str,
               after: Annotated[int, Query(ge=0, description="Only events with a greater seq")] = 0,
               limit: Annotated[int, Query(ge=1, le=1000)] = 200,
               hidden: Annotated[bool, Query(description="Also replay bookkeeping records")] = False,
               ) -> dict[str, Any]:
    """Events in journal order with their data; page on with ``after=next_after`` while ``more``."""
    return events_page(state.run_dir(run_id).events(), after=after, limit=limit, hidden=hidden)


@api.get("/runs/{run_id}/stream", summary="A run's new events, live (server-sent events)",
         response_class=StreamingResponse)
async def stream_events(state: State, request: Request, run_id: str,
                        after: Annotated[int, Query(ge=0, description="Send events with a greater seq")] = 0,
                        ) -> StreamingResponse:
    """``text/event-stream``: one ``journal`` event per new record (``id`` is its seq), ``reset`` when the
    journal was cut back (reload), ``damaged`` when a new record is damaged, ``driver`` (``{"pid": …}``, null
    when none) first and whenever the process driving the run (the holder of its lock) comes or goes, and
    ``continuation`` (``{"active", "error"}``) whenever this server's continuing of the run starts or ends. Reads
    only the bytes appended since the last look; never takes the run's lock."""
    run_dir = state.run_dir(run_id)
    resume_from = request.headers.get("last-event-id", "")
    if resume_from.isdigit():
        after = max(after, int(resume_from))
    return StreamingResponse(_follow(request, state, run_dir, after),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _sse(event: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


async def _follow(request: Request, state: WebState, run_dir: RunDir, after: int) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    tail = JournalTail(run_dir.journal_path, run_dir.run_id)
    driver: int | None = None
    told = False
    continuation: dict[str, Any] | None = None
    yield b"retry: 2000\n\n"
    while not state.stopping() and not await request.is_disconnected():
        holder = run_dir.holder()  # one flock probe: "live" means a process drives the run, not that we stream
        if not told or holder != driver:
            driver, told = holder, True
            yield _sse("driver", {"pid": holder})
        continued = continuation_view(state, run_dir.run_id)
        if continued != continuation:
            continuation = continued
            yield _sse("continuation", continued)
        try:
            events = tail.read_new()
        except TailReset as exc:
            yield _sse("reset", {"reason": str(exc)})
            return
        except JournalError as exc:
            yield _sse("damaged", {"error": exc.format_message()})
            return
        sent = False
        for event in events:
            if event.seq > after and event.type not in HIDDEN_EVENTS:
                yield _sse("journal", event_view(event), event.seq)
                sent = True
        now = loop.time()
        if sent:
            quiet_since = now
        elif now - quiet_since > KEEPALIVE_SECONDS:
            yield b": keepalive\n\n"
            quiet_since = now
        await asyncio.sleep(POLL_SECONDS)


@api.get("/runs/{run_id}/artifacts", summary="A run's artifacts with sha256")
def get_artifacts(state: State, run_id: str) -> list[dict[str, Any]]:
    """Each recorded artifact: path, step, sha256 as recorded, and whether the file on disk still has it."""
    return artifacts_view(state.run_dir(run_id), state.project_root)


@api.get("/runs/{run_id}/artifacts/content", summary="One artifact's content and sha256")
def get_artifact(state: State, run_id: str,
                 path: Annotated[str, Query(description="The artifact's path as artifacts.json records it")],
                 ) -> dict[str, Any]:
    """The file's text (cut past 2 MB), its sha256 now and as recorded; only recorded artifacts are served."""
    return artifact_content(state.run_dir(run_id), state.project_root, path)


@api.get("/runs/{run_id}/evidence", summary="Evidence with scores, expiry and WLNK")
def get_evidence(state: State, run_id: str) -> dict[str, Any]:
    """Evidence records, each with its score and whether it expired; the weakest link per step and overall."""
    return evidence_view(state.run_dir(run_id))


@api.get("/runs/{run_id}/drr", summary="Design rationale records")
def get_drr(state: State, run_id: str) -> list[dict[str, Any]]:
    """The DRR written for each gate decision."""
    return drr_view(state.run_dir(run_id))


@api.get("/runs/{run_id}/gates", summary="A run's gates, pending and decided")
def get_gates(state: State, run_id: str) -> dict[str, Any]:
    """Pending and decided gates, and the approvals (who, when, why)."""
    return gates_view(state.run_dir(run_id))


@api.get("/gates", summary="Pending gates of every run")
def pending_gates(state: State) -> list[dict[str, Any]]:
    """What waits for a person, in every run that can be read (as ``stepline gates``)."""
    rows: list[dict[str, Any]] = []
    for summary in state.index.rows():
        if summary.damage is not None or summary.status not in ("blocked", "running"):
            continue  # a gate opens in a running run and stays open once it stops blocked
        try:
            pending = gates_view(state.run_dir(summary.run_id))["pending"]
        except JournalError:
            continue
        rows += [{"run_id": summary.run_id, **gate} for gate in pending]
    return rows


def _decide(state: WebState, request: Request, how: str, run_id: str, gate_id: str, *, approved: bool,
            by: str, notes: str | None, answer: str | None = None) -> dict[str, Any]:
    check_cross_site(request, how)
    run_dir = state.run_dir(run_id)
    decided = state.runs.answer(run_dir.run_id, answer, gate_id=gate_id, by=by) if answer is not None else \
        state.runs.decide(run_dir.run_id, gate_id, approved=approved, by=by, notes=notes)
    return {"run_id": run_dir.run_id, "gate": decided.gate.model_dump(),
            "next": state.runs.resume_command(run_dir)}


@api.post("/runs/{run_id}/gates/{gate_id:path}/approve", summary="Approve a pending gate")
def approve(state: State, request: Request, how: Auth, run_id: str, gate_id: str, body: Decision) -> dict[str, Any]:
    """Recorded as ``stepline approve`` records it; then ``next`` (``stepline resume RUN``) continues the run."""
    return _decide(state, request, how, run_id, gate_id, approved=True, by=body.by, notes=body.notes)


@api.post("/runs/{run_id}/gates/{gate_id:path}/reject", summary="Reject a pending gate")
def reject(state: State, request: Request, how: Auth, run_id: str, gate_id: str, body: Decision) -> dict[str, Any]:
    """The gated step fails when the run is resumed."""
    return _decide(state, request, how, run_id, gate_id, approved=False, by=body.by, notes=body.notes)


@api.post("/runs/{run_id}/gates/{gate_id:path}/answer", summary="Answer a pending question")
def answer(state: State, request: Request, how: Auth, run_id: str, gate_id: str, body: Answer) -> dict[str, Any]:
    """Recorded as ``stepline answer`` records it; then ``next`` (``stepline resume RUN``) continues the run."""
    return _decide(state, request, how, run_id, gate_id, approved=True, by=body.by, notes=None, answer=body.answer)


@api.post("/runs/{run_id}/continue", summary="Continue a run here, in the background", status_code=202)
def continue_run(state: State, request: Request, how: Auth, run_id: str) -> dict[str, Any]:
    """The server resumes the run with the executor it was started with, until it completes, fails or blocks at
    its next gate; ``stream`` follows it. 409 when a gate still waits or another process drives the run; 400
    when only a person at a terminal can continue it (the message names the command)."""
    check_cross_site(request, how)
    return start_continuation(state, state.run_dir(run_id).run_id)


def sprint_project(state: WebState) -> SprintProject:
    """The project's sprint loop view, or NotFoundError when it has no sprint-status.yaml."""
    from stepline.sprint import find_project

    project = find_project(state.project_root)
    if not project.board_path.is_file():
        raise NotFoundError(f"no sprint board: {project.board_path} does not exist",
                            hint="BMAD's sprint-planning writes sprint-status.yaml; `stepline sprint run` then "
                                 "works through it")
    return project


@api.get("/sprint", summary="The sprint board (sprint-status.yaml and each story's loop run)")
def sprint_board(state: State) -> dict[str, Any]:
    """What `stepline sprint status --json` gives: each story's status, the loop's state and stage, builds,
    tokens and cost, last event (read-only). 404 when the project has no sprint-status.yaml."""
    from stepline.sprint import board_rows

    project = sprint_project(state)
    return {"board": str(project.board_path), "entries": board_rows(project, state.runs.store)}


@api.get("/sprint/stream", summary="The sprint board's changes, live (server-sent events)",
         response_class=StreamingResponse)
async def sprint_stream(state: State, request: Request) -> StreamingResponse:
    """``text/event-stream``: a ``changed`` event whenever the board, deferred-work.md, or a story's run (its
    journal or who drives it) changes; the page then fetches the board again. Only file sizes and times are
    looked at between two changes."""
    project = sprint_project(state)
    return StreamingResponse(_watch_sprint(request, state, project), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _sprint_fingerprint(state: WebState, project: SprintProject) -> tuple[Any, ...]:
    board = project.board_path
    runs = state.index.store.root
    stories = sorted(row.run_id for row in state.index.rows() if row.workflow.startswith(SPRINT_STORY))
    return (file_stat(board), file_stat(board.with_name("deferred-work.md")),
            *((file_stat(runs / run_id / "journal.jsonl"), file_stat(runs / run_id / "lock")) for run_id in stories))


async def _watch_sprint(request: Request, state: WebState, project: SprintProject) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    seen = await asyncio.to_thread(_sprint_fingerprint, state, project)
    quiet_since = loop.time()
    changes = 0
    yield b"retry: 2000\n\n"
    while not state.stopping() and not await request.is_disconnected():
        await asyncio.sleep(POLL_SECONDS * 2)
        now = await asyncio.to_thread(_sprint_fingerprint, state, project)
        if now != seen:
            seen, changes = now, changes + 1
            yield _sse("changed", {"changes": changes}, changes)
            quiet_since = loop.time()
        elif loop.time() - quiet_since > KEEPALIVE_SECONDS:
            yield b": keepalive\n\n"
            quiet_since = loop.time()


@api.get("/ccw/sessions", summary="CCW sessions of the project")
def ccw_sessions(state: State) -> list[dict[str, Any]]:
    """Active, legacy and archived sessions: id, project, done/total."""
    from stepline.ccw import discover_sessions

    try:
        found = discover_sessions(state.project_root, include_inactive=True)
    except NotFoundError:
        return []
    return [{"id": s.id, "project": s.project, "done": s.done, "total": s.total, "percent": s.percent,
             "layout": s.layout, "active": s.active, "status": s.status} for s in found]


def session_dir(state: WebState, session_id: str) -> Path:
    """A session folder from its id (or a unique part of it)."""
    from stepline.ccw import find_session

    return find_session(state.project_root, session_id).path.resolve()


@api.get("/ccw/sessions/{session_id}", summary="A CCW session's tasks: wave, status, summary")
def ccw_session(state: State, session_id: str) -> dict[str, Any]:
    """Every task with its wave, status, execution group, agent, dependencies and summary (read-only)."""
    return ccw_board(session_dir(state, session_id))
