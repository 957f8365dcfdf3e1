"""Qwen Code (``@qwen-code/qwen-code``, tested with 0.24.x): ``qwen --output-format stream-json``, the prompt on
stdin; its stream is claude's stream-JSON. stepline's MCP server is given inline (``--mcp-config '<json>'``); write
mode is ``--approval-mode yolo``, analysis mode ``plan``. Like Claude Code, Qwen Code defers MCP tools (behind
``tool_search``/``tool_call``), so the prompt names them. Unattended, Qwen needs an auth type set by the user
(``security.auth.selectedType`` in ``~/.qwen/settings.json``, or ``--auth-type`` in the executor's ``extra_args``)
and that provider's key.
"""

from __future__ import annotations

from stepline.executors.cli_agents._spec import SERVER, TOOLS, AgentCli, Invocation, mcp_servers
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


QWEN = AgentCli(
    "qwen", "npm install -g @qwen-code/qwen-code", _command, parse_stream, streamed_usage,
    tool_name=lambda tool: f"mcp__{SERVER}__{tool}",
    tool_note=("Qwen Code defers MCP tools: call each through tool_call with its name and arguments (tool_search "
               f"\"select:{','.join(f'mcp__{SERVER}__{tool}' for tool in TOOLS)}\" shows their parameters)."),
    setup_problems=(("auth type", "set security.auth.selectedType in ~/.qwen/settings.json, or give the executor "
                                  "extra_args: [--auth-type, openai] (0.24 also picks openai when OPENAI_MODEL is "
                                  "set), and that provider's key (OPENAI_API_KEY)"),),
)
