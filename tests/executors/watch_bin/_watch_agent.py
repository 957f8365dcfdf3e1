"""A fake ``claude`` that runs a while, streaming what it does, for the watching and budget tests.

``WATCH_AGENT`` picks the behaviour:

``spend``  streams stream-json ``assistant`` messages, each with its usage (``WATCH_TOKENS`` tokens, default 300),
           every 50 ms, forever; it starts a child that runs forever too and writes both pids to ``WATCH_PIDS``,
           and each message's running total and time (just before it prints it) to ``WATCH_TIMES``; with
           ``WATCH_GATE`` set, it starts streaming only once that file exists.
           ``WATCH_IGNORE_TERM=1``: both ignore SIGTERM (only SIGKILL stops them).
``slow``   prints ``WATCH_LINES`` lines (default 3) on stdout and one on stderr, then waits until the file
           ``WATCH_GATE`` exists, then finishes the step over MCP and prints claude's result line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _server(argv: list[str]) -> dict[str, Any]:
    config = json.loads(Path(argv[argv.index("--mcp-config") + 1]).read_text(encoding="utf-8"))
    return dict(config["mcpServers"]["stepline"])


async def _finish(server: dict[str, Any], summary: str) -> None:
    from mcp import Client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    transport = streamable_http_client(server["url"], http_client=create_mcp_http_client(headers=server["headers"]))
    async with Client(transport) as client:
        await client.call_tool("finish", {"summary": summary})


def _spend() -> int:
    ignore = os.environ.get("WATCH_IGNORE_TERM") == "1"
    if ignore:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child_code = ("import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore else "")
                  + "time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, "-c", child_code])
    Path(os.environ["WATCH_PIDS"]).write_text(f"{os.getpid()} {child.pid}", encoding="utf-8")
    gate = os.environ.get("WATCH_GATE")
    while gate and not Path(gate).exists():
        time.sleep(0.02)
    tokens = int(os.environ.get("WATCH_TOKENS", "300"))
    print(json.dumps({"type": "system", "subtype": "init", "session_id": "spender"}), flush=True)
    total = 0
    with open(os.environ["WATCH_TIMES"], "a", encoding="utf-8") as times:
        for number in range(1, 100000):
            total += tokens
            message = {"id": f"msg_{number}", "role": "assistant", "content": [{"type": "text", "text": "more"}],
                       "usage": {"input_tokens": tokens - 50, "output_tokens": 50}}
            times.write(f"{total} {time.time()}\n")
            times.flush()
            print(json.dumps({"type": "assistant", "message": message, "session_id": "spender"}), flush=True)
            time.sleep(0.05)
    return 1


def _slow(argv: list[str]) -> int:
    for number in range(1, int(os.environ.get("WATCH_LINES", "3")) + 1):
        print(f"working on part {number}", flush=True)
        time.sleep(0.05)
    print("a note on stderr", file=sys.stderr, flush=True)
    gate = Path(os.environ["WATCH_GATE"])
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    asyncio.run(_finish(_server(argv), "did it slowly"))
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "did it slowly",
                      "session_id": "slow", "total_cost_usd": 0.01,
                      "usage": {"input_tokens": 100, "output_tokens": 20}}), flush=True)
    return 0


def main() -> int:
    """Behave as ``WATCH_AGENT`` says."""
    sys.stdin.read()
    if os.environ.get("WATCH_AGENT") == "spend":
        return _spend()
    return _slow(sys.argv[1:])
