"""Codex (``@openai/codex``, tested with 0.169.x): ``codex exec --json``, the prompt on stdin (``-``).

stepline's MCP server is a ``-c mcp_servers.stepline.url=…`` override (no file), its secret read from
``$STEPLINE_MCP_TOKEN`` (``bearer_token_env_var``: not on the command line). Write mode is the
``workspace-write`` sandbox (``--full-auto`` is gone since 0.1xx), analysis mode ``read-only``; either way
``approval_policy="never"``: nobody is there to approve. The model provider (``model_provider`` and its
``base_url``/``env_key``) is the user's ``~/.codex/config.toml`` (or ``$CODEX_HOME``), read as it is.

Its usage is the thread's running total (a resumed or forked thread's earlier turns included), with
``input_tokens`` the whole prompt: on stdout only as a turn ends (``turn.completed``), and after each model response
in the thread's rollout file (``$CODEX_HOME/sessions/Y/M/D/rollout-*-<thread>.jsonl``, ``token_usage_record``).
"""

from __future__ import annotations

import glob
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepline.executors._usage import Usage
from stepline.executors.cli_agents._spec import (
    SERVER,
    SESSION,
    TOKEN_ENV,
    AgentCli,
    AgentReport,
    Invocation,
    Reported,
    count,
    json_lines,
)

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
             "-c", f'mcp_servers.{SERVER}.default_tools_approval_mode="approve"',
             "-c", f"mcp_servers.{SERVER}.bearer_token_env_var={json.dumps(TOKEN_ENV)}", *inv.extra_args]
    if inv.resume:
        argv += ["fork" if inv.fork else "resume", inv.resume]
    return [*argv, "-"], {TOKEN_ENV: inv.mcp_token}


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage(count(raw, "input_tokens"), count(raw, "output_tokens"), count(raw, "cached_input_tokens"),
                 count(raw, "cache_write_input_tokens"), None, 1)


def _streamed(event: dict[str, Any]) -> Reported | None:
    """The thread's running total: a ``turn.completed`` line's, or the rollout file's after each response
    (``token_usage_record``, written as the response ends; ``token_count`` events come later)."""
    if event.get("type") == "turn.completed" and isinstance(event.get("usage"), dict):
        return Reported(SESSION, _usage(event["usage"]))
    payload = event.get("payload")
    if event.get("type") == "token_usage_record" and isinstance(payload, dict) \
            and isinstance(payload.get("thread_token_usage"), dict):
        return Reported(SESSION, _usage(payload["thread_token_usage"]))
    if event.get("type") == "event_msg" and isinstance(payload, dict) and payload.get("type") == "token_count":
        info = payload.get("info")
        if isinstance(info, dict) and isinstance(info.get("total_token_usage"), dict):
            return Reported(SESSION, _usage(info["total_token_usage"]))
    if event.get("type") == "turn_context" and isinstance(payload, dict) and payload.get("model"):
        return Reported(SESSION, None, str(payload["model"]))  # the model its later totals are of
    return None


def _rollout(env: Mapping[str, str], thread: str) -> Path | None:
    """The rollout file of ``thread`` under ``$CODEX_HOME`` (default ``~/.codex``), once codex has made it."""
    home = Path(env.get("CODEX_HOME") or Path(env.get("HOME") or Path.home()) / ".codex")
    found = sorted(glob.glob(str(home / "sessions" / "*" / "*" / "*" / f"rollout-*-{glob.escape(thread)}.jsonl")))
    return Path(found[-1]) if found else None


def _parse(stdout: str) -> AgentReport:
    report = AgentReport()
    for event in json_lines(stdout):
        kind = event.get("type")
        if kind == "thread.started":
            report.session_id = event.get("thread_id")
        elif kind == "item.completed" and (event.get("item") or {}).get("type") == "agent_message":
            report.text = str(event["item"].get("text") or "")
        elif kind in ("error", "turn.failed"):
            report.error = str(event.get("message") or (event.get("error") or {}).get("message") or kind)
    return report


CODEX = AgentCli(
    "codex", "npm install -g @openai/codex", _command, _parse, _streamed,
    tool_note=f"They are in the `mcp__{SERVER}` tool namespace.",
    setup_problems=(("not logged in", "log in with `codex login`, or set the provider's env_key in "
                                      "~/.codex/config.toml"),),
    session_file=_rollout,
)
