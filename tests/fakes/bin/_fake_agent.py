"""Shared body of the fake agent CLIs: parse argv like the real CLI, do the step over MCP, print its JSON.

Behaviour is picked by ``FAKE_AGENT_BEHAVIOR``: ``work`` (default) reads the step with ``get_step``, writes its
output and finishes (calling the stepline tool ``FAKE_AGENT_TOOL`` first, when set); ``no-finish`` starts (one
stream line) and exits without finishing (saying ``FAKE_AGENT_SAYS`` on stderr); ``hang`` starts a child process,
records both pids in ``FAKE_AGENT_PIDS`` and sleeps; ``slow-edit`` appends its pid to ``FAKE_AGENT_PIDS``, waits
for the file ``FAKE_AGENT_RELEASE``, appends a line to ``edits.txt`` in its folder, then works. Every invocation is
appended to ``FAKE_AGENT_LOG`` (JSON lines: the agent, argv, cwd, prompt and MCP url), so tests can check the command
shape and the prompt.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _json_or_file(value: str) -> dict[str, Any]:
    """A CLI's ``--mcp-config``: inline JSON or a file's path, as the real ones take it."""
    return dict(json.loads(value if value.lstrip().startswith("{") else Path(value).read_text(encoding="utf-8")))


def _mcp_server(agent: str, argv: list[str]) -> tuple[str, dict[str, str]]:
    """The step's MCP server as the real CLI would find it: its URL and the headers it sends."""
    if agent == "claude":
        assert argv[0] == "-p" and _option(argv, "--output-format") == "stream-json" and "--verbose" in argv
        server = _json_or_file(str(_option(argv, "--mcp-config")))["mcpServers"]["stepline"]
        return str(server["url"]), dict(server.get("headers") or {})
    if agent == "codex":
        assert argv[0] == "exec" and "--json" in argv and argv[-1] == "-", argv
        settings = dict(v.split("=", 1) for k, v in itertools.pairwise(argv) if k == "-c"
                        and v.startswith("mcp_servers.stepline."))
        token_env = settings.get("mcp_servers.stepline.bearer_token_env_var")
        headers = {"Authorization": f"Bearer {os.environ[json.loads(token_env)]}"} if token_env else {}
        return str(json.loads(settings["mcp_servers.stepline.url"])), headers
    if agent == "gemini":
        assert _option(argv, "--output-format") == "stream-json"
        settings_file = Path(os.environ["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json"
        server = json.loads(settings_file.read_text(encoding="utf-8"))["mcpServers"]["stepline"]
        return str(server["httpUrl"]), dict(server.get("headers") or {})
    if agent == "qwen":
        assert _option(argv, "--output-format") == "stream-json"
        server = _json_or_file(str(_option(argv, "--mcp-config")))["mcpServers"]["stepline"]
        return str(server["httpUrl"]), dict(server.get("headers") or {})
    assert argv[:3] == ["run", "--format", "json"], argv
    server = json.loads(os.environ["OPENCODE_CONFIG_CONTENT"])["mcp"]["stepline"]
    return str(server["url"]), dict(server.get("headers") or {})


def _session_id(agent: str, argv: list[str], step_id: str) -> str:
    resumed = _option(argv, "--resume") or _option(argv, "--session")
    if agent == "codex" and "resume" in argv:
        resumed = argv[argv.index("resume") + 1]
    if resumed and "--fork-session" not in argv:
        return resumed
    return f"{agent}-session-{step_id}"


async def _work(agent: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    async def call(client: Client, name: str, args: dict[str, Any]) -> Any:
        result = await client.call_tool(name, args)
        if result.is_error:
            raise SystemExit(f"{name} failed: {result.content}")
        return result.structured_content

    async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))) as client:
        step = await call(client, "get_step", {})
        if step["kind"] == "decide":
            await call(client, "decide", {"value": True, "reason": f"fake says yes to {step['condition']}"})
            return step
        if os.environ.get("FAKE_AGENT_TOOL"):
            await call(client, "call_tool", {"name": os.environ["FAKE_AGENT_TOOL"], "args": {}})
        if step["hints"].get("output"):
            first = step["content"].strip().splitlines()[0] if step["content"].strip() else ""
            await call(client, "write_output", {"content": f"{agent} did {step['step_id']}: {first}\n"})
        await call(client, "finish", {"summary": f"{agent} finished {step['step_id']}"})
        return step



def _print_result(agent: str, session: str, text: str) -> None:
    if agent in ("claude", "qwen"):  # qwen streams claude's stream-JSON
        events: list[dict[str, Any]] = [
            {"type": "system", "subtype": "init", "session_id": session, "tools": ["mcp__stepline__finish"]},
            {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}, "session_id": session},
            {"type": "result", "subtype": "success", "is_error": False, "result": text, "session_id": session,
             "total_cost_usd": 0.01, "usage": {"input_tokens": 120, "output_tokens": 30}}]
    elif agent == "codex":
        events = [{"type": "thread.started", "thread_id": session}, {"type": "turn.started"},
                  {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": text}},
                  {"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 0,
                                                       "output_tokens": 20}}]
    elif agent == "gemini":
        events = [{"type": "init", "session_id": session, "model": "fake"},
                  {"type": "message", "role": "assistant", "content": text, "delta": True},
                  {"type": "result", "status": "success", "stats": {"input_tokens": 90, "output_tokens": 10}}]
    else:
        events = [{"type": "text", "sessionID": session, "part": {"type": "text", "text": text}},
                  {"type": "step_finish", "sessionID": session,
                   "part": {"tokens": {"input": 80, "output": 8}, "cost": 0.002}}]
    for event in events:
        print(json.dumps(event), flush=True)


def main(agent: str) -> int:
    """Behave like ``agent`` would for one prompt on stdin."""
    argv = sys.argv[1:]
    prompt = sys.stdin.read()
    url, headers = _mcp_server(agent, argv)
    log = os.environ.get("FAKE_AGENT_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"agent": agent, "argv": argv, "cwd": os.getcwd(), "prompt": prompt,
                                     "url": url, "env_url": os.environ.get("STEPLINE_MCP_URL")}) + "\n")
    behavior = os.environ.get("FAKE_AGENT_BEHAVIOR", "work")
    if behavior == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path(os.environ["FAKE_AGENT_PIDS"]).write_text(f"{os.getpid()} {child.pid}", encoding="utf-8")
        time.sleep(120)
        return 1
    if behavior == "slow-edit":  # a build that takes a while: its edit lands late, once per run that lives
        with open(os.environ["FAKE_AGENT_PIDS"], "a", encoding="utf-8") as pids:
            pids.write(f"{os.getpid()}\n")
        while not Path(os.environ["FAKE_AGENT_RELEASE"]).exists():
            time.sleep(0.05)
        with open("edits.txt", "a", encoding="utf-8") as edits:
            edits.write(f"edit by {os.getpid()}\n")
    if behavior == "no-finish":  # started (its first stream line), then gave up
        print(json.dumps({"type": "system", "subtype": "init", "session_id": "gave-up"}), flush=True)
        print(os.environ.get("FAKE_AGENT_SAYS", "I could not do it"), file=sys.stderr)
        return 3
    step = asyncio.run(_work(agent, url, headers))
    _print_result(agent, _session_id(agent, argv, step["step_id"]), f"done with {step['step_id']}")
    return 0
