"""opencode (``opencode-ai``, tested with 1.18.x): ``opencode run --format json``, the prompt on stdin.

stepline's MCP server comes in ``OPENCODE_CONFIG_CONTENT`` (inline configuration, merged over the user's; one the
user gives in that variable is kept, the server added to it). Write mode
is the ``build`` agent with ``--auto`` (its permission asks are approved: nobody is there to answer them), analysis
mode the read-only ``plan`` agent. The provider and model are the user's opencode configuration (``--model
provider/model`` through the executor's ``model`` option). A later step continues a session with ``--session ID``,
or forks it with ``--session ID --fork`` (a new session from a copy); its sessions are in opencode's data folder
(``$XDG_DATA_HOME/opencode``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from stepline.errors import ExecutorError
from stepline.executors._usage import Usage
from stepline.executors.cli_agents._spec import SERVER, AgentCli, AgentReport, Invocation, Reported, count, json_lines

__all__ = ["OPENCODE"]


def _command(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    try:  # a configuration the user gives the same way is kept
        config = json.loads(os.environ.get("OPENCODE_CONFIG_CONTENT") or "{}")
    except ValueError as exc:
        raise ExecutorError(f"OPENCODE_CONFIG_CONTENT is not JSON ({exc})",
                            hint="fix the variable (stepline adds its MCP server to it)") from None
    servers = config.get("mcp") if isinstance(config, dict) else None
    if not isinstance(config, dict) or not isinstance(servers, dict | None):
        raise ExecutorError("OPENCODE_CONFIG_CONTENT is not a JSON object with an `mcp` object",
                            hint="fix the variable (stepline adds its MCP server to it)")
    config["mcp"] = {**(servers or {}), SERVER: {"type": "remote", "url": inv.mcp_url, "enabled": True,
                                                 "headers": inv.mcp_headers()}}
    argv = ["run", "--format", "json", "--print-logs", "--log-level", "WARN", "--dir", str(inv.cwd)]
    argv += ["--agent", "build", "--auto"] if inv.mode == "write" else ["--agent", "plan"]
    if inv.model:
        argv += ["--model", inv.model]
    if inv.resume:
        argv += ["--session", inv.resume] + (["--fork"] if inv.fork else [])
    return argv + inv.extra_args, {"OPENCODE_CONFIG_CONTENT": json.dumps(config)}


def _streamed(event: dict[str, Any]) -> Reported | None:
    """A ``step_finish`` line: one model response's tokens (``input`` its prompt's uncached part, the cache's
    ``read`` and ``write`` apart; reasoning counted as output) and the cost opencode reckoned."""
    part = event.get("part")
    if event.get("type") != "step_finish" or not isinstance(part, dict):
        return None
    raw: dict[str, Any] = part["tokens"] if isinstance(part.get("tokens"), dict) else {}
    cache: dict[str, Any] = raw["cache"] if isinstance(raw.get("cache"), dict) else {}
    read, write = count(cache, "read"), count(cache, "write")
    cost = part.get("cost")
    return Reported(str(part.get("id") or ""), Usage(
        count(raw, "input") + read + write, count(raw, "output", "reasoning"), read, write,
        float(cost) if isinstance(cost, int | float) else None, 1))


def _parse(stdout: str) -> AgentReport:
    report = AgentReport()
    parts: list[str] = []
    for event in json_lines(stdout):
        report.session_id = event.get("sessionID") or report.session_id
        part = event.get("part") or {}
        if event.get("type") == "text":
            parts.append(str(part.get("text") or ""))
        elif event.get("type") == "error":
            error = event.get("error")
            if isinstance(error, dict):
                error = (error.get("data") or {}).get("message") or error.get("message") or error.get("name")
            report.error = str(error or "error")
    report.text = "".join(parts)
    return report


OPENCODE = AgentCli(
    "opencode", "npm install -g opencode-ai", _command, _parse, _streamed,
    tool_name=lambda tool: f"{SERVER}_{tool}",
    setup_problems=(("no provider", "configure a provider and model in opencode.json (or `opencode auth login`) "
                                    "and give the executor model: provider/model"),),
)
