"""Claude Code (``@anthropic-ai/claude-code``, tested with 2.1.x): ``claude -p`` with stream-JSON output.

stepline's MCP server is given with ``--mcp-config FILE --strict-mcp-config`` (the file in the run's private
folder; none of the user's other servers). Write mode is ``--permission-mode acceptEdits`` with Bash allowed;
analysis mode denies the editing tools and Bash. Against Anthropic's own API, Claude Code 2.1 defers MCP tools
behind its ``ToolSearch`` tool (they are not in the model's first tool list), so the prompt names them and says
how to load them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepline.executors.cli_agents._spec import (
    SERVER,
    TOOLS,
    TOTAL,
    AgentCli,
    AgentReport,
    Invocation,
    json_lines,
    mcp_servers,
    tokens,
)

__all__ = ["CLAUDE", "parse_stream", "streamed_usage"]


def _config(inv: Invocation) -> Path:
    path = inv.config_dir / "claude-mcp.json"
    path.write_text(mcp_servers({"type": "http", "url": inv.mcp_url}), encoding="utf-8")
    return path


def _command(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    argv = ["-p", "--output-format", "stream-json", "--verbose",
            "--mcp-config", str(_config(inv)), "--strict-mcp-config"]
    if inv.mode == "write":
        argv += ["--permission-mode", "acceptEdits", "--allowedTools", f"mcp__{SERVER}", "Bash"]
    else:
        argv += ["--permission-mode", "default", "--allowedTools", f"mcp__{SERVER}",
                 "--disallowedTools", "Edit", "Write", "MultiEdit", "NotebookEdit", "Bash"]
    for folder in inv.include_dirs:
        argv += ["--add-dir", folder]
    if inv.model:
        argv += ["--model", inv.model]
    if inv.resume:
        argv += ["--resume", inv.resume] + (["--fork-session"] if inv.fork else [])
    return argv + inv.extra_args, {}


def _tokens(raw: dict[str, Any]) -> dict[str, float]:
    """Claude's usage as the executors record it: cache reads apart (its ``input_tokens`` leave them out)."""
    return {**tokens(raw), "cached_input_tokens": float(raw.get("cache_read_input_tokens") or 0)}


def streamed_usage(event: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    """The usage of a claude-style stream line: an assistant message's, or the ``result``'s (the whole call's)."""
    # stream-json: each assistant message carries its usage (repeated per content block, under one message id)
    message = event.get("message")
    if event.get("type") == "assistant" and isinstance(message, dict) and isinstance(message.get("usage"), dict):
        return str(message.get("id") or ""), _tokens(message["usage"])
    if event.get("type") == "result" and isinstance(event.get("usage"), dict):
        return TOTAL, {**_tokens(event["usage"]), "cost_usd": float(event.get("total_cost_usd") or 0)}
    return None


def parse_stream(stdout: str) -> AgentReport:
    """A claude-style stream: ``system`` init, ``assistant``/``user`` messages, a ``result`` with usage (qwen's
    too, whose ``result`` carries its error under ``error.message``)."""
    report = AgentReport()
    for event in json_lines(stdout):
        report.session_id = event.get("session_id") or report.session_id
        if event.get("type") == "result":
            report.text = str(event.get("result") or "")
            report.usage = {**_tokens(event.get("usage") or {}), "cost_usd": float(event.get("total_cost_usd") or 0)}
            if event.get("is_error"):
                error = event.get("error")
                report.error = (report.text or (error.get("message") if isinstance(error, dict) else None)
                                or str(event.get("subtype")))
    return report


CLAUDE = AgentCli(
    "claude", "npm install -g @anthropic-ai/claude-code", _command, parse_stream, streamed_usage,
    tool_name=lambda tool: f"mcp__{SERVER}__{tool}",
    tool_note=("If these tools are not in your tool list, load them first with ToolSearch, query "
               f"\"select:{','.join(f'mcp__{SERVER}__{tool}' for tool in TOOLS)}\"."),
    setup_problems=(("invalid api key", "set ANTHROPIC_API_KEY (or log in with `claude` once)"),
                    ("please run /login", "set ANTHROPIC_API_KEY (or log in with `claude` once)"),
                    ("not logged in", "set ANTHROPIC_API_KEY (or log in with `claude` once)")),
)
