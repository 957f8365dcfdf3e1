"""Scripted replies shared by the fake model servers: a queue of answers, faults and delays, and optionally a
responder that builds the next answer from the request once the queue is empty."""

from __future__ import annotations

import asyncio
import re
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse


@dataclass
class Reply:
    """One scripted HTTP answer: a status, a JSON body, and how long to wait before sending it."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0


#: Builds the reply to one request body (a deterministic fake model); see :mod:`fakes.policy`.
Responder = Callable[[dict[str, Any]], Reply]

def offered_name(name: str, offered: Collection[str]) -> str:
    """The name under which a CLI offers the tool a script calls ``name``: the name itself when offered, else the
    offered name of the same MCP tool in another CLI's spelling (``mcp__stepline__finish`` is ``mcp_stepline_finish``
    for gemini, ``stepline_finish`` for opencode), else ``name`` unchanged (a tool the CLI defers)."""
    if name in offered:
        return name

    def plain(tool: str) -> str:
        return re.sub(r"_+", "_", re.sub(r"^mcp_+", "", tool))

    return next((tool for tool in offered if plain(tool) == plain(name)), name)


#: Renders a 200 reply's body as the server-sent events of the provider's streaming API.
Streamer = Callable[[dict[str, Any]], Iterator[str]]


class Script:
    """The replies a fake server gives, in order, and every request it received."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        #: Answers a request when no scripted reply is left (None: the exhausted script is a 400).
        self.responder: Responder | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        #: Report prompt caching in the usage, as the provider would (see :meth:`add_cache_usage`).
        self.caching = False
        #: The key of a reply's usage object (Gemini's is ``usageMetadata``).
        self.usage_key = "usage"
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget the script and the requests (a server shared by several tests)."""
        with self._lock:
            self.replies.clear()
            self.responder = None
            self.requests.clear()
            self.headers.clear()

    def add_cache_usage(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """``usage`` with the provider's cache counts for ``body`` (the requests before it are in
        :attr:`requests`); the base fake caches nothing."""
        return usage

    @staticmethod
    def shared_prefix(text: str, earlier: list[str]) -> int:
        """The longest prefix of ``text`` that one of ``earlier`` starts with, in characters."""
        best = 0
        for other in earlier:
            limit = min(len(text), len(other))
            n = 0
            while n < limit and text[n] == other[n]:
                n += 1
            best = max(best, n)
        return best

    def queue(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self.replies.extend(replies)

    async def answer(self, body: dict[str, Any], headers: dict[str, str], error: Any,
                     stream: Streamer | None = None) -> Response:
        """Record the request and send the next reply, else the responder's; with neither, a 400 naming the problem.

        A responder that raises is answered with a 400 carrying its message, so the test sees why. With ``stream``
        (the request asked for a stream) a 200 reply goes out as the events ``stream`` makes of it; faults stay
        JSON, as the real APIs send them before any stream starts.
        """
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self.replies:
                reply = self.replies.popleft()
            elif self.responder is not None:
                try:
                    reply = self.responder(body)
                except Exception as exc:  # the fake model's own bug: report it to the client, not to uvicorn
                    reply = Reply(400, error(f"fake: the responder failed: {type(exc).__name__}: {exc}"))
            else:
                reply = Reply(400, error("fake: no scripted reply left"))
            if self.caching and reply.status == 200 and isinstance(reply.body.get(self.usage_key), dict):
                usage = self.add_cache_usage(body, dict(reply.body[self.usage_key]))
                reply = Reply(reply.status, {**reply.body, self.usage_key: usage}, reply.delay)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if stream is not None and reply.status == 200:
            return StreamingResponse(stream(reply.body), media_type="text/event-stream")
        return JSONResponse(reply.body, status_code=reply.status)
