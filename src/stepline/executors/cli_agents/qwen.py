"""Qwen Code (``@qwen-code/qwen-code``, tested with 0.24.x): ``qwen --output-format stream-json``, the prompt on
stdin; its stream is claude's stream-JSON. stepline's MCP server is given inline (``--mcp-config '<json>'``); write
mode is ``--approval-mode yolo``, analysis mode ``plan``. Like Claude Code, Qwen Code defers MCP tools (behind
``tool_search``/``tool_call``), so the prompt names them. Unattended, Qwen needs an auth type set by the user
(``security.auth.selectedType`` in ``~/.qwen/settings.json``, or ``--auth-type`` in the executor's ``extra_args``)
and that provider's key. A later step resumes a session with ``--resume ID`` or forks it with ``--resume ID
--fork-session`` (qwen copies it under a new id; its sessions are in ``~/.qwen``). The usage recorded is the sum of
the assistant messages': a resumed session's ``result`` line counts its earlier calls too.
"""

from __future__ import annotations

from typing import Any

from stepline.executors.cli_agents._spec import (
    SERVER,
    TOOLS,
    AgentCli,
    AgentReport,
    Invocation,
    StreamedUsage,
    mcp_servers,
)
from stepline.executors.cli_agents.claude import parse_stream, streamed_usage

__all__ = ["QWEN"]


def _command(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    argv = ["--output-format", "stream-json", "--approval-mode", "yolo" if inv.mode == "write" else "plan",
            "--mcp-config", mcp_servers({"httpUrl": inv.mcp_url, "trust": True}),
            "--allowed-mcp-server-names", SERVER]
    if inv.include_dirs:
        argv += ["--include-directories", ",".join(inv.include_dirs)]
    if inv.model:
        argv += ["-m", inv.model]
    if inv.resume:
        argv += ["--resume", inv.resume] + (["--fork-session"] if inv.fork else [])
    return argv + inv.extra_args, {}


def _streamed(event: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    """An assistant message's usage. The ``result`` line's total is the session's: a resumed or forked session's
    counts the earlier calls' usage too."""
    return streamed_usage(event) if event.get("type") == "assistant" else None


def _parse(stdout: str) -> AgentReport:
    """claude's stream, its usage this call's messages' (see :func:`_streamed`); the ``result``'s total only when
    no message carries usage."""
    report = parse_stream(stdout)
    used = StreamedUsage(_streamed)
    for line in stdout.splitlines():
        used.feed(line)
    report.usage = used.usage or report.usage
    return report


QWEN = AgentCli(
    "qwen", "npm install -g @qwen-code/qwen-code", _command, _parse, _streamed,
    tool_name=lambda tool: f"mcp__{SERVER}__{tool}",
    tool_note=("Qwen Code defers MCP tools: call each through tool_call with its name and arguments (tool_search "
               f"\"select:{','.join(f'mcp__{SERVER}__{tool}' for tool in TOOLS)}\" shows their parameters)."),
    setup_problems=(("auth type", "set security.auth.selectedType in ~/.qwen/settings.json, or give the executor "
                                  "extra_args: [--auth-type, openai] (0.24 also picks openai when OPENAI_MODEL is "
                                  "set), and that provider's key (OPENAI_API_KEY)"),),
)
