"""The dashboard bounds what a client sends (issue 28 item 10): a body over the limit (or of undeclared length)
is refused before it is read, and a connection whose headers never finish is closed."""

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
