"""The ``cli-agent`` executor: a coding-agent CLI (claude, codex, gemini, qwen, opencode) does the step.

Each request runs the agent once, with the command shapes CCW uses: analysis mode is read-only, write mode lets
the agent edit files; ``cd`` is its working folder; include dirs widen what it may read; an execution id names
the agent's conversation so a later step can resume it or fork it (CCW's ``--id`` / ``--resume``). The prompt
— the current step only, its variables, what to produce and how to report back — goes on stdin. The agent
reports through stepline's MCP server, served on a free 127.0.0.1 port for this one request (the
``mcp-bridge`` machinery), so every ``write_output``/``finish`` it makes is checked and journaled like any
other executor's. Its stdout (JSON / stream-JSON) gives the session id, the final text and token usage.

While it runs, each line it prints is appended to the step's output log in the run's folder
(:meth:`StepSession.output_log`, followed by ``stepline logs RUN -f``), and the usage it streams (claude's
per-message usage, opencode's steps, codex's turns) is measured against the call's budget — the caller's
(``hints["budget"]``, see :mod:`stepline.executors._budget`) or ``max_call_tokens`` / ``max_call_cost_usd``.
Past it, the agent's process group is stopped (SIGTERM, SIGKILL after ``stop_grace_seconds``), the call is
journaled as stopped with what it had used, and :class:`~stepline.errors.BudgetExceeded` is raised.

The whole agent run is one :meth:`StepSession.memo`: a resumed step replays the agent's journaled calls
instead of running it again. An agent interrupted halfway is run again from the start, and its calls must
then match the ones journaled before the interruption.

Options:
    agent: ``claude`` (default), ``codex``, ``gemini``, ``qwen`` or ``opencode``.
    command: the executable to run instead of the agent's usual name.
    mode: ``write`` or ``analysis`` (default: write for work/generate requests, analysis for the rest).
    cd: the agent's working folder (default: the run's ``project-root`` variable, else the current folder).
    include_dirs: more folders the agent may read.
    model: the model name passed to the CLI.
    execution_id / resume_from / strategy: CCW ``cli_execution`` (``new``, ``resume``, ``fork``); a request's
        ``hints["cli_execution"]`` overrides them per step.
    timeout_seconds: kill the agent after this long (the step's own timeout applies too).
    exit_grace_seconds: how long the agent may run on after ``finish`` before it is killed (default 30).
    extra_args: more arguments for the CLI.
    max_call_tokens / max_call_cost_usd: stop a call whose streamed usage goes past this (no caller's budget).
    stop_grace_seconds: how long a stopped agent's group has between SIGTERM and SIGKILL (default 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from stepline.errors import BudgetExceeded, ExecutorError, UsageError
from stepline.executors._base import Executor
from stepline.executors._budget import CallBudget, SharedMeter
from stepline.executors._protocol import StepRequest, StepSession

__all__ = ["AGENTS", "TOTAL", "AgentCli", "AgentReport", "CliAgentExecutor", "Invocation", "StreamedUsage",
           "build_prompt", "describe_output"]

Mode = Literal["analysis", "write"]
_SERVER = "stepline"


@dataclass(slots=True)
class Invocation:
    """Everything that shapes one agent command line."""

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


# -- command lines -----------------------------------------------------------------------------------------
def _mcp_json(inv: Invocation) -> Path:
    path = inv.config_dir / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {_SERVER: {"type": "http", "url": inv.mcp_url}}}), encoding="utf-8")
    return path


def _claude(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    argv = ["-p", "--output-format", "stream-json", "--verbose", "--mcp-config", str(_mcp_json(inv)),
            "--strict-mcp-config", "--allowedTools", f"mcp__{_SERVER}"]
    if inv.mode == "write":
        argv += ["--permission-mode", "acceptEdits"]
    else:
        argv += ["--permission-mode", "default", "--disallowedTools", "Edit,Write,MultiEdit,NotebookEdit,Bash"]
    for folder in inv.include_dirs:
        argv += ["--add-dir", folder]
    if inv.model:
        argv += ["--model", inv.model]
    if inv.resume:
        argv += ["--resume", inv.resume] + (["--fork-session"] if inv.fork else [])
    return argv + inv.extra_args, {}


def _codex(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    # codex exec cannot fork a session: a fork continues the parent's thread (and is recorded under its own id).
    argv = ["exec", "--json", "--skip-git-repo-check", "-C", str(inv.cwd)]
    argv += ["--full-auto"] if inv.mode == "write" else ["-s", "read-only"]
    for folder in inv.include_dirs:
        argv += ["--add-dir", folder]
    if inv.model:
        argv += ["-m", inv.model]
    argv += ["-c", f"mcp_servers.{_SERVER}.url={json.dumps(inv.mcp_url)}", *inv.extra_args]
    if inv.resume:
        argv += ["resume", inv.resume]
    return [*argv, "-"], {}


def _gemini_family(settings_env: str) -> Callable[[Invocation], tuple[list[str], dict[str, str]]]:
    def command(inv: Invocation) -> tuple[list[str], dict[str, str]]:
        settings = inv.config_dir / "settings.json"
        settings.write_text(json.dumps({"mcpServers": {_SERVER: {"httpUrl": inv.mcp_url, "trust": True}}}),
                            encoding="utf-8")
        argv = ["--output-format", "stream-json", "--approval-mode", "yolo" if inv.mode == "write" else "default",
                "--allowed-mcp-server-names", _SERVER]
        if inv.include_dirs:
            argv += ["--include-directories", ",".join(inv.include_dirs)]
        if inv.model:
            argv += ["-m", inv.model]
        if inv.resume:
            argv += ["--resume", inv.resume]
        return argv + inv.extra_args, {settings_env: str(settings)}

    return command


def _opencode(inv: Invocation) -> tuple[list[str], dict[str, str]]:
    config = inv.config_dir / "opencode.json"
    config.write_text(json.dumps({"mcp": {_SERVER: {"type": "remote", "url": inv.mcp_url, "enabled": True}}}),
                      encoding="utf-8")
    argv = ["run", "--format", "json", "--agent", "build" if inv.mode == "write" else "plan"]
    if inv.model:
        argv += ["--model", inv.model]
    if inv.resume:
        argv += ["--session", inv.resume]
    return argv + inv.extra_args, {"OPENCODE_CONFIG": str(config)}


# -- output -------------------------------------------------------------------------------------------------
def _json_lines(stdout: str) -> Iterator[dict[str, Any]]:
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


def _tokens(raw: dict[str, Any], *, inp: str = "input_tokens", out: str = "output_tokens") -> dict[str, float]:
    return {"input_tokens": float(raw.get(inp) or 0), "output_tokens": float(raw.get(out) or 0)}


def _claude_tokens(raw: dict[str, Any]) -> dict[str, float]:
    """Claude's usage as the executors record it: cache reads apart (its ``input_tokens`` leave them out)."""
    return {**_tokens(raw), "cached_input_tokens": float(raw.get("cache_read_input_tokens") or 0)}


def _codex_tokens(raw: dict[str, Any]) -> dict[str, float]:
    """Codex counts its cache reads inside ``input_tokens``: recorded apart, as the other executors do."""
    cached = float(raw.get("cached_input_tokens") or 0)
    return {"input_tokens": max(0.0, float(raw.get("input_tokens") or 0) - cached),
            "output_tokens": float(raw.get("output_tokens") or 0), "cached_input_tokens": cached}


#: The key of a streamed usage that is the whole call's (a CLI's final result), not one message's.
TOTAL = "*"


def _claude_streamed(event: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    # stream-json: each assistant message carries its usage (repeated per content block, under one message id)
    message = event.get("message")
    if event.get("type") == "assistant" and isinstance(message, dict) and isinstance(message.get("usage"), dict):
        return str(message.get("id") or ""), _claude_tokens(message["usage"])
    if event.get("type") == "result" and isinstance(event.get("usage"), dict):
        return TOTAL, {**_claude_tokens(event["usage"]), "cost_usd": float(event.get("total_cost_usd") or 0)}
    return None


def _codex_streamed(event: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    if event.get("type") == "turn.completed" and isinstance(event.get("usage"), dict):
        return "", _codex_tokens(event["usage"])  # one turn each: summed
    return None


def _gemini_streamed(event: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    if event.get("type") == "result" and isinstance(event.get("stats"), dict):
        return TOTAL, _tokens(event["stats"])
    return None


def _opencode_streamed(event: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    part = event.get("part")
    if event.get("type") == "step_finish" and isinstance(part, dict):
        return (str(part.get("id") or ""), {**_tokens(part.get("tokens") or {}, inp="input", out="output"),
                                             "cost_usd": float(part.get("cost") or 0)})
    return None


class StreamedUsage:
    """What an agent has used so far, from the usage lines it streams while it runs."""

    def __init__(self, read: Callable[[dict[str, Any]], tuple[str, dict[str, float]] | None]) -> None:
        self._read = read
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
        """The call's usage so far: its reported total, else the sum of its messages'."""
        if self._total is not None:
            return dict(self._total)
        summed: dict[str, float] = {}
        for part in self._parts.values():
            for name, value in part.items():
                summed[name] = summed.get(name, 0.0) + value
        return summed


def _parse_claude(stdout: str) -> AgentReport:
    report = AgentReport()
    for event in _json_lines(stdout):
        report.session_id = event.get("session_id") or report.session_id
        if event.get("type") == "result":
            report.text = str(event.get("result") or "")
            report.usage = {**_claude_tokens(event.get("usage") or {}),
                            "cost_usd": float(event.get("total_cost_usd") or 0)}
            if event.get("is_error"):
                report.error = report.text or str(event.get("subtype"))
    return report


def _parse_codex(stdout: str) -> AgentReport:
    report = AgentReport()
    for event in _json_lines(stdout):
        kind = event.get("type")
        if kind == "thread.started":
            report.session_id = event.get("thread_id")
        elif kind == "item.completed" and (event.get("item") or {}).get("type") == "agent_message":
            report.text = str(event["item"].get("text") or "")
        elif kind == "turn.completed":
            report.usage = _codex_tokens(event.get("usage") or {})
        elif kind in ("error", "turn.failed"):
            report.error = str(event.get("message") or (event.get("error") or {}).get("message") or kind)
    return report


def _parse_gemini(stdout: str) -> AgentReport:
    report = AgentReport()
    parts: list[str] = []
    for event in _json_lines(stdout):
        report.session_id = event.get("session_id") or report.session_id
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            parts.append(str(event.get("content") or ""))
        elif kind == "result" or "response" in event:
            stats = event.get("stats") or {}
            report.usage = _tokens(stats)
            if event.get("response"):
                parts = [str(event["response"])]
            if event.get("status") == "error" or event.get("error"):
                error = event.get("error")
                report.error = str(error.get("message") if isinstance(error, dict) else error or "error")
    report.text = "".join(parts)
    return report


def _parse_opencode(stdout: str) -> AgentReport:
    report = AgentReport()
    parts: list[str] = []
    for event in _json_lines(stdout):
        report.session_id = event.get("sessionID") or report.session_id
        part = event.get("part") or {}
        if event.get("type") == "text":
            parts.append(str(part.get("text") or ""))
        elif event.get("type") == "step_finish":
            report.usage = {**_tokens(part.get("tokens") or {}, inp="input", out="output"),
                            "cost_usd": float(part.get("cost") or 0)}
        elif event.get("type") == "error":
            error = event.get("error")
            report.error = str(error.get("message") if isinstance(error, dict) else error or "error")
    report.text = "".join(parts)
    return report


#: The agent CLIs by name.
AGENTS: dict[str, AgentCli] = {
    "claude": AgentCli("claude", "npm install -g @anthropic-ai/claude-code", _claude, _parse_claude,
                       _claude_streamed),
    "codex": AgentCli("codex", "npm install -g @openai/codex", _codex, _parse_codex, _codex_streamed),
    "gemini": AgentCli("gemini", "npm install -g @google/gemini-cli",
                       _gemini_family("GEMINI_CLI_SYSTEM_SETTINGS_PATH"), _parse_gemini, _gemini_streamed),
    "qwen": AgentCli("qwen", "npm install -g @qwen-code/qwen-code",
                     _gemini_family("QWEN_CODE_SYSTEM_SETTINGS_PATH"), _parse_gemini, _gemini_streamed),
    "opencode": AgentCli("opencode", "npm install -g opencode-ai", _opencode, _parse_opencode, _opencode_streamed),
}


# -- watching -----------------------------------------------------------------------------------------------------
def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _usage_note(usage: Any, cost: Any = None) -> str:
    usage = usage if isinstance(usage, dict) else {}
    inp = usage.get("input_tokens", usage.get("input", 0)) or 0
    out = usage.get("output_tokens", usage.get("output", 0)) or 0
    return f"[{inp} in / {out} out" + (f", ${cost}" if cost else "") + "]"


def _blocks(content: Any) -> list[str]:
    """What a message's content blocks say (claude): text, thinking, a tool call, a tool's result."""
    said: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            said.append(_short(block.get("text") or "", 300))
        elif kind == "thinking":
            said.append("(thinking) " + _short(block.get("thinking") or ""))
        elif kind == "tool_use":
            said.append(f"tool {block.get('name')} {_short(block.get('input') or {})}")
        elif kind == "tool_result":
            said.append("tool result: " + _short(block.get("content") or ""))
    return said


def describe_output(line: str) -> str:
    """A line an agent printed, said short for people watching: a stream-JSON event of claude, codex, gemini/qwen
    or opencode as what it is (text, a tool call, a tool's result, a command, usage); any other line as it is."""
    try:
        event = json.loads(line) if line.lstrip().startswith("{") else None
    except json.JSONDecodeError:
        event = None
    if not isinstance(event, dict):
        return line
    kind = str(event.get("type") or "")
    message = event.get("message")
    item = event.get("item") if isinstance(event.get("item"), dict) else event.get("part")
    item = item if isinstance(item, dict) else {}
    said: list[str] = []
    if isinstance(message, dict):  # claude: assistant / user messages
        said = _blocks(message.get("content"))
    elif kind == "result":  # claude's and gemini's end
        said = [f"result: {_short(event.get('result') or event.get('status') or '', 300)} "
                + _usage_note(event.get("usage") or event.get("stats"), event.get("total_cost_usd"))]
    elif kind in ("system", "init", "thread.started"):
        said = [f"session {event.get('session_id') or event.get('thread_id') or ''} started"]
    elif kind.startswith("item."):  # codex
        what = item.get("type")
        if what in ("agent_message", "reasoning"):
            said = [("(thinking) " if what == "reasoning" else "") + _short(item.get("text") or "", 300)]
        elif what == "command_execution":
            done = f" -> exit {item.get('exit_code')}" if item.get("exit_code") is not None else ""
            said = [f"$ {_short(item.get('command') or '')}{done}"]
        elif what:
            said = [f"{what} {_short({k: v for k, v in item.items() if k not in ('id', 'type')})}"]
    elif kind in ("turn.completed", "step_finish"):  # codex, opencode
        said = ["usage " + _usage_note(event.get("usage") or item.get("tokens"), item.get("cost"))]
    elif kind in ("message", "text"):  # gemini, opencode
        said = [_short(event.get("content") or item.get("text") or "", 300)]
    elif kind == "tool_use":  # gemini, opencode
        said = [f"tool {event.get('tool_name') or item.get('tool')} "
                + _short(event.get("parameters") or (item.get("state") or {}).get("input") or {})]
    elif kind == "tool_result":
        said = ["tool result: " + _short(event.get("output") or event.get("status") or "")]
    return " | ".join(part for part in said if part) or _short(line, 300)


# -- the prompt -----------------------------------------------------------------------------------------------
def _task(request: StepRequest) -> str:
    if request.kind == "decide":
        return (f"Decide whether this condition holds: {request.condition}\n"
                "End with decide(value=true|false, reason=...).")
    if request.kind == "generate":
        return (f"Generate the content of the template section '{request.section}'. Submit it with "
                f"write_output(content=..., section='{request.section}', mode='section'), then finish(summary=...).")
    if request.kind == "answer":
        choices = f" Choose one of: {', '.join(request.choices)}." if request.choices else ""
        return (f"Answer as the user would: {request.question}{choices}\n"
                "End with finish(choice=<your answer>, summary=...).")
    outputs = request.hints.get("outputs") or []
    produce = (f"Write the step's output with write_output(content=...); stepline saves it to "
               f"{', '.join(outputs)}. " if request.hints.get("output") else "")
    return f"Do the step's work. {produce}End with finish(summary=<one line on what you did>)."


def build_prompt(request: StepRequest, mode: Mode) -> str:
    """The agent's prompt: this step only (just-in-time), its variables, what to produce and how to report."""
    lines = [
        "You are doing ONE step of a stepline workflow run. stepline owns the order of steps and the run's state:",
        "do only this step, and report through the tools of the `stepline` MCP server.",
        "",
        f"# Step {request.step_id}: {request.title}",
        f"workflow: {request.workflow_id}  run: {request.run_id}  request: {request.kind}  "
        f"attempt: {request.attempt}  mode: {mode}",
    ]
    if request.content.strip():
        lines += ["", "## Instructions", "", request.content.strip()]
    if request.question:
        lines += ["", "## Question", "", request.question]
    if request.telis_context:  # TELIS (R-C1): shards and a language server's answer, resolved for this step
        from stepline.context import render_context

        lines += ["", "## Context (TELIS)", "", render_context(request.telis_context)]
    if request.menu:
        lines += ["", "## Menu (pass the key as finish(choice=...))", ""]
        lines += [f"[{o.key}] {o.label}" + (" (default)" if o.default else "") for o in request.menu]
    shown = {k: v for k, v in request.variables.items() if not k.startswith("cli_session:")}
    if shown:
        lines += ["", "## Variables", ""]
        lines += [f"- {k}: {json.dumps(v, ensure_ascii=False, default=str)[:300]}" for k, v in shown.items()]
    lines += ["", "## What to do", "", _task(request), "", "## How to report back", "",
              "- get_step(): this step's request as JSON.",
              "- read(path): a project file.  ask(question, choices?): ask the user.",
              "- write_output(content, path?, section?, mode?): the step's output (stepline writes and records it;",
              "  do not write the step's output files yourself).",
              "- set_var(name, value): a variable for later steps.  call_tool(name, args): a stepline tool.",
              "- finish(choice?, summary?) — or decide(value, reason) for a decision — exactly once, last."]
    if mode == "analysis":
        lines += ["", "This is analysis mode: do not modify any file; report only through the stepline tools."]
    from stepline.guardrails import redact

    return redact("\n".join(lines) + "\n")


# -- running ----------------------------------------------------------------------------------------------------
def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. A zombie does not count: an orphan that died waits for
    init to reap it, which can take a second, and it holds nothing."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: any member, zombies too
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):  # gone while we looked
            continue
        if group == str(pgid) and state not in ("Z", "X"):
            return True
    return False


async def _stop_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """Stop the agent and everything it started (it runs in its own process group): SIGTERM, then SIGKILL to
    whatever of the group is left after ``grace`` seconds (a child that ignores SIGTERM, or outlived the agent)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = asyncio.get_running_loop().time() + grace
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), timeout=grace)
    while _group_alive(proc.pid) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


@dataclass(slots=True)
class _Ran:
    """How one agent process ended: its exit status, what it printed, whether it was stopped from outside."""

    status: int
    stdout: str
    stderr: str
    stopped: bool


async def _pump(stream: asyncio.StreamReader | None, name: str, into: list[str],
                on_line: Callable[[str, str], None]) -> None:
    """Read ``stream`` to its end, handing each line to ``on_line`` as it arrives (any length)."""
    if stream is None:
        return
    pending = bytearray()
    while chunk := await stream.read(65536):
        searched = len(pending)
        pending += chunk
        end = pending.rfind(b"\n", searched)  # only the new bytes can end a line: a long line is read once
        if end < 0:
            continue
        for raw in bytes(pending[:end]).split(b"\n"):
            into.append(raw.decode("utf-8", "replace"))
            on_line(name, into[-1])
        del pending[:end + 1]
    if pending:
        into.append(pending.decode("utf-8", "replace"))
        on_line(name, into[-1])


async def _run_process(argv: list[str], prompt: str, cwd: Path, env: dict[str, str], *,
                       on_line: Callable[[str, str], None], stop: asyncio.Event, grace: float) -> _Ran:
    """Run the agent with ``prompt`` on stdin, its output lines handed to ``on_line`` as they come. When ``stop``
    is set (a budget crossed), or on cancellation (a timeout, a cancelled step), its process group is stopped."""
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    cwd=cwd, env=env, start_new_session=True)
    except OSError as exc:
        raise ExecutorError(f"cannot start {argv[0]}: {exc}", hint="check the agent CLI's installation") from exc

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # an agent that does not read its stdin
            proc.stdin.write(prompt.encode("utf-8"))
            await proc.stdin.drain()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.close()

    out: list[str] = []
    err: list[str] = []
    reading = asyncio.gather(feed(), _pump(proc.stdout, "out", out, on_line), _pump(proc.stderr, "err", err, on_line))
    exited = asyncio.ensure_future(proc.wait())
    stopping = asyncio.ensure_future(stop.wait())
    stopped = False
    try:
        await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopped = not exited.done()
    finally:
        stopping.cancel()
        await _stop_group(proc, grace)
        # The pipes close once nothing of the group holds them; a daemon that left the group is not waited for.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reading), timeout=2)
        reading.cancel()
        await asyncio.gather(reading, exited, return_exceptions=True)
    return _Ran(proc.returncode or 0, "\n".join(out), "\n".join(err), stopped)


class _OutputLog:
    """The step's agent-output log: each line the agent prints, appended as it comes (a log, not state)."""

    def __init__(self, path: Path | None, label: str) -> None:
        self.label = label
        self.fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(self, stream: str, text: str) -> None:
        """Append one line (secrets redacted), stamped; one write, so parallel calls' lines do not mix."""
        if self.fd is None:
            return
        from stepline.guardrails import redact
        from stepline.time import now_iso

        data = f"{now_iso()} {self.label} {stream}| {redact(text.rstrip())}\n".encode("utf-8", "replace")
        try:
            os.write(self.fd, data)
        except OSError:  # a full disk: the journal (the truth) says so; watching stops, the call goes on
            self.close()

    def close(self) -> None:
        """Stop logging."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> _OutputLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tail(text: str, limit: int = 400) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


class CliAgentExecutor(Executor):
    """Runs a coding-agent CLI per request; the agent reports through stepline's MCP server."""

    name = "cli-agent"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})
        agent = str(self.options.get("agent") or "claude")
        if agent not in AGENTS:
            raise UsageError(f"unknown agent CLI {agent!r}", hint="use one of " + ", ".join(AGENTS))
        self.cli = AGENTS[agent]
        self._meters: dict[str, SharedMeter] = {}  # live budget pools (parallel calls sharing what is left)

    def _executable(self) -> str:
        wanted = str(self.options.get("command") or self.cli.name)
        found = shutil.which(wanted)
        if found is None:
            raise ExecutorError(f"the {self.cli.name} CLI ({wanted!r}) is not on PATH",
                                hint=f"install it: {self.cli.install}")
        return found

    def _mode(self, request: StepRequest) -> Mode:
        mode = request.hints.get("cli_mode") or self.options.get("mode")
        if mode is None:
            return "write" if request.kind in ("work", "generate") else "analysis"
        if mode not in ("analysis", "write"):
            raise UsageError(f"cli-agent mode {mode!r} is not analysis or write")
        return "write" if mode == "write" else "analysis"

    def _cwd(self, request: StepRequest) -> Path:
        base = (self.options.get("cd") or request.context.get("project_root") or request.variables.get("project-root")
                or os.getcwd())
        cwd = Path(str(base)) / str(request.hints.get("cd") or ".")
        if not cwd.is_dir():
            raise ExecutorError(f"the agent's working folder {cwd} does not exist", hint="check the cd option")
        return cwd.resolve()

    def _execution(self, request: StepRequest) -> tuple[str | None, str | None, bool]:
        """(id to record this conversation under, native session id to continue, whether to fork it)."""
        hinted = request.hints.get("cli_execution")
        if isinstance(hinted, dict):  # a CCW task's cli_execution block, per step
            merge_from = hinted.get("merge_from") or [None]
            spec = {"execution_id": hinted.get("id"), "resume_from": hinted.get("resume_from") or merge_from[0],
                    "strategy": hinted.get("strategy")}
        else:
            spec = {k: self.options.get(k) for k in ("execution_id", "resume_from", "strategy")}
        parent = spec.get("resume_from")
        strategy = spec.get("strategy") or ("resume" if parent else "new")
        record_as = spec.get("execution_id") or (parent if strategy == "resume" else None)
        if not parent or strategy == "new":
            return record_as, None, False
        known = request.variables.get(f"cli_session:{parent}")
        if not isinstance(known, dict) or not known.get("session_id"):
            raise ExecutorError(f"no {self.cli.name} session is recorded for execution id {parent!r}",
                                hint="the step that starts it must run first with that execution_id")
        if known.get("agent") != self.cli.name:
            raise ExecutorError(f"execution {parent!r} was a {known.get('agent')} session, not {self.cli.name}")
        return record_as, str(known["session_id"]), strategy in ("fork", "merge_fork")

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Run the agent once for ``request`` (or replay its journaled run) and end the request as it did."""
        from stepline.executors._mcp_bridge import replay_calls

        executable = self._executable()
        mode = self._mode(request)
        cwd = self._cwd(request)
        record_as, resume, fork = self._execution(request)
        prompt = build_prompt(request, mode)
        live = False

        async def compute() -> dict[str, Any]:
            nonlocal live
            live = True
            return await self._run(executable, request, session, prompt,
                                   mode=mode, cwd=cwd, resume=resume, fork=fork)

        payload = {"agent": self.cli.name, "mode": mode, "cwd": str(cwd), "resume": resume, "fork": fork,
                   "prompt_sha256": hashlib.sha256(prompt.encode("utf-8")).hexdigest()}
        record = await session.memo(f"cli-agent:{self.cli.name}", payload, compute)
        if not live:
            await replay_calls(session, record["calls"])
        if record.get("stopped"):  # journaled as stopped, with what it had used: raised again on replay
            raise BudgetExceeded(f"{self.cli.name} was stopped in step {request.step_id!r}: {record['stopped']}",
                                 usage=record.get("usage") or {})
        if record_as and record.get("session_id"):
            await session.set_var(f"cli_session:{record_as}",
                                  {"agent": self.cli.name, "session_id": record["session_id"]})
        final = record["final"]
        if final["method"] == "decide":
            await session.decide(bool(final["args"]["value"]), str(final["args"].get("reason") or ""))
        else:
            await session.finish(final["args"].get("choice"), final["args"].get("summary"))

    async def _run(self, executable: str, request: StepRequest, session: StepSession, prompt: str, *,
                   mode: Mode, cwd: Path, resume: str | None, fork: bool) -> dict[str, Any]:
        """One agent run with a per-request MCP server; returns what the memo journals."""
        from mcp.server.mcpserver import MCPServer

        from stepline.executors._mcp_bridge import StepBridge, add_step_tools, serve_http, step_payload

        bridge = StepBridge(hold_final=True)
        server: MCPServer[Any] = MCPServer(_SERVER, log_level="WARNING",
                                           instructions=f"stepline step {request.step_id} of run {request.run_id}")
        add_step_tools(server, bridge)

        @server.tool()
        async def get_step() -> dict[str, Any]:
            """This step's request (the same step your prompt describes; never a later one)."""
            return step_payload(request)

        timeout = self.options.get("timeout_seconds")
        grace = float(self.options.get("exit_grace_seconds", 30))
        streamed = StreamedUsage(self.cli.streamed_usage)
        label = f"{self.cli.name}#{request.hints.get('invocation', 0)}"
        with (tempfile.TemporaryDirectory(prefix="stepline-agent-") as tmp, self._metered(request) as meter,
              _OutputLog(session.output_log(), label) as log):
            call = id(streamed)
            if meter is not None and meter.reason is not None:  # spent before it starts (or by its pool): not run
                log.line("---", f"not started: {meter.reason}")
                return {"final": None, "calls": [], "session_id": None, "text": "", "usage": {}, "exit_status": None,
                        "stopped": meter.reason}

            def on_line(stream: str, text: str) -> None:
                log.line(stream, text)
                if stream == "out" and streamed.feed(text) and meter is not None:
                    meter.report(call, streamed.usage)

            async with serve_http(server) as url:
                inv = Invocation(mode=mode, cwd=cwd, mcp_url=url, config_dir=Path(tmp),
                                 include_dirs=[str(d) for d in self.options.get("include_dirs") or []]
                                 + [str(d) for d in request.hints.get("include_dirs") or []],
                                 model=self.options.get("model"), resume=resume, fork=fork,
                                 extra_args=[str(a) for a in self.options.get("extra_args") or []])
                args, extra_env = self.cli.command(inv)
                env = {**os.environ, **extra_env, "STEPLINE_MCP_URL": url,
                       "STEPLINE_MCP_CONFIG": str(_mcp_json(inv))}
                log.line("---", f"started {executable} ({mode} mode) in {cwd}")
                serving = asyncio.ensure_future(bridge.serve(request, session))
                running = asyncio.ensure_future(_run_process(
                    [executable, *args], prompt, cwd, env, on_line=on_line,
                    stop=meter.crossed if meter is not None else asyncio.Event(),
                    grace=float(self.options.get("stop_grace_seconds", 3))))
                try:
                    async with asyncio.timeout(float(timeout) if timeout else None):
                        await asyncio.wait({serving, running}, return_when=asyncio.FIRST_COMPLETED)
                        if serving.done():
                            serving.result()  # an error that ended the step (a blocked gate, a failed tool)
                        if running.done():
                            running.result()  # the agent could not be started
                    if not running.done():  # it called finish: let it print its result and exit
                        await asyncio.wait({running}, timeout=grace)
                except TimeoutError:
                    log.line("---", f"stopped: it ran past {timeout}s")
                    raise ExecutorError(f"{self.cli.name} did not finish step {request.step_id!r} within "
                                        f"{timeout}s; it was stopped", retryable=True) from None
                finally:
                    for task in (serving, running):
                        task.cancel()
                    await asyncio.gather(serving, running, return_exceptions=True)
                ran = _Ran(-1, "", "", False) if running.cancelled() else running.result()
                stopped = meter.reason if meter is not None and ran.stopped and bridge.final is None else None
                log.line("---", f"stopped for its budget: {stopped}" if stopped else f"exited {ran.status}")
        report = self.cli.parse(ran.stdout)
        usage = streamed.usage or report.usage
        if stopped is not None:  # no final text: what it was saying last, said short
            said = report.text or " | ".join(describe_output(line) for line in ran.stdout.splitlines()[-3:])
            return {"final": None, "calls": bridge.calls, "session_id": report.session_id,
                    "text": _tail(said, 2000), "usage": usage, "exit_status": ran.status, "stopped": stopped}
        if bridge.final is None:
            detail = report.error or _tail(ran.stderr) or _tail(report.text) or f"exit status {ran.status}"
            raise ExecutorError(f"{self.cli.name} exited without calling finish for step {request.step_id!r}: "
                                f"{detail}", retryable=True)
        return {"final": bridge.final, "calls": bridge.calls, "session_id": report.session_id,
                "text": _tail(report.text, 2000), "usage": usage, "exit_status": ran.status}

    def _budget(self, request: StepRequest) -> CallBudget | None:
        """The request's budget (a caller's, in its hints), else the per-call limits of this executor's options."""
        budget = CallBudget.from_hints(request.hints)
        if budget is None and (self.options.get("max_call_tokens") or self.options.get("max_call_cost_usd")):
            tokens, cost = self.options.get("max_call_tokens"), self.options.get("max_call_cost_usd")
            budget = CallBudget(tokens=float(tokens) if tokens else None, cost_usd=float(cost) if cost else None,
                                what=f"the {self.cli.name} call's limit")
        return budget

    @contextlib.contextmanager
    def _metered(self, request: StepRequest) -> Iterator[SharedMeter | None]:
        """The meter this call reports its streamed usage to: its pool's, shared by the pool's live calls."""
        budget = self._budget(request)
        if budget is None:
            yield None
            return
        meter = self._meters.get(budget.pool) if budget.pool else None
        if meter is None:
            meter = SharedMeter(budget)
            if budget.pool:
                self._meters[budget.pool] = meter
        meter.users += 1
        try:
            yield meter
        finally:
            meter.users -= 1
            if budget.pool and meter.users == 0:
                self._meters.pop(budget.pool, None)
