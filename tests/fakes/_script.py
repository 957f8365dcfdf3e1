"""Scripted replies shared by the fake model servers: a queue of answers, faults and delays."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse


@dataclass
class Reply:
    """One scripted HTTP answer: a status, a JSON body, and how long to wait before sending it."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0


class Script:
    """The replies a fake server gives, in order, and every request it received."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget the script and the requests (a server shared by several tests)."""
        with self._lock:
            self.replies.clear()
            self.requests.clear()
            self.headers.clear()

    def queue(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self.replies.extend(replies)

    async def answer(self, body: dict[str, Any], headers: dict[str, str], error: Any) -> JSONResponse:
        """Record the request and send the next reply; an exhausted script is a 400 naming the problem."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            reply = self.replies.popleft() if self.replies else Reply(400, error("fake: no scripted reply left"))
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return JSONResponse(reply.body, status_code=reply.status)
