"""The dashboard bounds what a client sends (issue 28 item 10): a body over the limit (or of undeclared length)
is refused before it is read, a connection whose headers never finish is closed, and so is one whose body comes
too slowly (408), with no traceback from the server."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from web.dashboard_project import Server


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Server:
    monkeypatch.setenv("STEPLINE_HEADER_TIMEOUT_SECONDS", "1")
    monkeypatch.setenv("STEPLINE_BODY_TIMEOUT_SECONDS", "1")
    root = tmp_path / "project"
    root.mkdir()
    running = Server(root, "--token", "t" * 32)
    yield running
    running.stop()


def _connect(server: Server) -> socket.socket:
    """A connection to the server (its URL is printed just before it listens: retried for a moment)."""
    address = urlparse(server.url)
    deadline = time.monotonic() + 20
    while True:
        try:
            return socket.create_connection((address.hostname, address.port), timeout=10)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _reply(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize(("framing", "status"), [(b"Content-Length: 104857600\r\n", b"413"),
                                                 (b"Transfer-Encoding: chunked\r\n", b"411")])
def test_a_big_or_unbounded_body_is_refused_before_it_is_read(server: Server, framing: bytes, status: bytes) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /api/runs/x/gates/y/approve HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     + b"t" * 32 + b"\r\nContent-Type: application/json\r\n" + framing + b"\r\n" + b"x" * 1000)
        started = time.monotonic()
        reply = _reply(sock)
    assert reply.startswith(b"HTTP/1.1 " + status), reply[:200]
    assert time.monotonic() - started < 2


def test_a_connection_whose_headers_never_finish_is_closed(server: Server) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        assert _reply(sock) == b""  # closed by the server, nothing answered
    assert 0.5 < time.monotonic() - started < 8
    assert os.environ["STEPLINE_HEADER_TIMEOUT_SECONDS"] == "1"


@pytest.mark.parametrize("path", [b"/api/runs/x/gates/y/approve", b"/login"])
def test_a_body_sent_slowly_times_out(server: Server, path: bytes) -> None:
    """Headers in time, then a body a byte at a time: 408 once its time is up (the API's JSON and a page's form),
    the connection closed, and the server says nothing on its error output."""
    with _connect(server) as sock:
        sock.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\n"
                     b"Authorization: Bearer " + b"t" * 32 + b"\r\nContent-Type: application/x-www-form-urlencoded"
                     b"\r\nContent-Length: 100\r\n\r\n")
        started = time.monotonic()
        sent = 0
        sock.settimeout(0.3)
        reply = b""
        while time.monotonic() - started < 8:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:  # nothing yet: one more byte, as a slow client sends them
                sock.sendall(b"a")
                sent += 1
                continue
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert b"the request body did not arrive in time" in reply
    assert 0.5 < time.monotonic() - started < 8 and sent < 100
    server.stop()
    assert not [line for line in server.lines if "Traceback" in line or "Exception" in line], server.lines
