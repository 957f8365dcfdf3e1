"""What every agent CLI module gives: how to call the CLI (:class:`Invocation` in, argv and environment out) and
how to read what it prints (:class:`AgentReport`, the usage it streams)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from stepline.executors._usage import Usage

__all__ = ["CALL", "SERVER", "SESSION", "TOKEN_ENV", "TOOLS", "AgentCli", "AgentReport", "Invocation", "Mode",
           "Reported", "StreamedUsage", "count", "json_lines", "mcp_config_file", "mcp_servers"]

Mode = Literal["analysis", "write"]

#: The name stepline's MCP server has in every agent's configuration.
SERVER = "stepline"

#: The tools of stepline's per-step MCP server, as an agent is told them.
TOOLS = ("get_step", "read", "ask", "write_output", "set_var", "call_tool", "decide", "finish")

#: The key of a reported usage that is the whole call's (a CLI's final result), not one response's.
CALL = "*"
#: The key of a reported usage that is the session's running total, a resumed session's earlier calls included
#: (codex's, qwen's): the call's own is what it adds to the total the session had (:class:`StreamedUsage`).
SESSION = "**"


class Reported(NamedTuple):
    """One usage a line of a CLI's output reports: one model response's (``key`` names it; a later line with the
    same key replaces it), the whole call's (:data:`CALL`) or the session's (:data:`SESSION`); and the model (a line
    may name only that: ``usage`` None)."""

    key: str
    usage: Usage | None
    model: str | None = None

#: The environment variable holding the step's MCP secret (for a CLI that reads a header's value from one).
TOKEN_ENV = "STEPLINE_MCP_TOKEN"


@dataclass(slots=True)
class Invocation:
    """Everything that shapes one agent command line. ``config_dir`` is a private folder (mode 0700) of this one
    run, for a CLI that reads its MCP configuration only from a file or a home folder. ``mcp_token`` is the step's
    secret the MCP server asks of every request (:meth:`mcp_headers`): it goes in a file of ``config_dir`` or the
    environment, never on the command line, which any local process can read."""

    mode: Mode
    cwd: Path
    mcp_url: str
    mcp_token: str
    config_dir: Path
    include_dirs: list[str] = field(default_factory=list)
    model: str | None = None
    resume: str | None = None
    fork: bool = False
    extra_args: list[str] = field(default_factory=list)

    def mcp_headers(self) -> dict[str, str]:
        """The HTTP header that admits the agent to its step's MCP server."""
        return {"Authorization": f"Bearer {self.mcp_token}"}


@dataclass(slots=True)
class AgentReport:
    """What the agent printed, parsed: its session id, final text and any error it reported (its usage:
    :class:`StreamedUsage`)."""

    session_id: str | None = None
    text: str = ""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AgentCli:
    """One agent CLI: its executable, how to install it, how to call it and how to read what it prints."""

    name: str
    install: str
    command: Callable[[Invocation], tuple[list[str], dict[str, str]]]
    parse: Callable[[str], AgentReport]
    #: Its usage normalizer: the usage one line of its stream (or of its session file) reports, or None.
    streamed_usage: Callable[[dict[str, Any]], Reported | None] = lambda event: None
    #: The file it keeps a session's record in as it runs, if that carries usage per model response where its stream
    #: does not (codex, gemini): found from its environment, the session id and when the call started.
    session_file: Callable[[Mapping[str, str], str], Path | None] | None = None
    #: The name the model sees for one of stepline's tools (``finish`` -> ``mcp__stepline__finish``).
    tool_name: Callable[[str], str] = lambda tool: tool
    #: What the agent must be told on top of the tool names (claude: how to load deferred tools).
    tool_note: str = ""
    #: Known lines of its output that mean it cannot go on unattended, with the setting the user must give:
    #: (a lowercase fragment of the line, the one-line fix).
    setup_problems: tuple[tuple[str, str], ...] = ()



def mcp_servers(server: dict[str, Any]) -> str:
    """The ``{"mcpServers": {"stepline": server}}`` JSON most CLIs read."""
    return json.dumps({"mcpServers": {SERVER: server}})


def mcp_config_file(inv: Invocation, name: str, server: dict[str, Any]) -> Path:
    """``config_dir/name`` holding :func:`mcp_servers` of ``server``, readable by its owner only (it holds the
    step's secret)."""
    path = inv.config_dir / name
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        handle.write(mcp_servers(server))
    return path


def json_lines(stdout: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a CLI's output: one whole document, or one per line (other lines skipped)."""
    text = stdout.strip()
    if text.startswith("{") and text.endswith("}") and "\n{" not in text:
        with contextlib.suppress(json.JSONDecodeError):
            whole = json.loads(text)
            if isinstance(whole, dict):
                yield whole
                return
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                item = json.loads(line)
                if isinstance(item, dict):
                    yield item


def count(raw: Mapping[str, Any], *names: str) -> float:
    """The sum of the counts ``names`` of a CLI's usage object (absent or not a number: 0)."""
    total = 0.0
    for name in names:
        value = raw.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            total += float(value)
    return total


class StreamedUsage:
    """What an agent has used so far, from the usage it reports while it runs (each line of its stream, and of the
    file it keeps its session in, fed to :meth:`feed`): the call's own total when it reports one, else the sum of
    its responses'. A session's running total (:data:`SESSION`) counts for what it adds to ``before``, the total the
    session had when this call resumed or forked it."""

    def __init__(self, read: Callable[[dict[str, Any]], Reported | None], before: Usage | None = None) -> None:
        self._read = read
        self._before = before or Usage()
        self._parts: dict[str, Usage] = {}
        self._call: Usage | None = None
        #: The last running total of the session the CLI reported (None: it reports none).
        self.session: Usage | None = None
        #: The model the CLI last named in its usage (None: it names none).
        self.model: str | None = None

    def feed(self, line: str) -> bool:
        """Take one line of the agent's output; True when it reported usage."""
        line = line.strip()
        if not line.startswith("{"):
            return False
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return False
        found = self._read(event) if isinstance(event, dict) else None
        if found is None:
            return False
        self.model = found.model or self.model
        if found.usage is None:
            return False
        if found.key == SESSION:  # the latest; a stale read of the session file may come after the turn's end
            if self.session is None or found.usage.tokens >= self.session.tokens:
                self.session = found.usage
        elif found.key == CALL:
            self._call = found.usage
        else:
            self._parts[found.key or f"#{len(self._parts)}"] = found.usage
        return True

    @property
    def usage(self) -> Usage:
        """The call's own usage so far."""
        if self.session is not None:
            return self.session.since(self._before)
        if self._call is not None:
            return self._call
        return sum(self._parts.values(), Usage())
