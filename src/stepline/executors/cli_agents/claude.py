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

from stepline.executors._usage import Usage
from stepline.executors.cli_agents._spec import (
    CALL,
    SERVER,
    TOOLS,
    AgentCli,
    AgentReport,
    Invocation,
    Reported,
    count,
    json_lines,
    mcp_config_file,
)

__all__ = ["CLAUDE", "parse_stream"]


def _config(inv: Invocation) -> Path:
    return mcp_config_file(inv, "claude-mcp.json", {"type": "http", "url": inv.mcp_url, "headers": inv.mcp_headers()})


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


def _usage(raw: dict[str, Any], cost: Any = None) -> Usage:
    """Anthropic's usage: ``input_tokens`` is the prompt's uncached part, the cache reads and writes come apart."""
    read, write = count(raw, "cache_read_input_tokens"), count(raw, "cache_creation_input_tokens")
    return Usage(count(raw, "input_tokens") + read + write, count(raw, "output_tokens"), read, write,
                 float(cost) if isinstance(cost, int | float) else None, 1)


def _streamed(event: dict[str, Any]) -> Reported | None:
    """An assistant message's usage (repeated per content block, under one message id), or the ``result``'s: the
    whole call's, with the cost Claude Code reckoned (a resumed session's ``result`` counts this call only)."""
    message = event.get("message")
    if event.get("type") == "assistant" and isinstance(message, dict) and isinstance(message.get("usage"), dict):
        return Reported(str(message.get("id") or ""), _usage(message["usage"]), message.get("model"))
    if event.get("type") == "result" and isinstance(event.get("usage"), dict):
        models = event.get("modelUsage")
        model = next(iter(models)) if isinstance(models, dict) and len(models) == 1 else None
        return Reported(CALL, _usage(event["usage"], event.get("total_cost_usd")), model)
    return None


def parse_stream(stdout: str) -> AgentReport:
    """A claude-style stream: ``system`` init, ``assistant``/``user`` messages, a ``result`` with usage (qwen's
    too, whose ``result`` carries its error under ``error.message``)."""
    report = AgentReport()
    for event in json_lines(stdout):
        report.session_id = event.get("session_id") or report.session_id
        if event.get("type") == "result":
            report.text = str(event.get("result") or "")
            if event.get("is_error"):
                error = event.get("error")
                report.error = (report.text or (error.get("message") if isinstance(error, dict) else None)
                                or str(event.get("subtype")))
    return report


CLAUDE = AgentCli(
    "claude", "npm install -g @anthropic-ai/claude-code", _command, parse_stream, _streamed,
    tool_name=lambda tool: f"mcp__{SERVER}__{tool}",
    tool_note=("If these tools are not in your tool list, load them first with ToolSearch, query "
               f"\"select:{','.join(f'mcp__{SERVER}__{tool}' for tool in TOOLS)}\"."),
    setup_problems=(("invalid api key", "set ANTHROPIC_API_KEY (or log in with `claude` once)"),
                    ("please run /login", "set ANTHROPIC_API_KEY (or log in with `claude` once)"),
                    ("not logged in", "set ANTHROPIC_API_KEY (or log in with `claude` once)")),
)
