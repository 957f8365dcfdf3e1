"""What the dashboard accepts from a client: a bounded request body, and request headers within a time limit.

An authenticated client could send a body of any size (100 MB took the server from 117 MB to 560 MB before a
422), and a client that never finishes its headers held a connection open for ever (slowloris). Every body the
dashboard needs is a gate decision or an answer (a few hundred bytes), so:

* :class:`BodyLimit` answers 413 to a request declaring more than :data:`MAX_BODY_BYTES`, and 411 to one whose
  body has no declared length (chunked): the HTTP layer (h11) then never delivers more than was declared, so no
  body larger than the limit is ever read;
* :class:`HeaderTimeoutH11` closes a connection whose request headers are not complete
  :data:`HEADER_TIMEOUT_SECONDS` (``STEPLINE_HEADER_TIMEOUT_SECONDS`` sets it) after it opened or after its
  last response, and answers 408 and closes one whose declared body has not all arrived
  :data:`BODY_TIMEOUT_SECONDS` (``STEPLINE_BODY_TIMEOUT_SECONDS``) after its headers: a body sent a byte at a
  time would otherwise hold the connection, and the request's handler, for ever.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["BODY_TIMEOUT_SECONDS", "HEADER_TIMEOUT_SECONDS", "MAX_BODY_BYTES", "BodyLimit", "HeaderTimeoutH11"]

MAX_BODY_BYTES = 64 * 1024
HEADER_TIMEOUT_SECONDS = 10.0
BODY_TIMEOUT_SECONDS = 10.0


class BodyLimit:
    """ASGI middleware: a request body over :data:`MAX_BODY_BYTES`, or of undeclared length, is refused before
    the application reads a byte of it."""

    def __init__(self, app: Any, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            length = headers.get(b"content-length")
            if length is None and b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                await _refuse(send, 411, "a request body must declare its length (Content-Length)")
                return
            if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
                await _refuse(send, 413, f"the request body is over the dashboard's limit of {self.max_bytes} "
                                         "bytes")
                return
        await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, why: str) -> None:
    body = json.dumps({"error": why}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete
    :data:`HEADER_TIMEOUT_SECONDS` after it opened or after its last response (uvicorn's keep-alive timer stops
    at the first byte, so a client sending a byte at a time would hold the connection for ever), and one whose
    body is not complete :data:`BODY_TIMEOUT_SECONDS` after its headers (408 when nothing was answered yet)."""

    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:  # uvicorn's hooks
        super().connection_made(transport)
        self._await_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._header_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        receiving = self.conn.their_state is h11.SEND_BODY
        if receiving and self._body_timer is None:
            seconds = float(os.environ.get("STEPLINE_BODY_TIMEOUT_SECONDS") or BODY_TIMEOUT_SECONDS)
            self._body_timer = self.loop.call_later(seconds, self._body_late)
        elif not receiving and self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self) -> None:
        self._body_timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        if self.conn.our_state is h11.SEND_RESPONSE:  # nothing answered yet: say why the request ends
            body = json.dumps({"error": "the request body did not arrive in time"}).encode()
            for event in (h11.Response(status_code=408, reason=b"Request Timeout",
                                       headers=[(b"content-type", b"application/json"), (b"connection", b"close"),
                                                (b"content-length", str(len(body)).encode())]),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event) or b"")
        self.transport.close()  # the handler waiting for the body is told the client is gone

    def _await_headers(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        seconds = float(os.environ.get("STEPLINE_HEADER_TIMEOUT_SECONDS") or HEADER_TIMEOUT_SECONDS)
        self._header_timer = self.loop.call_later(seconds, self._headers_late)

    def _headers_late(self) -> None:
        if self.conn.their_state is h11.IDLE:  # no complete request since the connection opened or last answered
            self.timeout_keep_alive_handler()  # uvicorn's own close of an idle connection
