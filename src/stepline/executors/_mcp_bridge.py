"""The ``mcp-bridge`` executor: a step's work arrives as protocol calls over MCP, made by an agent elsewhere.

The runtime still owns the step. :meth:`StepBridge.serve` (what ``perform`` does) publishes the request under an
id of its own (``r1``, ``r2``, …), then takes the protocol calls that MCP tool handlers :meth:`~StepBridge.submit`
for that id, one at a time and in order, runs each on the request's journaled session and hands its result back
to the handler; ``finish`` (or ``decide``) ends the request. Several requests can wait at once — steps of a
workflow's parallel wave, a skill's review layers run as parallel subagents — and each is served on its own, so
one agent can do them in any order or several agents at once; a call names the request it is for, and may leave
the id out only while exactly one is waiting. So an IDE agent or a CLI agent does the work while stepline keeps
the order, the state, the journal and the checks. A call with bad arguments is refused back to the agent (it can
correct itself); an error that ends the step (a blocked gate, a failed required tool, a cancelled step) is
reported to the agent and raised to the engine.

A question for the person is published and answered the same way (:meth:`StepBridge.ask_person`).

:func:`add_step_tools` registers the protocol as MCP tools on a server; :func:`serve_http` serves such a
server on a free loopback port for the length of one step (how a CLI agent subprocess reaches it), answering
only requests that carry the step's secret (``Authorization: Bearer <token>``): another local process that finds
the port can neither do the step's work nor write into the project.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field

from stepline.errors import ExecutorError, OutsideRootError, SteplineError, UsageError
from stepline.executors._base import Executor
from stepline.executors._dryrun import default_choice
from stepline.executors._protocol import (
    MenuOption,
    StepRequest,
    StepSession,
    WriteMode,
    choice_fits,
    match_answer,
    options_named,
)

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["McpBridgeExecutor", "PendingQuestion", "RequestId", "StepBridge", "add_step_tools", "replay_calls",
           "serve_http", "step_payload"]

_ENDING = frozenset({"finish", "decide"})
_PROTOCOL = ("read", "ask", "write_output", "set_var", "call_tool", "decide", "finish")
#: The id of the work request whose protocol call is running in this task: a question the call raises (``ask``)
#: is published as that request's.
_SERVING: ContextVar[str | None] = ContextVar("stepline_mcp_serving", default=None)

#: The ``request_id`` parameter every protocol tool takes.
RequestId = Annotated[str | None, Field(
    description="The id of the waiting request this call is for, as current_step lists it (request_id, e.g. "
                "'r3'). May be left out only while exactly one request is waiting.")]


@dataclass(slots=True)
class _Call:
    method: str
    args: dict[str, Any]
    result: asyncio.Future[Any]


@dataclass(slots=True, eq=False)
class _Work:
    """A work request waiting for the agent's protocol calls."""

    request_id: str
    request: StepRequest
    queue: asyncio.Queue[_Call] = field(default_factory=asyncio.Queue)
    #: The held ``finish``/``decide`` call (``hold_final``): ``{"method": ..., "args": {...}}``.
    final: dict[str, Any] | None = None
    #: Every call that reached the session, in order (what a resumed step replays).
    calls: list[dict[str, Any]] = field(default_factory=list)
    #: The work request whose call raised this one (an ``ask`` answered as the user in yolo), if any.
    asked_by: str | None = None

    def payload(self) -> dict[str, Any]:
        data = step_payload(self.request, request_id=self.request_id)
        if self.asked_by is not None:
            data["asked_by"] = self.asked_by
        return data


def step_payload(request: StepRequest, *, request_id: str | None = None) -> dict[str, Any]:
    """What an agent is shown of a request: only the current step (just-in-time), whose it is and how to end it.

    ``request_id``: the id the bridge published it under; the calls doing its work pass it.
    """
    data = request.to_dict()
    if request_id is not None:
        data = {"request_id": request_id, "waiting_for": "work", **data}
    layer = request.context.get("subagent")
    if layer:  # one of a step's parallel subagents: its own fresh context, only its instruction
        data["layer"] = layer
    data["ends_with"] = "decide(value, reason)" if request.kind == "decide" else "finish(choice?, summary?)"
    return data


@dataclass(slots=True)
class PendingQuestion:
    """A question waiting for the person's answer (the agent relays it): a step's menu or a plain question."""

    request_id: str
    run_id: str
    step_id: str
    gate_id: str
    question: str
    choices: list[str] | None
    menu: list[MenuOption]
    #: Resolved with ``(answer, by)``.
    answer: asyncio.Future[tuple[str, str]]
    #: The work request whose ``ask`` raised it (its further calls wait for the answer), if any.
    asked_by: str | None = None
    layer: str | None = None

    def payload(self) -> dict[str, Any]:
        """What the agent is shown: the kind (``menu`` or ``question``), the question, its options."""
        data = {"request_id": self.request_id, "waiting_for": "answer",
                "kind": "menu" if self.menu else "question", "run_id": self.run_id, "step_id": self.step_id,
                "gate_id": self.gate_id, "question": self.question, "choices": self.choices,
                "menu": [asdict(o) for o in self.menu],
                "ends_with": f"answer(run_id, answer, request_id={self.request_id!r}): ask the user, then pass "
                             "their answer" + (" (one of the choices)" if self.choices else "")}
        if self.asked_by is not None:
            data["asked_by"] = self.asked_by
        if self.layer:
            data["layer"] = self.layer
        return data

    def match(self, text: str) -> str:
        """The answer as the runtime takes it: one of the choices (by key or menu label, any case), else refused."""
        if not self.choices:
            return text
        options = self.menu or [MenuOption(key=choice, label="") for choice in self.choices]
        matched = match_answer(text, options)
        if matched is None:
            raise UsageError(f"{text!r} is not an answer to {self.question!r}",
                             hint=f"answer one of: {options_named(options)}")
        return matched.key


class StepBridge:
    """Hands the requests waiting for work to whoever submits protocol calls, and runs those calls on their sessions.

    Args:
        hold_final: keep ``finish``/``decide`` in :attr:`final` instead of passing it to the session, so the
            caller can do more (record the agent's session id) before the request ends.
    """

    def __init__(self, *, hold_final: bool = False) -> None:
        self.hold_final = hold_final
        #: Of the request served last (a ``hold_final`` bridge serves one): its held ``finish``/``decide`` call
        #: (``{"method": ..., "args": {...}}``) and every call that reached its session, in order.
        self.final: dict[str, Any] | None = None
        self.calls: list[dict[str, Any]] = []
        self._pending: dict[str, _Work | PendingQuestion] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` holds; it is checked whenever a request or question comes or goes."""
        while not predicate():
            await self._changed.wait()

    def pending(self) -> list[dict[str, Any]]:
        """Every request waiting now — work requests and questions for the person — as the agent is shown them,
        in the order they came."""
        return [item.payload() for item in self._pending.values()]

    def _asked_of(self, work_id: str) -> _Work | PendingQuestion | None:
        """What a call of work request ``work_id`` raised and waits for: a question, or a request (yolo's answer)."""
        return next((item for item in self._pending.values() if item.asked_by == work_id
                     and not (isinstance(item, PendingQuestion) and item.answer.done())), None)

    def _find(self, request_id: str | None, *, questions: bool = False) -> _Work | PendingQuestion:
        """The waiting request ``request_id`` names; without one, the only request waiting (a work request whose
        question is out counts as its question)."""
        pool = {rid: item for rid, item in self._pending.items()
                if isinstance(item, PendingQuestion) or not questions}
        if request_id is not None and request_id.strip():
            found = pool.get(request_id.strip())
            if found is None:
                waiting = ", ".join(_describe(item) for item in pool.values()) or "nothing"
                raise UsageError(f"request {request_id!r} is not waiting" + (" for an answer" if questions else "")
                                 + f" (waiting: {waiting})", hint="call current_step")
            return found
        candidates = [item for item in pool.values()
                      if isinstance(item, PendingQuestion) or self._asked_of(item.request_id) is None]
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            if questions:
                raise UsageError("no question is waiting for an answer", hint="call current_step")
            raise UsageError("no step is waiting for work", hint="call current_step (or start a run) first")
        raise UsageError(f"{len(candidates)} requests are waiting ({', '.join(map(_describe, candidates))}): name "
                         "the one this call is for with request_id", hint="call current_step to see them")

    async def ask_person(self, *, run_id: str, step_id: str, gate_id: str, question: str,
                         choices: list[str] | None, menu: list[MenuOption]) -> tuple[str, str]:
        """Publish a question for the person and wait for :meth:`answer`; return the answer and who gave it.

        A question for the person (a step's menu in normal mode, a router's question, the agent's own ``ask``) is
        published here — the human channel's relay on a ``stepline mcp`` server — under an id of its own too, and
        waits for :meth:`answer` (the ``answer`` tool; a ``finish`` carrying the choice answers it too). The agent
        is the person's voice: its ``finish`` choice answers a step's menu (``speaks_for_user``), so the menu is
        never asked twice.
        """
        asker = self._pending.get(_SERVING.get() or "")
        pending = PendingQuestion(request_id=f"r{next(self._ids)}", run_id=run_id, step_id=step_id,
                                  gate_id=gate_id, question=question, choices=list(choices) if choices else None,
                                  menu=list(menu), answer=asyncio.get_running_loop().create_future(),
                                  asked_by=asker.request_id if isinstance(asker, _Work) else None,
                                  layer=asker.request.context.get("subagent") if isinstance(asker, _Work) else None)
        self._pending[pending.request_id] = pending
        self._notify()
        try:
            return await pending.answer
        finally:
            del self._pending[pending.request_id]
            self._notify()

    def answer(self, text: str, *, request_id: str | None = None, by: str = "mcp") -> dict[str, Any]:
        """Answer the waiting question ``request_id`` (the only one, without it) with ``text``, checked against
        its choices, on behalf of ``by``."""
        pending = self._find(request_id, questions=True)
        assert isinstance(pending, PendingQuestion)
        if pending.answer.done():
            raise UsageError(f"request {pending.request_id} is already answered", hint="call current_step")
        value = pending.match(text)
        pending.answer.set_result((value, by or "mcp"))
        return {"ok": True, "run_id": pending.run_id, "request_id": pending.request_id, "step_id": pending.step_id,
                "question": pending.question, "answer": value, "next": "call current_step"}

    async def submit(self, method: str, args: dict[str, Any], *, request_id: str | None = None) -> Any:
        """Make protocol call ``method`` on the waiting request ``request_id`` and return its result (MCP handlers
        call this); a ``finish`` with a choice on a question answers it."""
        target = self._find(request_id)
        if isinstance(target, PendingQuestion):
            choice = args.get("choice") if method == "finish" else None
            if choice is not None and str(choice).strip():
                return self.answer(str(choice), request_id=target.request_id)  # a menu answered as a step's is
            raise UsageError(f"request {target.request_id} is a question for the user: {target.question}",
                             hint=f"ask the user, then call answer(run_id, answer, request_id="
                                  f"{target.request_id!r})")
        asked = self._asked_of(target.request_id)
        if isinstance(asked, PendingQuestion):
            raise UsageError(f"request {target.request_id} waits for the user's answer to {asked.question!r}",
                             hint=f"ask the user, then call answer(run_id, answer, request_id={asked.request_id!r})")
        if asked is not None:
            raise UsageError(f"request {target.request_id} waits for request {asked.request_id} "
                             f"({asked.request.title})", hint=f"do request {asked.request_id} first")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await target.queue.put(_Call(method, dict(args), future))
        return await future

    async def ask(self, question: str, choices: list[str] | None, *, request_id: str | None = None) -> str:
        """The ``ask`` protocol call: its answer, or — when the question went to the person through the agent —
        at once a note saying so (the answer, given with ``answer``, becomes the call's result)."""
        target = self._find(request_id)
        call = asyncio.ensure_future(self.submit("ask", {"question": question, "choices": choices},
                                                 request_id=target.request_id))
        posted = asyncio.ensure_future(self.wait_until(
            lambda: isinstance(target, _Work) and self._asked_of(target.request_id) is not None))
        try:
            await asyncio.wait({call, posted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            posted.cancel()
        if call.done():
            return str(call.result())
        call.add_done_callback(_retrieve)  # the answer reaches the session; nobody waits for it here
        assert isinstance(target, _Work)
        pending = self._asked_of(target.request_id)
        if isinstance(pending, _Work):  # yolo: answered as the user would, by a request of its own
            return (f"The question went to request {pending.request_id} ({pending.request.title}): do it with "
                    f"finish(choice=…, request_id={pending.request_id!r}); its answer is journaled as this ask's "
                    "result and the request goes on.")
        assert pending is not None
        return (f"The question is waiting for the user's answer as request {pending.request_id}: "
                f"{pending.question!r}" + (f" (one of {', '.join(pending.choices)})" if pending.choices else "")
                + f". Ask the user, then call answer(run_id, answer, request_id={pending.request_id!r}); their "
                "answer is journaled as this ask's result and the request goes on.")

    async def serve(self, request: StepRequest, session: StepSession) -> None:
        """Publish ``request`` and run the calls submitted for it on ``session`` until one ends it."""
        work = _Work(f"r{next(self._ids)}", request, asked_by=_SERVING.get())
        self._pending[work.request_id] = work
        self._notify()
        token = _SERVING.set(work.request_id)
        try:
            while True:
                call = await work.queue.get()
                if call.result.done():  # the caller gave up waiting
                    continue
                try:
                    result = await self._execute(work, call, session)
                except (UsageError, OutsideRootError) as exc:
                    call.result.set_exception(exc)
                    continue
                except BaseException as exc:
                    reason = "the step was cancelled" if isinstance(exc, asyncio.CancelledError) else str(exc)
                    call.result.set_exception(ExecutorError(f"step {request.step_id!r} ended: {reason}"))
                    raise
                call.result.set_result(result)
                if call.method in _ENDING:
                    return
        finally:
            _SERVING.reset(token)
            del self._pending[work.request_id]
            self._notify()
            self.final, self.calls = work.final, work.calls
            while not work.queue.empty():
                late = work.queue.get_nowait()
                if not late.result.done():
                    late.result.set_exception(UsageError(f"request {work.request_id} (step {request.step_id!r}) is no "
                                                         "longer waiting for work", hint="call current_step"))

    async def _execute(self, work: _Work, call: _Call, session: StepSession) -> Any:
        args = call.args
        if call.method in _ENDING:
            final = {"method": call.method, "args": _check_final(work.request, call.method, args)}
            if self.hold_final:
                work.final = final
            else:
                await _apply_call(session, final)
            # A hold_final bridge is one agent's one step (no current_step there): its work ends with the call.
            return {"ok": True, "request_id": work.request_id, "step_id": work.request.step_id,
                    "next": "the step is done: end your turn" if self.hold_final else "call current_step"}
        if call.method not in _PROTOCOL:
            raise UsageError(f"unknown protocol call {call.method!r}", hint="use one of " + ", ".join(_PROTOCOL))
        result = await _apply_call(session, {"method": call.method, "args": args})
        work.calls.append({"method": call.method, "args": args})
        return result


def _describe(item: _Work | PendingQuestion) -> str:
    """``r4 (step-04-review, layer edge-cases)``: a waiting request as an error lists it."""
    if isinstance(item, PendingQuestion):
        return f"{item.request_id} (question of {item.step_id})"
    layer = item.request.context.get("subagent")
    return f"{item.request_id} ({item.request.step_id}" + (f", layer {layer})" if layer else ")")


def _check_final(request: StepRequest, method: str, args: dict[str, Any]) -> dict[str, Any]:
    """Refuse an ending that does not fit the request, so the agent can correct it."""
    if method == "decide":
        if request.kind != "decide":
            raise UsageError(f"step {request.step_id!r} asks for {request.kind!r} work, not a decision",
                             hint="end it with finish")
        return {"value": bool(args.get("value")), "reason": str(args.get("reason") or "")}
    if request.kind == "decide":
        raise UsageError(f"step {request.step_id!r} asks for a decision: {request.condition}",
                         hint="end it with decide(value, reason)")
    choice = args.get("choice")
    options = [o.key for o in request.menu] or (request.choices or [])
    if options:
        if choice is None or str(choice).strip() == "":
            # In normal mode a work step's menu is the user's: no choice leaves it for the runtime to ask.
            choice = None if request.kind == "work" and request.mode != "yolo" else default_choice(request)
        else:
            said = str(choice).strip()
            matched = next((o for o in options if o.lower() == said.lower()), said if choice_fits(said, options)
                           else None)
            if matched is None:
                raise UsageError(f"{choice!r} is not an option of step {request.step_id!r}",
                                 hint="choose one of " + ", ".join(options))
            choice = matched
    elif request.kind == "answer" and not choice:
        raise UsageError("an answer request needs the answer", hint="pass it as finish(choice=...)")
    return {"choice": None if choice is None else str(choice), "summary": args.get("summary")}


async def _apply_call(session: StepSession, call: dict[str, Any]) -> Any:
    """Run one recorded protocol call (``{"method", "args"}``) on ``session`` and return its result."""
    method, args = call["method"], call["args"]
    if method == "read":
        return await session.read(str(args["path"]))
    if method == "ask":
        return await session.ask(str(args["question"]), args.get("choices"))
    if method == "write_output":
        mode: WriteMode = args.get("mode") or "append"
        if mode not in ("append", "replace", "section"):
            raise UsageError(f"write mode {mode!r} is not append, replace or section")
        if mode == "section" and not args.get("section"):
            raise UsageError("mode 'section' needs the section name", hint="pass section=")
        return {"path": await session.write_output(str(args["content"]), path=args.get("path"),
                                                   section=args.get("section"), mode=mode)}
    if method == "set_var":
        await session.set_var(str(args["name"]), args.get("value"))
        return {"ok": True}
    if method == "call_tool":
        return await session.call_tool(str(args["name"]), dict(args.get("args") or {}))
    if method == "decide":
        await session.decide(bool(args["value"]), str(args.get("reason") or ""))
        return None
    await session.finish(args.get("choice"), args.get("summary"))
    return None


async def replay_calls(session: StepSession, calls: list[dict[str, Any]]) -> None:
    """Make ``calls`` again on ``session``; on a resumed step each returns its journaled result."""
    for call in calls:
        await _apply_call(session, call)


class McpBridgeExecutor(Executor):
    """The executor a ``stepline mcp`` server drives runs with: its work arrives through MCP tool calls.

    Options:
        bridge: the :class:`StepBridge` the server's tool handlers submit calls to.
    """

    name = "mcp-bridge"
    #: The agent is the user's voice in the IDE: the menu choice it passes with ``finish`` is the user's answer.
    speaks_for_user: ClassVar[bool] = True

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        bridge = (options or {}).get("bridge")
        self.bridge = bridge if isinstance(bridge, StepBridge) else StepBridge()

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Wait for the agent's calls for ``request`` and run them on ``session`` until it finishes."""
        await self.bridge.serve(request, session)


def add_step_tools(server: MCPServer[Any], bridge: StepBridge) -> None:
    """Register the step protocol (read, ask, write_output, set_var, call_tool, decide, finish) on ``server``."""
    from mcp.server.mcpserver.exceptions import ToolError

    async def submit(method: str, args: dict[str, Any], request_id: str | None) -> Any:
        try:
            return await bridge.submit(method, args, request_id=request_id)
        except SteplineError as exc:
            raise ToolError(exc.format_message()) from exc

    @server.tool()
    async def read(path: Annotated[str, Field(description="The file to read, relative to the project root (a "
                                                          "path outside it is refused).")],
                   request_id: RequestId = None) -> str:
        """Read a project file for the request's work; the read is journaled. Returns the file's text."""
        return str(await submit("read", {"path": path}, request_id))

    @server.tool()
    async def ask(question: Annotated[str, Field(description="The question, as the user should see it.")],
                  choices: Annotated[list[str] | None, Field(
                      description="The answers the user may give, when only some are allowed.")] = None,
                  request_id: RequestId = None) -> str:
        """Ask the user a question during the request's work; returns the answer. When the question goes to the
        user through you, this returns at once saying so: ask the user, then call answer(run_id, answer,
        request_id) with the question's request id; the answer becomes this call's result."""
        try:
            return await bridge.ask(question, choices, request_id=request_id)
        except SteplineError as exc:
            raise ToolError(exc.format_message()) from exc

    @server.tool()
    async def write_output(
            content: Annotated[str, Field(description="The text to write (Markdown for documents).")],
            path: Annotated[str | None, Field(description="The file to write, relative to the project root; "
                                                          "default: the step's output file.")] = None,
            section: Annotated[str | None, Field(description="With mode 'section': the template placeholder to "
                                                             "fill ({{section}}), else appended as a new "
                                                             "section.")] = None,
            mode: Annotated[Literal["append", "replace", "section"], Field(
                description="append: add to the end; replace: the file becomes content; section: fill the "
                            "template section named by `section`.")] = "append",
            request_id: RequestId = None) -> dict[str, Any]:
        """Write the request's output to the project (the step's output file unless `path` names another).
        Returns the path written."""
        result: dict[str, Any] = await submit(
            "write_output", {"content": content, "path": path, "section": section, "mode": mode}, request_id)
        return result

    @server.tool()
    async def set_var(name: Annotated[str, Field(description="The variable's name, as the workflow's text "
                                                             "writes it inside braces ({name}).")],
                      value: Annotated[Any, Field(description="Its value (any JSON value).")],
                      request_id: RequestId = None) -> dict[str, Any]:
        """Set a run variable that later steps (and the rest of this one) see; journaled."""
        result: dict[str, Any] = await submit("set_var", {"name": name, "value": value}, request_id)
        return result

    @server.tool()
    async def call_tool(name: Annotated[str, Field(description="The stepline tool's name (e.g. runScript, "
                                                               "recordEvidence), as the step's text names it.")],
                        args: Annotated[dict[str, Any] | None, Field(
                            description="The tool's arguments, as an object.")] = None,
                        request_id: RequestId = None) -> dict[str, Any]:
        """Call a stepline tool through its pipeline (policy, risk gates, timeout); returns its ToolResult
        (status ok|error|refused|timeout|blocked, output, error)."""
        result: dict[str, Any] = await submit("call_tool", {"name": name, "args": args or {}}, request_id)
        return result

    @server.tool()
    async def decide(value: Annotated[bool, Field(description="Whether the request's condition holds.")],
                     reason: Annotated[str, Field(description="Why, in one sentence.")],
                     request_id: RequestId = None) -> dict[str, Any]:
        """End a decision request (kind 'decide', its condition in `condition`): whether the condition holds and
        why. The runtime takes the branch it leads to."""
        result: dict[str, Any] = await submit("decide", {"value": value, "reason": reason}, request_id)
        return result

    @server.tool()
    async def finish(
            choice: Annotated[str | None, Field(
                description="For a request with a menu or choices: the key of the option taken (one of the "
                            "request's menu keys or choices; another is refused naming them). In normal mode a "
                            "work request's menu is the user's: pass the key they chose, or leave it out and the "
                            "menu comes back from current_step as a question for answer(). For an 'answer' "
                            "request: the answer.")] = None,
            summary: Annotated[str | None, Field(
                description="What was done, in a sentence or two (a subagent layer's result: its findings, "
                            "which the step's continuation receives).")] = None,
            request_id: RequestId = None) -> dict[str, Any]:
        """End a work, generate, answer or choose request; the runtime goes on (the result's `next` says what
        to do now)."""
        result: dict[str, Any] = await submit("finish", {"choice": choice, "summary": summary}, request_id)
        return result


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _uvicorn_server(app: Any) -> Any:
    """A uvicorn server that leaves signal handling (Ctrl-C) to the process that runs the engine."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="on",
                                 timeout_graceful_shutdown=2))


class _BearerOnly:
    """An ASGI app that passes on only the HTTP requests carrying ``Authorization: Bearer <token>``; any other
    gets 401 before the MCP server sees it."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"this step's MCP server serves its agent only\n"})
                return
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def serve_http(server: MCPServer[Any], *, token: str, startup_timeout: float = 10.0) -> AsyncIterator[str]:
    """Serve ``server`` over streamable HTTP on a free 127.0.0.1 port while the block runs, to the requests that
    carry ``Authorization: Bearer <token>`` only; yield its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    http = _uvicorn_server(_BearerOnly(server.streamable_http_app(host="127.0.0.1"), token))
    task = asyncio.ensure_future(http.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(startup_timeout):
            while not http.started:
                if task.done():
                    task.result()
                    raise ExecutorError("the step's MCP server stopped while starting")
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        # The step is over: a connection its agent still holds (an MCP client's event stream, open while the step
        # stopped on a full disk, say) is cut now, so that the server stops at once instead of cancelling that
        # request after its grace period (uvicorn then prints a traceback into the user's terminal).
        for connection in list(http.server_state.connections):
            connection.transport.close()
        http.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=5)
        except TimeoutError:
            task.cancel()
        sock.close()
