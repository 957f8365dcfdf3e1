"""The step protocol over one TCP connection: a worker's executor calls, the coordinator's journaled session.

Why a plain socket and not the MCP bridge or a Ray actor as the channel: the coordinator is a Ray *driver*,
and a driver can host no actor, so a channel through Ray would be a third process relaying every call (two
hops, and a mailbox to poll). The MCP bridge serves an agent that speaks MCP; here both ends are stepline, and
a line of JSON each way is all a call needs. So the coordinator listens on one port for the run
(:class:`SessionServer`); each remote ``perform`` gets a token, and its worker connects and sends the token,
then one request line per protocol call, and reads one reply line for each (:class:`RemoteSession`).

The coordinator runs every call on the step's real, journaled session (:func:`serve_calls`), so nothing on a
worker ever writes run state; the worker's ``end`` ends the step at once (:class:`Channel`), and a call that
fails on the coordinator fails on the worker with the same class (:func:`original_failure`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from stepline import errors
from stepline.errors import ExecutorError, SteplineError
from stepline.executors import StepSession, WriteMode

__all__ = ["Channel", "RemoteCallError", "RemoteSession", "SessionServer", "original_failure", "serve_calls"]

#: A reply line may carry a whole file a step read (``read``): far above asyncio's 64 KiB default.
_LINE_LIMIT = 256 * 1024 * 1024
_OPS = frozenset({"read", "ask", "write_output", "set_var", "call_tool", "decide", "finish", "record_usage"})


def _dumps(data: Any) -> bytes:
    return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n"


# -- the coordinator's side ---------------------------------------------------------------------------------
@dataclass(slots=True)
class _Call:
    """One request line from the worker, waiting for its reply."""

    op: str
    args: dict[str, Any]
    reply: asyncio.Future[dict[str, Any]]

    def answer(self, payload: dict[str, Any]) -> None:
        if not self.reply.done():
            self.reply.set_result(payload)


@dataclass(slots=True)
class Channel:
    """One remote ``perform``'s calls, queued by the connection handler for the step's task to run.

    When the worker's ``perform`` returns, the worker says so on the channel (``end``): the coordinator takes that as
    the step's end at once, without waiting for Ray to carry the (empty) result back — the one part of a step's
    round trip that was pure waiting (measured by ``bench/ray_backend.py``). A ``perform`` that raised says nothing;
    its error comes through Ray as before.
    """

    token: str
    #: Done when the worker said its ``perform`` returned (``end``): every call it made has been answered.
    ended: asyncio.Future[None]
    #: The calls in the order they came; None (put there once the ``perform`` ended) is the last item.
    calls: asyncio.Queue[_Call | None] = field(default_factory=asyncio.Queue)
    #: The exceptions calls raised on the coordinator, by call number: the worker's error names the number.
    failures: dict[int, BaseException] = field(default_factory=dict)
    count: int = 0

    def stop(self, _: object = None) -> None:
        """The ``perform`` ended: once the calls queued before are taken, :meth:`next` says None."""
        self.calls.put_nowait(None)

    async def next(self) -> _Call | None:
        """The worker's next call, or None once its ``perform`` has ended and no call is left (for good)."""
        call = await self.calls.get()
        if call is None:
            self.calls.put_nowait(None)  # whoever asks next hears it too
        return call


class SessionServer:
    """The coordinator's listener for the run: one TCP port, one :class:`Channel` per remote ``perform``."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = 0
        self._server: asyncio.Server | None = None
        self._channels: dict[str, Channel] = {}

    async def start(self) -> None:
        """Listen on a free port of ``host`` (once)."""
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, self.host, 0, limit=_LINE_LIMIT)
            self.port = self._server.sockets[0].getsockname()[1]

    def open(self) -> Channel:
        """A channel for one ``perform``; its token is what the worker must present."""
        channel = Channel(secrets.token_hex(16), asyncio.get_running_loop().create_future())
        self._channels[channel.token] = channel
        return channel

    def close_channel(self, channel: Channel) -> None:
        """Forget ``channel``: a connection that still waits on it is answered with an error."""
        self._channels.pop(channel.token, None)
        while not channel.calls.empty():
            if (call := channel.calls.get_nowait()) is not None:
                call.answer({"error": {"type": "ExecutorError", "message": "the step ended", "retryable": True}})

    async def aclose(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = orjson.loads(await reader.readline() or b"{}")
            channel = self._channels.get(str(hello.get("token"))) if isinstance(hello, dict) else None
            if channel is None:
                return  # not a worker of this run (or its step ended): nothing is said to it
            loop = asyncio.get_running_loop()
            while line := await reader.readline():
                message = orjson.loads(line)
                if message.get("op") == "end":
                    if not channel.ended.done():
                        channel.ended.set_result(None)
                    return
                call = _Call(str(message.get("op")), dict(message.get("args") or {}), loop.create_future())
                channel.calls.put_nowait(call)
                writer.write(_dumps(await call.reply))
                await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the worker went away (killed, cancelled): the step's task learns it from Ray
        finally:
            writer.close()


def original_failure(channel: Channel, worker_error: BaseException) -> BaseException | None:
    """The coordinator's own exception behind ``worker_error`` (what a worker raised from a refused call), if any.

    A call that fails on the coordinator is answered with the error (the worker raises a stepline error of the
    same class, so an executor that handles, say, a refused tool goes on as it would locally) and the original
    exception is kept: if it ends the worker's ``perform``, the coordinator raises that very exception (a blocked
    gate stays a blocked gate).
    """
    number = getattr(worker_error, "remote_call", None)
    return channel.failures.get(number) if isinstance(number, int) else None


async def serve_calls(channel: Channel, session: StepSession, done: asyncio.Future[Any]) -> None:
    """Run the worker's calls on ``session`` in order, in this (the step's) task, until its ``perform`` ended.

    The coordinator runs every call on the step's real :class:`~stepline.executors.StepSession` — the journaled
    one, in the step's own task, in the order the calls came (what the MCP bridge's serve loop
    does) — so the checks, the journal, replay and the step's timeout are exactly those of a local step, and
    nothing on a worker ever writes run state. ``memo`` is the one call whose work is the worker's: the
    coordinator looks it up in the journal and either answers with the recorded result or asks the worker to
    compute it (``{"compute": true}``), then journals what the worker sends back.

    A call under way when the worker dies is finished and journaled all the same: it is the coordinator's
    work, so a lost worker never leaves an effect half done.
    """
    done.add_done_callback(channel.stop)
    while (call := await channel.next()) is not None:
        channel.count += 1
        number = channel.count
        try:
            if call.op == "memo":
                await _memo(channel, session, call)
                continue
            if call.op not in _OPS:
                raise ExecutorError(f"the worker asked for an unknown protocol call {call.op!r}", retryable=False)
            result = await getattr(session, call.op)(**call.args)
            call.answer({"ok": result})
        except Exception as exc:  # every failure goes back to the worker; the original is kept
            channel.failures[number] = exc
            call.answer({"error": _describe(exc), "call": number})


async def _memo(channel: Channel, session: StepSession, call: _Call) -> None:
    """The journal answers a recorded ``memo``; otherwise the worker computes it and the result is journaled."""
    follow_up: list[_Call] = []

    async def compute() -> dict[str, Any]:
        call.answer({"compute": True})
        nxt = await channel.next()
        if nxt is None:
            raise ExecutorError("the worker went away while computing a memo", retryable=True)
        follow_up.append(nxt)
        if nxt.op != "memo_result":
            raise ExecutorError(f"memo {call.args.get('label')!r}: the worker computed nothing "
                                f"({nxt.args.get('error') or nxt.op})", retryable=True)
        result: dict[str, Any] = nxt.args["result"]
        return result

    try:
        result = await session.memo(str(call.args["label"]), dict(call.args.get("payload") or {}), compute)
    except Exception as exc:
        if not follow_up:
            raise
        follow_up[0].answer({"error": _describe(exc)})  # the worker raises its own exception, not this one
        return
    (follow_up[0] if follow_up else call).answer({"ok": result})


def _describe(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, SteplineError):
        return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint, "retryable": exc.retryable}
    return {"type": type(exc).__name__, "message": str(exc), "retryable": True}


# -- the worker's side --------------------------------------------------------------------------------------
class RemoteCallError(ExecutorError):
    """A protocol call the coordinator refused with an error that is not a stepline error (a blocked gate)."""


def _rebuild(error: dict[str, Any], number: int | None) -> SteplineError:
    """The stepline error of the class the coordinator raised (so an executor handles it as it would locally)."""
    cls = getattr(errors, str(error.get("type")), None)
    message, hint = str(error.get("message")), error.get("hint")
    exc: SteplineError = RemoteCallError(f"{error.get('type')}: {message}", hint=hint)
    if isinstance(cls, type) and issubclass(cls, SteplineError):
        with contextlib.suppress(TypeError):  # every stepline error takes (message, hint=); a plugin's may not
            exc = cls(message, hint=hint)
    exc.retryable = bool(error.get("retryable"))
    exc.remote_call = number  # type: ignore[attr-defined]  # read back by the coordinator (see module doc)
    return exc


class RemoteSession(StepSession):
    """The worker's :class:`StepSession`: every call is a request to the coordinator, answered in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()  # one call at a time: the journal keys calls by their order

    @classmethod
    async def connect(cls, host: str, port: int, token: str) -> RemoteSession:
        """Open the channel the coordinator made for this ``perform``."""
        reader, writer = await asyncio.open_connection(host, port, limit=_LINE_LIMIT)
        writer.write(_dumps({"token": token}))
        await writer.drain()
        return cls(reader, writer)

    async def end(self) -> None:
        """Tell the coordinator the ``perform`` returned (no reply: the step's end is taken from this line)."""
        async with self._lock:
            self._writer.write(_dumps({"op": "end"}))
            await self._writer.drain()

    async def aclose(self) -> None:
        """Close the connection."""
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    async def _exchange(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        self._writer.write(_dumps({"op": op, "args": args}))
        await self._writer.drain()
        line = await self._reader.readline()
        if not line:
            raise ExecutorError("the coordinator closed this step's channel", retryable=True)
        reply: dict[str, Any] = orjson.loads(line)
        if "error" in reply:
            raise _rebuild(reply["error"], reply.get("call"))
        return reply

    async def _call(self, op: str, **args: Any) -> Any:
        async with self._lock:
            return (await self._exchange(op, args))["ok"]

    async def read(self, path: str) -> str:
        """See :meth:`StepSession.read`."""
        return str(await self._call("read", path=path))

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        """See :meth:`StepSession.ask`."""
        return str(await self._call("ask", question=question, choices=choices))

    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: WriteMode = "append") -> str:
        """See :meth:`StepSession.write_output`."""
        return str(await self._call("write_output", content=content, path=path, section=section, mode=mode))

    async def set_var(self, name: str, value: Any) -> None:
        """See :meth:`StepSession.set_var`."""
        await self._call("set_var", name=name, value=value)

    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """See :meth:`StepSession.call_tool`."""
        result: dict[str, Any] = await self._call("call_tool", name=name, args=args)
        return result

    async def record_usage(self, label: str, usage: dict[str, Any]) -> None:
        """See :meth:`StepSession.record_usage`."""
        await self._call("record_usage", label=label, usage=usage)

    async def decide(self, value: bool, reason: str) -> None:
        """See :meth:`StepSession.decide`."""
        await self._call("decide", value=value, reason=reason)

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        """See :meth:`StepSession.finish`."""
        await self._call("finish", choice=choice, summary=summary)

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """The journaled result, or ``compute`` run here once and its result sent to be journaled."""
        async with self._lock:
            reply = await self._exchange("memo", {"label": label, "payload": payload})
            if not reply.get("compute"):
                cached: dict[str, Any] = reply["ok"]
                return cached
            try:
                result = await compute()
            except Exception as exc:
                with contextlib.suppress(SteplineError):
                    await self._exchange("memo_failed", {"error": f"{type(exc).__name__}: {exc}"})
                raise
            recorded: dict[str, Any] = (await self._exchange("memo_result", {"result": result}))["ok"]
            return recorded
