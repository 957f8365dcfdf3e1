"""The MCP server a cli-agent step hands its agent stops with the step, quietly, even while the agent holds its
event stream open (claude's MCP client keeps a GET open for the server's messages): a step stopped by a full disk
prints the one line that says so, not uvicorn's traceback of a cancelled request."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from stepline.errors import StorageError
from stepline.executors._mcp_bridge import serve_http

TOKEN = "s" * 32


async def _open_event_stream(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Initialize an MCP session, then open its event stream (GET) and read its headers; the stream stays open."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    head = f"Host: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "agent", "version": "1"}}})
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"POST /mcp HTTP/1.1\r\n{head}Content-Type: application/json\r\nAccept: application/json, "
                 f"text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
    answer = (await reader.readuntil(b"\r\n\r\n")).decode()
    session = next(line.split(":", 1)[1].strip() for line in answer.split("\r\n")
                   if line.lower().startswith("mcp-session-id:"))
    stream = await asyncio.open_connection(host, int(port))
    stream[1].write(f"GET /mcp HTTP/1.1\r\n{head}Accept: text/event-stream\r\nmcp-session-id: {session}\r\n\r\n"
                    .encode())
    assert (await stream[0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
    writer.close()
    return stream


def test_a_step_stopped_while_its_agent_holds_the_event_stream_says_no_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    from mcp.server.mcpserver import MCPServer

    async def step() -> None:
        server: MCPServer[object] = MCPServer("stepline", log_level="WARNING")
        stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            async with serve_http(server, token=TOKEN) as url:
                stream = await _open_event_stream(url)  # held open by the agent, as claude's client holds it
                raise StorageError("cannot write journal.jsonl: No space left on device")  # the step stops here
        finally:
            if stream is not None:
                stream[1].close()

    with caplog.at_level(logging.WARNING), pytest.raises(StorageError):
        asyncio.run(step())
    # What uvicorn logs goes to the user's terminal (the MCP server's log handler): nothing of it here.
    said = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.name.startswith("uvicorn")]
    assert not said, said
