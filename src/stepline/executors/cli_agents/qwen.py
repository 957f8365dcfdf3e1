"""Qwen Code (``@qwen-code/qwen-code``, tested with 0.24.x): ``qwen --output-format stream-json``, the prompt on
stdin; its stream is claude's stream-JSON. stepline's MCP server is given in a file (``--mcp-config FILE``); write
mode is ``--approval-mode yolo``, analysis mode ``plan``. Like Claude Code, Qwen Code defers MCP tools (behind
``tool_search``/``tool_call``), so the prompt names them. Unattended, Qwen needs an auth type set by the user
(``security.auth.selectedType`` in ``~/.qwen/settings.json``, or ``--auth-type`` in the executor's ``extra_args``)
and that provider's key. A later step resumes a session with ``--resume ID`` or forks it with ``--resume ID
--fork-session`` (qwen copies it under a new id; its sessions are in ``~/.qwen``). Its usage is OpenAI's:
``input_tokens`` is the whole prompt, ``cache_read_input_tokens`` its cached part; each assistant message has its
own, and the ``result`` line the session's running total (a resumed session's earlier calls included).
"""

from __future__ import annotations

from typing import Any

from stepline.executors._usage import Usage
from stepline.executors.cli_agents._spec import (
    SERVER,
    SESSION,
    TOOLS,
    AgentCli,
    Invocation,
    Reported,
    count,
    mcp_config_file,
)
from stepline.executors.cli_agents.claude import parse_stream

__all__ = ["QWEN"]


def _command(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    argv = ["--output-format", "stream-json", "--approval-mode", "yolo" if inv.mode == "write" else "plan",
            "--mcp-config", str(mcp_config_file(inv, "qwen-mcp.json", {"httpUrl": inv.mcp_url, "trust": True,
                                                                       "headers": inv.mcp_headers()})),
            "--allowed-mcp-server-names", SERVER]
    if inv.include_dirs:
        argv += ["--include-directories", ",".join(inv.include_dirs)]
    if inv.model:
        argv += ["-m", inv.model]
    if inv.resume:
        argv += ["--resume", inv.resume] + (["--fork-session"] if inv.fork else [])
    return argv + inv.extra_args, {}


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage(count(raw, "input_tokens"), count(raw, "output_tokens"), count(raw, "cache_read_input_tokens"),
                 count(raw, "cache_creation_input_tokens"), None, 1)


def _streamed(event: dict[str, Any]) -> Reported | None:
    """An assistant message's usage, or the ``result``'s: the session's running total."""
    message = event.get("message")
    if event.get("type") == "assistant" and isinstance(message, dict) and isinstance(message.get("usage"), dict):
        return Reported(str(message.get("id") or ""), _usage(message["usage"]), message.get("model"))
    if event.get("type") == "result" and isinstance(event.get("usage"), dict):
        return Reported(SESSION, _usage(event["usage"]))
    return None


QWEN = AgentCli(
    "qwen", "npm install -g @qwen-code/qwen-code", _command, parse_stream, _streamed,
    tool_name=lambda tool: f"mcp__{SERVER}__{tool}",
    tool_note=("Qwen Code defers MCP tools: call each through tool_call with its name and arguments (tool_search "
               f"\"select:{','.join(f'mcp__{SERVER}__{tool}' for tool in TOOLS)}\" shows their parameters)."),
    setup_problems=(("auth type", "set security.auth.selectedType in ~/.qwen/settings.json, or give the executor "
                                  "extra_args: [--auth-type, openai] (0.24 also picks openai when OPENAI_MODEL is "
                                  "set), and that provider's key (OPENAI_API_KEY)"),),
)
