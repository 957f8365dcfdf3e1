"""Codex (``@openai/codex``, tested with 0.169.x): ``codex exec --json``, the prompt on stdin (``-``).

stepline's MCP server is a ``-c mcp_servers.stepline.url=…`` override (no file). Write mode is the
``workspace-write`` sandbox (``--full-auto`` is gone since 0.1xx), analysis mode ``read-only``; either way
``approval_policy="never"``: nobody is there to approve. The model provider (``model_provider`` and its
``base_url``/``env_key``) is the user's ``~/.codex/config.toml`` (or ``$CODEX_HOME``), read as it is.
"""

from __future__ import annotations

import json
from typing import Any

from stepline.executors.cli_agents._spec import SERVER, TOTAL, AgentCli, AgentReport, Invocation, json_lines

__all__ = ["CODEX"]


def _command(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    argv = ["exec", "--json", "--skip-git-repo-check", "-C", str(inv.cwd),
            "-s", "workspace-write" if inv.mode == "write" else "read-only", "-c", 'approval_policy="never"']
    for folder in inv.include_dirs:
        argv += ["--add-dir", folder]
    if inv.model:
        argv += ["-m", inv.model]
    # required: the first turn waits for the server (else its tools may never be offered); approve: with the
    # approval policy "never", a tool call that needs approval fails instead
    argv += ["-c", f"mcp_servers.{SERVER}.url={json.dumps(inv.mcp_url)}", "-c", f"mcp_servers.{SERVER}.required=true",
             "-c", f'mcp_servers.{SERVER}.default_tools_approval_mode="approve"', *inv.extra_args]
    if inv.resume:
        argv += ["fork" if inv.fork else "resume", inv.resume]
    return [*argv, "-"], {}


def _tokens(raw: dict[str, Any]) -> dict[str, float]:
    """Codex counts its cache reads inside ``input_tokens``: recorded apart, as the other executors do."""
    cached = float(raw.get("cached_input_tokens") or 0)
    return {"input_tokens": max(0.0, float(raw.get("input_tokens") or 0) - cached),
            "output_tokens": float(raw.get("output_tokens") or 0), "cached_input_tokens": cached}


def _streamed(event: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    if event.get("type") == "turn.completed" and isinstance(event.get("usage"), dict):
        return TOTAL, _tokens(event["usage"])  # the thread's running total, the resumed turns' included
    return None


def _parse(stdout: str) -> AgentReport:
    report = AgentReport()
    for event in json_lines(stdout):
        kind = event.get("type")
        if kind == "thread.started":
            report.session_id = event.get("thread_id")
        elif kind == "item.completed" and (event.get("item") or {}).get("type") == "agent_message":
            report.text = str(event["item"].get("text") or "")
        elif kind == "turn.completed":
            report.usage = _tokens(event.get("usage") or {})
        elif kind in ("error", "turn.failed"):
            report.error = str(event.get("message") or (event.get("error") or {}).get("message") or kind)
    return report


CODEX = AgentCli(
    "codex", "npm install -g @openai/codex", _command, _parse, _streamed,
    tool_note=f"They are in the `mcp__{SERVER}` tool namespace.",
    setup_problems=(("not logged in", "log in with `codex login`, or set the provider's env_key in "
                                      "~/.codex/config.toml"),),
    usage_is_cumulative=True,
)
