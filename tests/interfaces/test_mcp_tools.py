"""Issue 29: the tools describe themselves as an agent needs — checked with a standard MCP client, the official
inspector's CLI (@modelcontextprotocol/inspector-cli, pinned in tests/agents/, installed by scripts/agents.sh):
every tool and every parameter described, enums where the values are fixed; and with the SDK client: the server's
name, version and the instructions giving the order of calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp import Client

from fakes import agents
from interfaces.mcp_agent import stdio_server
from stepline import __version__

#: The inspector's index.js picks the package.json naming its client from the working folder (``../package.json``
#: when that exists, else the monorepo's): run it from its own build folder.
INSPECTOR = Path(agents.BIN).parent / "@modelcontextprotocol" / "inspector-cli" / "build"
STEPLINE = Path(sys.executable).parent / "stepline"


def _inspect(project: Path, *method: str) -> Any:
    """``mcp-inspector-cli --cli stepline mcp --project-root PROJECT --method …``: its JSON answer."""
    agents.binary("mcp-inspector-cli")
    done = subprocess.run(["node", "cli.js", "--cli", str(STEPLINE), "mcp", "--project-root", str(project),
                           "--method", *method], cwd=INSPECTOR, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0 or done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout)


def test_inspector_lists_tools_with_every_parameter_described_and_fixed_values_as_enums(project: Path) -> None:
    tools = {tool["name"]: tool for tool in _inspect(project, "tools/list")["tools"]}
    assert set(tools) == {"list_workflows", "start_run", "resume_run", "current_step", "run_status", "list_gates",
                          "answer", "decide_gate", "read", "ask", "write_output", "set_var", "call_tool", "decide",
                          "finish"}
    undescribed = [f"{name}.{param}" for name, tool in tools.items()
                   for param, schema in tool["inputSchema"].get("properties", {}).items()
                   if len(schema.get("description") or "") < 15]
    assert undescribed == []
    assert all(len(tool.get("description") or "") > 40 for tool in tools.values())
    start = tools["start_run"]["inputSchema"]["properties"]
    assert start["mode"]["enum"] == ["normal", "yolo", "non-interactive"] and start["mode"]["default"] == "normal"
    assert tools["write_output"]["inputSchema"]["properties"]["mode"]["enum"] == ["append", "replace", "section"]
    for name in ("read", "ask", "write_output", "set_var", "call_tool", "decide", "finish", "answer"):
        assert "request_id" in tools[name]["inputSchema"]["properties"], name  # each call names its request
    assert "current_step lists" in tools["finish"]["inputSchema"]["properties"]["request_id"]["description"]


def test_inspector_call_with_a_value_outside_the_enum_is_refused_clearly(project: Path) -> None:
    (project / "flow.yaml").write_text("id: f\nsteps:\n  - id: a\n    body: Do it.\n", encoding="utf-8")
    listed = _inspect(project, "tools/call", "--tool-name", "list_workflows")
    assert listed["structuredContent"]["result"] == [{"path": "flow.yaml", "format": "native"}]
    refused = _inspect(project, "tools/call", "--tool-name", "start_run", "--tool-arg", "path=flow.yaml",
                       "--tool-arg", "mode=fast")
    assert refused["isError"] is True
    text = refused["content"][0]["text"]
    assert "mode" in text and "'normal', 'yolo' or 'non-interactive'" in text


def test_server_names_itself_with_steplines_version_and_tells_the_order_of_calls(project: Path) -> None:
    async def main() -> tuple[Any, str | None]:
        async with asyncio.timeout(60), Client(stdio_server(project)) as client:
            return client.server_info, client.instructions

    info, instructions = asyncio.run(main())
    assert info is not None and (info.name, info.version) == ("stepline", __version__)
    assert instructions is not None
    order = ["list_workflows", "start_run", "current_step", "finish", "answer(run_id, answer, request_id)"]
    assert [instructions.index(step) for step in order] == sorted(instructions.index(step) for step in order)
    assert "request_id" in instructions and "parallel" in instructions
