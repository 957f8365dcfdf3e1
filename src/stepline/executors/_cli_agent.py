"""The ``cli-agent`` executor: a coding-agent CLI (claude, codex, gemini, qwen, opencode) does the step.

Each request runs the agent once, with the command shapes CCW uses: analysis mode is read-only, write mode lets
the agent edit files; ``cd`` is its working folder; include dirs widen what it may read; an execution id names
the agent's conversation so a later step can resume it or fork it (CCW's ``--id`` / ``--resume``). The prompt
— the current step only, its variables, what to produce and how to report back — goes on stdin. The agent
reports through stepline's MCP server, served on a free 127.0.0.1 port for this one request (the
``mcp-bridge`` machinery), so every ``write_output``/``finish`` it makes is checked and journaled like any
other executor's. Its stdout (JSON / stream-JSON) gives the session id, the final text and token usage.

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

from stepline.errors import ExecutorError, UsageError
from stepline.executors._base import Executor
from stepline.executors._protocol import StepRequest, StepSession

__all__ = ["AGENTS", "AgentCli", "AgentReport", "CliAgentExecutor", "Invocation", "build_prompt"]

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


def _parse_claude(stdout: str) -> AgentReport:
    report = AgentReport()
    for event in _json_lines(stdout):
        report.session_id = event.get("session_id") or report.session_id
        if event.get("type") == "result":
            report.text = str(event.get("result") or "")
            report.usage = {**_tokens(event.get("usage") or {}), "cost_usd": float(event.get("total_cost_usd") or 0)}
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
            report.usage = _tokens(event.get("usage") or {})
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
    "claude": AgentCli("claude", "npm install -g @anthropic-ai/claude-code", _claude, _parse_claude),
    "codex": AgentCli("codex", "npm install -g @openai/codex", _codex, _parse_codex),
    "gemini": AgentCli("gemini", "npm install -g @google/gemini-cli",
                       _gemini_family("GEMINI_CLI_SYSTEM_SETTINGS_PATH"), _parse_gemini),
    "qwen": AgentCli("qwen", "npm install -g @qwen-code/qwen-code",
                     _gemini_family("QWEN_CODE_SYSTEM_SETTINGS_PATH"), _parse_gemini),
    "opencode": AgentCli("opencode", "npm install -g opencode-ai", _opencode, _parse_opencode),
}


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
async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """Stop the agent and everything it started (it runs in its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    if proc.returncode is None:
        try:
            await asyncio.wait_for(proc.wait(), timeout=3)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def _run_process(argv: list[str], prompt: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Run the agent with ``prompt`` on stdin; on cancellation (a timeout, a cancelled step) kill its group."""
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    cwd=cwd, env=env, start_new_session=True)
    except OSError as exc:
        raise ExecutorError(f"cannot start {argv[0]}: {exc}", hint="check the agent CLI's installation") from exc
    try:
        out, err = await proc.communicate(prompt.encode("utf-8"))
    finally:
        await _kill_group(proc)
    return proc.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


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
        with tempfile.TemporaryDirectory(prefix="stepline-agent-") as tmp:
            async with serve_http(server) as url:
                inv = Invocation(mode=mode, cwd=cwd, mcp_url=url, config_dir=Path(tmp),
                                 include_dirs=[str(d) for d in self.options.get("include_dirs") or []]
                                 + [str(d) for d in request.hints.get("include_dirs") or []],
                                 model=self.options.get("model"), resume=resume, fork=fork,
                                 extra_args=[str(a) for a in self.options.get("extra_args") or []])
                args, extra_env = self.cli.command(inv)
                env = {**os.environ, **extra_env, "STEPLINE_MCP_URL": url,
                       "STEPLINE_MCP_CONFIG": str(_mcp_json(inv))}
                serving = asyncio.ensure_future(bridge.serve(request, session))
                running = asyncio.ensure_future(_run_process([executable, *args], prompt, cwd, env))
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
                    raise ExecutorError(f"{self.cli.name} did not finish step {request.step_id!r} within "
                                        f"{timeout}s; it was stopped", retryable=True) from None
                finally:
                    for task in (serving, running):
                        task.cancel()
                    await asyncio.gather(serving, running, return_exceptions=True)
        status, stdout, stderr = (-1, "", "") if running.cancelled() else running.result()
        report = self.cli.parse(stdout)
        if bridge.final is None:
            detail = report.error or _tail(stderr) or _tail(report.text) or f"exit status {status}"
            raise ExecutorError(f"{self.cli.name} exited without calling finish for step {request.step_id!r}: "
                                f"{detail}", retryable=True)
        return {"final": bridge.final, "calls": bridge.calls, "session_id": report.session_id,
                "text": _tail(report.text, 2000), "usage": report.usage, "exit_status": status}
