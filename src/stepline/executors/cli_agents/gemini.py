"""Gemini CLI (``@google/gemini-cli``, tested with 0.61.x): ``gemini --output-format stream-json``, the prompt on stdin.

Gemini reads MCP servers only from settings files, and a system settings file
(``GEMINI_CLI_SYSTEM_SETTINGS_PATH``) must be owned by root in folders nobody else may write, so stepline gives it
a home of its own for the run (``GEMINI_CLI_HOME``, documented): a ``.gemini`` folder holding the user's settings with
stepline's server added and links to the user's other files there (credentials, sessions). The run's folder is
trusted for the session (``--skip-trust``), so write mode's ``--approval-mode yolo`` holds; analysis mode is
``default`` with stepline's server trusted (its tools need no confirmation, the editing tools are refused).

A later step resumes a session with ``--resume ID``: gemini keeps it in the user's ``.gemini/tmp/<project>/chats``,
linked into the run's home (made there first if missing, so a session outlives the run). Gemini has no fork: a fork
starts from a copy, ``--session-file`` of the session's file, which gemini imports under a new session id.

Its usage: the ``result`` line's ``stats`` are the whole call's (``input_tokens`` the whole prompt, ``cached`` its
cached part); each model response's (``tokens``) is in the session's file as gemini writes it, not on stdout.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepline.errors import ExecutorError
from stepline.executors._usage import Usage
from stepline.executors.cli_agents._spec import (
    CALL,
    SERVER,
    AgentCli,
    AgentReport,
    Invocation,
    Reported,
    count,
    json_lines,
)

__all__ = ["GEMINI"]


def _user() -> Path:
    """The user's ``.gemini`` folder."""
    return Path(os.environ.get("GEMINI_CLI_HOME") or Path.home()) / ".gemini"


def _home(inv: Invocation) -> Path:
    """A home for this run whose ``.gemini`` is the user's, with stepline's MCP server added to its settings."""
    user = _user()
    home = inv.config_dir / "gemini-home"
    mine = home / ".gemini"
    mine.mkdir(parents=True)
    # its sessions (tmp/<project>/chats) must outlive this home, for a later step to resume one
    (user / "tmp").mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {}
    if (user / "settings.json").is_file():
        try:
            settings = json.loads((user / "settings.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ExecutorError(f"{user / 'settings.json'}: cannot be read as JSON ({exc})",
                                hint="fix the file (stepline adds its MCP server to a copy of it)") from None
    for entry in user.iterdir() if user.is_dir() else ():
        if entry.name != "settings.json":
            (mine / entry.name).symlink_to(entry)
    servers = settings.get("mcpServers")
    servers = servers if isinstance(servers, dict) else {}
    settings["mcpServers"] = {**servers, SERVER: {"httpUrl": inv.mcp_url, "trust": True, "headers": inv.mcp_headers()}}
    (mine / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return home


def _kept(session_id: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """The file gemini keeps session ``session_id`` in: ``tmp/<project>/chats/session-<time>-<id[:8]>.jsonl`` of the
    user's ``.gemini``, its ``sessionId`` near the start; None until gemini has made it."""
    chats = Path(env.get("GEMINI_CLI_HOME") or env.get("HOME") or Path.home()) / ".gemini" / "tmp"
    for path in sorted(chats.glob(f"*/chats/session-*-{glob.escape(session_id[:8])}.json*")):
        with path.open(encoding="utf-8", errors="replace") as file:
            if f'"{session_id}"' in file.read(4096):
                return path
    return None


def _session_file(session_id: str) -> Path:
    """The user's file of session ``session_id`` (:func:`_kept`), for a fork to import."""
    if (path := _kept(session_id)) is not None:
        return path
    chats = _user() / "tmp"
    raise ExecutorError(f"no gemini session {session_id} is kept under {chats}/*/chats, so it cannot be forked",
                        hint="resume it in the gemini home it was made in (GEMINI_CLI_HOME), or start a new session")


def _command(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    argv = ["--output-format", "stream-json", "--skip-trust",
            "--approval-mode", "yolo" if inv.mode == "write" else "default", "--allowed-mcp-server-names", SERVER]
    if inv.include_dirs:
        argv += ["--include-directories", ",".join(inv.include_dirs)]
    if inv.model:
        argv += ["-m", inv.model]
    if inv.resume:
        argv += ["--session-file", str(_session_file(inv.resume))] if inv.fork else ["--resume", inv.resume]
    return argv + inv.extra_args, {"GEMINI_CLI_HOME": str(_home(inv))}


def _streamed(event: dict[str, Any]) -> Reported | None:
    """The ``result`` line's ``stats`` (the whole call's), or a model response's ``tokens`` in the session's file."""
    if event.get("type") == "result" and isinstance(event.get("stats"), dict):
        stats = event["stats"]
        models = stats.get("models")
        model = next(iter(models)) if isinstance(models, dict) and len(models) == 1 else None
        return Reported(CALL, Usage(count(stats, "input_tokens"), count(stats, "output_tokens", "thoughts"),
                                    count(stats, "cached"), 0.0, None, 1), model)
    if event.get("type") == "gemini" and isinstance(event.get("tokens"), dict):
        tokens = event["tokens"]
        return Reported(str(event.get("id") or ""), Usage(count(tokens, "input"), count(tokens, "output", "thoughts"),
                                                          count(tokens, "cached"), 0.0, None, 1), event.get("model"))
    return None


def _session_of(env: Mapping[str, str], session_id: str) -> Path | None:
    """Where the run's gemini home keeps session ``session_id`` (its ``tmp`` is the user's)."""
    return _kept(session_id, env)


def _parse(stdout: str) -> AgentReport:
    """A gemini-style stream: ``init``, ``message`` deltas, ``tool_use``/``tool_result``, ``result`` with stats."""
    report = AgentReport()
    parts: list[str] = []
    for event in json_lines(stdout):
        report.session_id = event.get("session_id") or report.session_id
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            parts.append(str(event.get("content") or ""))
        elif kind == "result" or "response" in event:
            if event.get("response"):
                parts = [str(event["response"])]
            if event.get("status") == "error" or event.get("error"):
                error = event.get("error")
                report.error = str(error.get("message") if isinstance(error, dict) else error or "error")
    report.text = "".join(parts)
    return report


GEMINI = AgentCli(
    "gemini", "npm install -g @google/gemini-cli", _command, _parse, _streamed,
    tool_name=lambda tool: f"mcp_{SERVER}_{tool}",
    session_file=_session_of,
    setup_problems=tuple((fragment, "set security.auth.selectedType in ~/.gemini/settings.json (gemini-api-key, with "
                                    "GEMINI_API_KEY set; also when GOOGLE_GEMINI_BASE_URL points elsewhere)")
                         for fragment in ("invalid auth method", "please set an auth method",
                                          "must specify the gemini_api_key")),
)
