"""What every agent CLI module gives: how to call the CLI (:class:`Invocation` in, argv and environment out) and
how to read what it prints (:class:`AgentReport`, the usage it streams)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["SERVER", "TOOLS", "TOTAL", "AgentCli", "AgentReport", "Invocation", "Mode", "StreamedUsage",
           "json_lines", "mcp_servers", "tokens", "usage_since"]

Mode = Literal["analysis", "write"]

#: The name stepline's MCP server has in every agent's configuration.
SERVER = "stepline"

#: The tools of stepline's per-step MCP server, as an agent is told them.
TOOLS = ("get_step", "read", "ask", "write_output", "set_var", "call_tool", "decide", "finish")

#: The key of a streamed usage that is the whole call's (a CLI's final result), not one message's.
TOTAL = "*"


@dataclass(slots=True)
class Invocation:
    """Everything that shapes one agent command line. ``config_dir`` is a private folder (mode 0700) of this one
    run, for a CLI that reads its MCP configuration only from a file or a home folder."""

    mode: Mode
    cwd: Path
    mcp_url: str
    config_dir: Path
    include_dirs: list[str] = field(default_factory=list)
    model: str | None = None
    resume: str | None = None
    fork: bool = False
    extra_args: list[str] = field(default_factory=list)


@dataclass(slots=True)
class AgentReport:
    """What the agent printed, parsed: its session id, final text, token usage and any error it reported."""

    session_id: str | None = None
    text: str = ""
    usage: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AgentCli:
    """One agent CLI: its executable, how to install it, how to call it and how to read what it prints."""

    name: str
    install: str
    command: Callable[[Invocation], tuple[list[str], dict[str, str]]]
    parse: Callable[[str], AgentReport]
    #: The usage one line of its stream reports: (what it counts for, usage), or None. The key names one
    #: model message or turn (a later line with the same key replaces it); :data:`TOTAL` is the whole call.
    streamed_usage: Callable[[dict[str, Any]], tuple[str, dict[str, float]] | None] = lambda event: None
    #: The name the model sees for one of stepline's tools (``finish`` -> ``mcp__stepline__finish``).
    tool_name: Callable[[str], str] = lambda tool: tool
    #: What the agent must be told on top of the tool names (claude: how to load deferred tools).
    tool_note: str = ""
    #: Known lines of its output that mean it cannot go on unattended, with the setting the user must give:
    #: (a lowercase fragment of the line, the one-line fix).
    setup_problems: tuple[tuple[str, str], ...] = ()
    #: Whether the usage it reports in a resumed or forked session is the session's running total, the earlier
    #: calls' included (codex): the executor records that total with the session and subtracts it next time.
    usage_is_cumulative: bool = False


def mcp_servers(server: dict[str, Any]) -> str:
    """The ``{"mcpServers": {"stepline": server}}`` JSON most CLIs read."""
    return json.dumps({"mcpServers": {SERVER: server}})


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


def usage_since(total: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """What a running ``total`` adds to the ``before`` it started from."""
    return {name: max(0.0, value - float(before.get(name) or 0)) for name, value in total.items()}


def tokens(raw: dict[str, Any], *, inp: str = "input_tokens", out: str = "output_tokens") -> dict[str, float]:
    """Input and output tokens under the names the executors record."""
    return {"input_tokens": float(raw.get(inp) or 0), "output_tokens": float(raw.get(out) or 0)}


class StreamedUsage:
    """What an agent has used so far, from the usage lines it streams while it runs; ``since``: the session's
    running total before this call, for a CLI whose usage counts the earlier calls of a continued session too."""

    def __init__(self, read: Callable[[dict[str, Any]], tuple[str, dict[str, float]] | None],
                 since: Mapping[str, float] | None = None) -> None:
        self._read = read
        self._since = since or {}
        self._parts: dict[str, dict[str, float]] = {}
        self._total: dict[str, float] | None = None

    def feed(self, line: str) -> bool:
        """Take one line of the agent's stdout; True when it reported usage."""
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
        key, usage = found
        if key == TOTAL:
            self._total = usage
        else:
            self._parts[key or f"#{len(self._parts)}"] = usage
        return True

    @property
    def usage(self) -> dict[str, float]:
        """The call's own usage so far: its reported total, else the sum of its messages'."""
        if self._total is not None:
            return usage_since(self._total, self._since)
        summed: dict[str, float] = {}
        for part in self._parts.values():
            for name, value in part.items():
                summed[name] = summed.get(name, 0.0) + value
        return usage_since(summed, self._since)
