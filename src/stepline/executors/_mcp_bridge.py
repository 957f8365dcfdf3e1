"""The ``mcp-bridge`` executor: a step's work arrives as protocol calls over MCP, made by an agent elsewhere.

The runtime still owns the step. :meth:`StepBridge.serve` (what ``perform`` does) publishes the request, then
takes the protocol calls that MCP tool handlers :meth:`~StepBridge.submit`, one at a time and in order, runs
each on the real journaled session and hands its result back to the handler; ``finish`` (or ``decide``)
ends the request. So an IDE agent or a CLI agent does the work while stepline keeps the order, the state, the
journal and the checks. A call with bad arguments is refused back to the agent (it can correct itself); an
error that ends the step (a blocked gate, a failed required tool, a cancelled step) is reported to the agent
and raised to the engine.

A question for the person (a step's menu in normal mode, a router's question, the agent's own ``ask``) is
published with :meth:`StepBridge.ask_person` — the human channel's relay on a ``stepline mcp`` server — and
waits for :meth:`StepBridge.answer` (the ``answer`` tool; a ``finish`` carrying the choice answers it too).
The agent is the person's voice: its ``finish`` choice answers a step's menu (``speaks_for_user``), so the
menu is never asked twice.

:func:`add_step_tools` registers the protocol as MCP tools on a server; :func:`serve_http` serves such a
server on a free loopback port for the length of one step (how a CLI agent subprocess reaches it).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from stepline.errors import ExecutorError, SteplineError, UsageError
from stepline.executors._base import Executor
from stepline.executors._dryrun import default_choice
from stepline.executors._protocol import MenuOption, StepRequest, StepSession, WriteMode

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["McpBridgeExecutor", "PendingQuestion", "StepBridge", "add_step_tools", "replay_calls", "serve_http",
           "step_payload"]

_ENDING = frozenset({"finish", "decide"})


@dataclass(slots=True)
class _Call:
    method: str
    args: dict[str, Any]
    step_id: str | None
    request: StepRequest
    result: asyncio.Future[Any]


def step_payload(request: StepRequest) -> dict[str, Any]:
    """What an agent is shown of a request: only the current step (just-in-time) and how to end it."""
    data = request.to_dict()
    data["ends_with"] = "decide(value, reason)" if request.kind == "decide" else "finish(choice?, summary?)"
    return data


@dataclass(slots=True)
class PendingQuestion:
    """A question waiting for the person's answer (the agent relays it): a step's menu or a plain question."""

    run_id: str
    step_id: str
    gate_id: str
    question: str
    choices: list[str] | None
    menu: list[MenuOption]
    #: Resolved with ``(answer, by)``.
    answer: asyncio.Future[tuple[str, str]]

    def payload(self) -> dict[str, Any]:
        """What the agent is shown: the kind (``menu`` or ``question``), the question, its options."""
        return {"kind": "menu" if self.menu else "question", "run_id": self.run_id, "step_id": self.step_id,
                "gate_id": self.gate_id, "question": self.question, "choices": self.choices,
                "menu": [asdict(o) for o in self.menu],
                "ends_with": "answer(run_id, answer): ask the user, then pass their answer"
                             + (" (one of the choices)" if self.choices else "")}

    def match(self, text: str) -> str:
        """The answer as the runtime takes it: one of the choices (by key or menu label, any case), else refused."""
        if not self.choices:
            return text
        wanted = text.strip().strip("[]*").strip().lower()
        for choice in self.choices:
            if wanted == choice.lower():
                return choice
        for option in self.menu:
            if wanted and wanted == option.label.lower():
                return option.key
        raise UsageError(f"{text!r} is not an answer to {self.question!r}",
                         hint="answer one of " + ", ".join(self.choices))


class StepBridge:
    """Hands one request at a time to whoever submits protocol calls, and runs those calls on its session.

    Args:
        hold_final: keep ``finish``/``decide`` in :attr:`final` instead of passing it to the session, so the
            caller can do more (record the agent's session id) before the request ends.
    """

    def __init__(self, *, hold_final: bool = False) -> None:
        self.hold_final = hold_final
        self.request: StepRequest | None = None
        #: The held ``finish``/``decide`` call: ``{"method": ..., "args": {...}}``.
        self.final: dict[str, Any] | None = None
        #: Every call that reached the session, in order (what a resumed step replays).
        self.calls: list[dict[str, Any]] = []
        #: The question waiting for the person's answer, if any (see :meth:`ask_person`).
        self.question: PendingQuestion | None = None
        self._queue: asyncio.Queue[_Call] = asyncio.Queue()
        self._ready = asyncio.Event()
        self._asked = asyncio.Event()

    async def wait_ready(self) -> None:
        """Return once a request is waiting for work or a question for its answer."""
        await self._ready.wait()

    async def wait_question(self) -> None:
        """Return once a question is waiting for its answer."""
        await self._asked.wait()

    async def ask_person(self, *, run_id: str, step_id: str, gate_id: str, question: str,
                         choices: list[str] | None, menu: list[MenuOption]) -> tuple[str, str]:
        """Publish a question for the person and wait for :meth:`answer`; return the answer and who gave it."""
        pending = PendingQuestion(run_id=run_id, step_id=step_id, gate_id=gate_id, question=question,
                                  choices=list(choices) if choices else None, menu=list(menu),
                                  answer=asyncio.get_running_loop().create_future())
        self.question = pending
        self._asked.set()
        self._ready.set()
        try:
            return await pending.answer
        finally:
            self.question = None
            self._asked.clear()
            if self.request is None:
                self._ready.clear()

    def answer(self, text: str, *, step_id: str | None = None, by: str = "mcp") -> dict[str, Any]:
        """Answer the waiting question with ``text`` (checked against its choices) on behalf of ``by``."""
        pending = self.question
        if pending is None or pending.answer.done():
            raise UsageError("no question is waiting for an answer", hint="call current_step")
        if step_id is not None and step_id != pending.step_id:
            raise UsageError(f"the question waiting is step {pending.step_id!r}'s, not {step_id!r}'s",
                             hint="call current_step")
        value = pending.match(text)
        pending.answer.set_result((value, by or "mcp"))
        return {"ok": True, "run_id": pending.run_id, "step_id": pending.step_id, "question": pending.question,
                "answer": value, "next": "call current_step"}

    async def submit(self, method: str, args: dict[str, Any], *, step_id: str | None = None) -> Any:
        """Make protocol call ``method`` on the current request and return its result (MCP handlers call this)."""
        pending = self.question
        if pending is not None:
            choice = args.get("choice") if method == "finish" else None
            if self.request is None and choice is not None and str(choice).strip():
                return self.answer(str(choice), step_id=step_id)  # a menu answered the way a step's menu is
            raise UsageError(f"a question is waiting for the user's answer: {pending.question}",
                             hint="ask the user, then call answer(run_id, answer)")
        request = self.request
        if request is None:
            raise UsageError("no step is waiting for work", hint="call current_step (or start a run) first")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Call(method, dict(args), step_id, request, future))
        return await future

    async def serve(self, request: StepRequest, session: StepSession) -> None:
        """Publish ``request`` and run submitted calls on ``session`` until one ends it."""
        self.request, self.final, self.calls = request, None, []
        self._ready.set()
        try:
            while True:
                call = await self._queue.get()
                if call.result.done():  # the caller gave up waiting
                    continue
                try:
                    result = await self._execute(call, session)
                except UsageError as exc:
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
            self.request = None
            if self.question is None:
                self._ready.clear()
            while not self._queue.empty():
                late = self._queue.get_nowait()
                if not late.result.done():
                    late.result.set_exception(UsageError(f"step {request.step_id!r} is no longer waiting for work",
                                                         hint="call current_step"))

    async def _execute(self, call: _Call, session: StepSession) -> Any:
        request = self.request
        assert request is not None
        if call.request is not request or (call.step_id is not None and call.step_id != request.step_id):
            raise UsageError(f"step {call.step_id or call.request.step_id!r} is not the current step "
                             f"(the current step is {request.step_id!r})", hint="call current_step")
        args = call.args
        if call.method in _ENDING:
            final = {"method": call.method, "args": _check_final(request, call.method, args)}
            if self.hold_final:
                self.final = final
            else:
                await _apply_call(session, final)
            return {"ok": True, "step_id": request.step_id}
        if call.method not in _PROTOCOL:
            raise UsageError(f"unknown protocol call {call.method!r}", hint="use one of " + ", ".join(_PROTOCOL))
        result = await _apply_call(session, {"method": call.method, "args": args})
        self.calls.append({"method": call.method, "args": args})
        return result


_PROTOCOL = ("read", "ask", "write_output", "set_var", "call_tool", "decide", "finish")


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
            matched = next((o for o in options if o.lower() == str(choice).strip().lower()), None)
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

    async def submit(method: str, args: dict[str, Any], step_id: str | None) -> Any:
        try:
            return await bridge.submit(method, args, step_id=step_id)
        except SteplineError as exc:
            raise ToolError(exc.format_message()) from exc

    @server.tool()
    async def read(path: str, step_id: str | None = None) -> str:
        """Read a project file (path relative to the project root). Journaled."""
        return str(await submit("read", {"path": path}, step_id))

    @server.tool()
    async def ask(question: str, choices: list[str] | None = None, step_id: str | None = None) -> str:
        """Ask the user a question; returns the answer. When the question goes to the user through you, this
        returns at once saying so: ask the user, then call answer(run_id, answer) (a run that cannot ask now
        blocks until it is answered)."""
        call = asyncio.ensure_future(submit("ask", {"question": question, "choices": choices}, step_id))
        posted = asyncio.ensure_future(bridge.wait_question())
        try:
            await asyncio.wait({call, posted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            posted.cancel()
        if call.done():
            return str(call.result())
        call.add_done_callback(_retrieve)  # the answer reaches the session; nobody waits for it here
        pending = bridge.question
        shown = pending.question if pending is not None else question
        return (f"The question is waiting for the user's answer: {shown!r}"
                + (f" (one of {', '.join(pending.choices)})" if pending is not None and pending.choices else "")
                + ". Ask the user, then call answer(run_id, answer); their answer is journaled as this ask's "
                "result and the step goes on.")

    @server.tool()
    async def write_output(content: str, path: str | None = None, section: str | None = None,
                           mode: str = "append", step_id: str | None = None) -> dict[str, Any]:
        """Write to the step's output file (or `path`); mode append|replace|section (section fills a template)."""
        result: dict[str, Any] = await submit(
            "write_output", {"content": content, "path": path, "section": section, "mode": mode}, step_id)
        return result

    @server.tool()
    async def set_var(name: str, value: Any, step_id: str | None = None) -> dict[str, Any]:
        """Set a run variable that later steps see."""
        result: dict[str, Any] = await submit("set_var", {"name": name, "value": value}, step_id)
        return result

    @server.tool()
    async def call_tool(name: str, args: dict[str, Any] | None = None, step_id: str | None = None) -> dict[str, Any]:
        """Call a stepline tool through its pipeline (policy, risk gates, timeout); returns the ToolResult."""
        result: dict[str, Any] = await submit("call_tool", {"name": name, "args": args or {}}, step_id)
        return result

    @server.tool()
    async def decide(value: bool, reason: str, step_id: str | None = None) -> dict[str, Any]:
        """End a decision request: whether the condition holds, and why."""
        result: dict[str, Any] = await submit("decide", {"value": value, "reason": reason}, step_id)
        return result

    @server.tool()
    async def finish(choice: str | None = None, summary: str | None = None,
                     step_id: str | None = None) -> dict[str, Any]:
        """End the step's request: the menu choice (or the answer, for answer requests) and a short summary."""
        result: dict[str, Any] = await submit("finish", {"choice": choice, "summary": summary}, step_id)
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


@contextlib.asynccontextmanager
async def serve_http(server: MCPServer[Any], *, startup_timeout: float = 10.0) -> AsyncIterator[str]:
    """Serve ``server`` over streamable HTTP on a free 127.0.0.1 port while the block runs; yield its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    http = _uvicorn_server(server.streamable_http_app(host="127.0.0.1"))
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
        http.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=5)
        except TimeoutError:
            task.cancel()
        sock.close()
