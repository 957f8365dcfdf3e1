"""The server-rendered pages: login, runs list, a run (live), an artifact, CCW sessions and a session's board.

Each page needs the login cookie (or the bearer token); a gate decision is a plain form POST carrying the CSRF
value, sent through the same run service as the API.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from stepline.errors import JournalError, NotFoundError, RunStateError, SteplineError, UsageError
from stepline.interfaces.web._api import run_detail, runs_page, session_dir
from stepline.interfaces.web._auth import COOKIE, CSRF_FIELD
from stepline.interfaces.web._markdown import render_markdown
from stepline.interfaces.web._state import (
    CrossSiteRefused,
    NotAuthenticated,
    WebState,
    authenticate,
    check_cross_site,
    state_of,
)
from stepline.interfaces.web._views import (
    artifact_content,
    artifacts_view,
    drr_view,
    evidence_view,
    gates_view,
    project_diff,
)

__all__ = ["error_page", "login_page", "pages", "refused_page", "templates"]

templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
templates.env.filters["markdown"] = render_markdown
templates.env.filters["urlquote"] = lambda value: quote(str(value), safe="")

State = Annotated[WebState, Depends(state_of)]
Authenticated = Annotated[str, Depends(authenticate)]
pages = APIRouter(include_in_schema=False)

#: The newest events a run page lists (the API pages through all of them).
TIMELINE_ROWS = 500
#: The status columns of a CCW board, in the order work flows through them.
BOARD_COLUMNS = ("pending", "in_progress", "blocked", "completed", "failed", "skipped", "container")


def _render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    state = state_of(request)
    return templates.TemplateResponse(request, name, {"csrf_field": CSRF_FIELD, "csrf": state.auth.csrf_value,
                                                      **context}, status_code=status_code)


def login_page(request: Request, *, error: str | None = None, status_code: int = 401) -> HTMLResponse:
    """The login form (401 when it stands for a page that needs the token, saying so)."""
    target = request.url.path if request.url.path != "/login" else "/"
    if request.url.query and request.url.path != "/login":
        target += "?" + request.url.query
    if error is None and request.url.path != "/login":
        error = ("Your decision was not recorded: this browser is not logged in (or `stepline serve` was restarted "
                 "with another token). Log in, then decide again." if request.method == "POST" else
                 "This page needs the dashboard's token.")
        if request.method == "POST":
            target = request.headers.get("referer") or "/"
            target = urlsplit(target).path or "/"
    return templates.TemplateResponse(request, "login.html", {"next": request.query_params.get("next", target),
                                                              "error": error}, status_code=status_code)


def _safe_next(target: str) -> str:
    """Only a path of this server (``/…``, not ``//host``) may follow a login."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


@pages.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    """The login form; already logged in: the runs list."""
    try:
        authenticate(request)
    except NotAuthenticated:
        return login_page(request, status_code=200)
    return RedirectResponse(_safe_next(request.query_params.get("next", "/")), status_code=303)


@pages.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check the token; set the HttpOnly session cookie and go on to the page asked for."""
    from stepline.interfaces.web._auth import same_origin

    form = await request.form()
    token = form.get("token")
    target = form.get("next")
    if not same_origin(request.headers.get("origin"), request.headers.get("referer"),
                       request.headers.get("sec-fetch-site"), request.headers.get("host"), request.url.scheme):
        return login_page(request, error="This login came from another site.", status_code=403)
    state = state_of(request)
    if not state.auth.token_matches(token if isinstance(token, str) else None):
        return login_page(request, error="That is not the token `stepline serve` printed.")
    response = RedirectResponse(_safe_next(target if isinstance(target, str) else "/"), status_code=303)
    response.set_cookie(COOKIE, state.auth.session_value, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return response


@pages.post("/logout")
async def logout(request: Request, how: Authenticated) -> Response:
    """Forget the session cookie."""
    check_cross_site(request, how, await request.form())
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


@pages.get("/", response_class=HTMLResponse)
def runs_list(request: Request, state: State, _: Authenticated,
              status: Annotated[str | None, Query()] = None, workflow: Annotated[str | None, Query()] = None,
              page: Annotated[int, Query(ge=1)] = 1,
              per_page: Annotated[int, Query(ge=1, le=500)] = 50) -> HTMLResponse:
    """Every run, newest first, filtered and paged; a damaged run's row says what is wrong."""
    listing = runs_page(state, status or None, workflow or None, page, per_page)
    return _render(request, "runs.html", listing=listing, status=status or "", workflow=workflow or "",
                   statuses=("starting", "running", "blocked", "completed", "failed", "interrupted", "damaged",
                             "not started"))


@pages.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, state: State, _: Authenticated, run_id: str) -> HTMLResponse:
    """A run: steps, pending gate, artifacts, evidence, decisions, usage and its timeline, followed live."""
    return _run_page(request, state, run_id, notice=_decided_notice(state, run_id, request.query_params.get("decided")))


def _run_page(request: Request, state: WebState, run_id: str, *, notice: str | None = None,
              refused: str | None = None, status_code: int = 200) -> HTMLResponse:
    """The run page; ``refused``: why the answer just given was refused (nothing was recorded)."""
    run = run_detail(state, run_id)
    run_dir = state.run_dir(run["run_id"])
    if run["status"] in ("damaged", "starting", "not started"):
        return _render(request, "run.html", run=run, damaged=run["status"] != "starting",
                       starting=run["status"] == "starting")
    try:
        events = run_dir.events()
        artifacts = artifacts_view(run_dir, state.project_root)
        evidence = evidence_view(run_dir)
        gates = gates_view(run_dir)
        drr = drr_view(run_dir)
    except JournalError as exc:  # the run changed between two reads and is damaged now
        run = {**run, "status": "damaged", "damage": exc.format_message()}
        return _render(request, "run.html", run=run, damaged=True)
    from stepline.interfaces.web._views import EVIDENCE_LEGEND, HIDDEN_EVENTS, event_view

    shown = [e for e in events if e.type not in HIDDEN_EVENTS]
    timeline = [event_view(e) for e in shown[-TIMELINE_ROWS:]]
    diff = project_diff(state.project_root) if run["pending_gates"] else None
    return _render(request, "run.html", status_code=status_code, run=run, damaged=False, timeline=timeline,
                   earlier=max(0, len(shown) - TIMELINE_ROWS),
                   last_seq=events[-1].seq if events else 0, artifacts=artifacts, evidence=evidence, gates=gates,
                   evidence_legend=EVIDENCE_LEGEND, drr=drr, diff=diff,
                   decided_by=request.cookies.get("stepline_by") or state.person(), notice=notice, refused=refused)


def _decided_notice(state: WebState, run_id: str, gate_id: str | None) -> str | None:
    """What the person just decided, in words: ``ask:…: answered A (Approve) by ada``."""
    if not gate_id:
        return None
    gate = next((g for g in gates_view(state.run_dir(run_id))["decided"] if g.get("gate_id") == gate_id), None)
    if gate is None:
        return None
    who = f" by {gate.get('approver')}" if gate.get("approver") else ""
    if gate.get("kind") == "question" and gate.get("answer") is not None:
        label = next((c.get("label") for c in gate.get("choices") or () if isinstance(c, dict)
                      and c.get("key") == gate["answer"] and c.get("label")), None)
        return f"{gate_id}: answered {gate['answer']}{f' ({label})' if label else ''}{who}."
    return f"{gate_id}: {gate.get('status')}{who}."


@pages.get("/runs/{run_id}/artifact", response_class=HTMLResponse)
def artifact_page(request: Request, state: State, _: Authenticated, run_id: str,
                  path: Annotated[str, Query()]) -> HTMLResponse:
    """One artifact, Markdown rendered (raw HTML in it escaped), anything else as text."""
    run_dir = state.run_dir(run_id)
    return _render(request, "artifact.html", run_id=run_dir.run_id, artifact=artifact_content(run_dir,
                   state.project_root, path))


@pages.post("/runs/{run_id}/gates/{gate_id:path}", response_class=HTMLResponse)
async def decide(request: Request, state: State, how: Authenticated, run_id: str, gate_id: str) -> Response:
    """Approve, reject or answer a gate from the run page's form; once no gate waits, the run goes on here (see
    :mod:`._continue`); back to the run page, which follows it. A refused answer shows the page again, saying so."""
    form = await request.form()
    check_cross_site(request, how, form)
    decision = str(form.get("decision") or "")
    by = str(form.get("by") or "").strip()
    notes = str(form.get("notes") or "").strip() or None
    if decision not in ("approve", "reject", "answer"):
        raise CrossSiteRefused(f"it asked for {decision!r}, which is no decision (approve, reject or answer)",
                               "Use the Approve, Reject or Answer button of the run's page.")
    if not by:
        return _render(request, "error.html", status_code=400, title="A name is needed",
                       message="Say who decides (it is recorded in approvals.json).", back=f"/runs/{run_id}")
    import asyncio

    run_dir = state.run_dir(run_id)
    if decision == "answer":
        try:
            await asyncio.to_thread(state.runs.answer, run_dir.run_id, str(form.get("answer") or ""),
                                    gate_id=gate_id, by=by)
        except UsageError as exc:  # not among the question's options: nothing was recorded
            return _run_page(request, state, run_dir.run_id, refused=exc.format_message(), status_code=400)
    else:
        await asyncio.to_thread(state.runs.decide, run_dir.run_id, gate_id, approved=decision == "approve", by=by,
                                notes=notes)
    await asyncio.to_thread(_go_on, state, run_dir.run_id)
    response = RedirectResponse(f"/runs/{quote(run_dir.run_id)}?decided={quote(gate_id)}", status_code=303)
    response.set_cookie("stepline_by", by, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


def _go_on(state: WebState, run_id: str) -> None:
    """Continue the run once no gate of it waits, when it can go on without a person at a terminal (else its
    page says why, and the command that continues it)."""
    if state.runs.pending_gates(run_id)[0] or state.runs.unattended(state.run_dir(run_id)) is not None:
        return
    with contextlib.suppress(RunStateError):  # another process drives it now (it read the decision): its page
        state.continuations.start(run_id)     # follows it


@pages.post("/runs/{run_id}/continue", response_class=HTMLResponse)
async def continue_run(request: Request, state: State, how: Authenticated, run_id: str) -> Response:
    """Continue a blocked run whose gates are all decided (the run page's Continue button)."""
    import asyncio

    from stepline.interfaces.web._api import start_continuation

    check_cross_site(request, how, await request.form())
    run_dir = state.run_dir(run_id)
    await asyncio.to_thread(start_continuation, state, run_dir.run_id)
    return RedirectResponse(f"/runs/{quote(run_dir.run_id)}", status_code=303)


@pages.get("/sprint", response_class=HTMLResponse)
def sprint_page(request: Request, state: State, _: Authenticated) -> HTMLResponse:
    """The sprint board: stories in sprint order with their loop's stages and budget, deferred work; it follows
    the loop live (``/api/sprint/stream``)."""
    from stepline.interfaces.web._api import sprint_project
    from stepline.interfaces.web._views import sprint_view

    return _render(request, "sprint.html", sprint=sprint_view(sprint_project(state), state.runs.engine()))


@pages.get("/ccw", response_class=HTMLResponse)
def ccw_sessions_page(request: Request, state: State, _: Authenticated) -> HTMLResponse:
    """The project's CCW sessions."""
    from stepline.interfaces.web._api import ccw_sessions

    return _render(request, "ccw_sessions.html", sessions=ccw_sessions(state))


@pages.get("/ccw/{session_id}", response_class=HTMLResponse)
def ccw_board_page(request: Request, state: State, _: Authenticated, session_id: str) -> HTMLResponse:
    """A session as a board: a row per wave, a column per status; the runs that executed it."""
    from stepline.interfaces.web._views import ccw_board

    board = ccw_board(session_dir(state, session_id))
    waves: dict[int | None, dict[str, list[dict[str, Any]]]] = {}
    for task in board["tasks"]:
        waves.setdefault(task["wave"], {}).setdefault(task["status"], []).append(task)
    columns = [c for c in BOARD_COLUMNS if any(c in row for row in waves.values())]
    columns += sorted({s for row in waves.values() for s in row} - set(columns))
    order = sorted(waves, key=lambda w: (w is None, w if w is not None else 0))
    runs = runs_page(state, None, board["session_id"], 1, 20)["runs"]
    runs = [r for r in runs if r["workflow"] == board["session_id"]]
    return _render(request, "ccw_board.html", board=board, waves=[(w, waves[w]) for w in order],
                   columns=columns, runs=runs)


def refused_page(request: Request, exc: CrossSiteRefused) -> HTMLResponse:
    """A refused decision as a page: that nothing changed, why, and what to do."""
    return _render(request, "error.html", status_code=403, title="Refused: nothing was changed",
                   message=f"This decision was refused because {exc.why}.", advice=exc.advice,
                   back=request.headers.get("referer") or "/")


def error_page(request: Request, exc: SteplineError, status_code: int) -> HTMLResponse:
    """A user error as a page: the one line, and the fix."""
    title = "Not found" if isinstance(exc, NotFoundError) else "That did not work"
    return _render(request, "error.html", status_code=status_code, title=title, message=exc.format_message(),
                   back=request.headers.get("referer") or "/")
