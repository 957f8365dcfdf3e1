"""The ``cli-agent`` executor: a coding-agent CLI (claude, codex, gemini, qwen, opencode) does the step.

Each request runs the agent once, with the command shapes CCW uses: analysis mode is read-only, write mode lets
the agent edit files; ``cd`` is its working folder; include dirs widen what it may read; an execution id names
the agent's conversation so a later step can resume it or fork it (CCW's ``--id`` / ``--resume``). The prompt
— the current step only, its variables, what to produce and how to report back, with the tools' names as that CLI
shows them — goes on stdin. The agent reports through stepline's MCP server, served on a free 127.0.0.1 port for
this one request (the ``mcp-bridge`` machinery), so every ``write_output``/``finish`` it makes is checked and
journaled like any other executor's. Its stdout (JSON / stream-JSON) gives the session id, the final text and
token usage. How each CLI is called and how its usage reads: one module per agent in this package. A CLI that reports
a session's running total (codex, qwen) has that total recorded with the session, so a call resuming or forking it
records and meters only what it used itself; one that writes each model response's usage only to its session's
file (codex, gemini) has that file followed while it runs.

How the agent is supervised, replayed on resume and stopped (budget, timeout, stall), and the executor's
options: :class:`CliAgentExecutor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stepline.errors import AgentCrashed, AgentStalled, BudgetExceeded, ExecutorError, UsageError
from stepline.executors._base import Executor
from stepline.executors._budget import CallBudget, Meters
from stepline.executors._protocol import StepRequest, StepSession
from stepline.executors._usage import Usage
from stepline.executors.cli_agents._classify import classify
from stepline.executors.cli_agents._process import (
    FileTail,
    OutputLog,
    Ran,
    private_prefix,
    run_process,
    stop_left_over,
)
from stepline.executors.cli_agents._prompt import build_prompt, describe_output
from stepline.executors.cli_agents._spec import (
    SERVER,
    TOKEN_ENV,
    AgentCli,
    Invocation,
    Mode,
    StreamedUsage,
    mcp_config_file,
)
from stepline.executors.cli_agents.claude import CLAUDE
from stepline.executors.cli_agents.codex import CODEX
from stepline.executors.cli_agents.gemini import GEMINI
from stepline.executors.cli_agents.opencode import OPENCODE
from stepline.executors.cli_agents.qwen import QWEN

__all__ = ["AGENTS", "CliAgentExecutor"]

#: The agent CLIs by name.
AGENTS: dict[str, AgentCli] = {cli.name: cli for cli in (CLAUDE, CODEX, GEMINI, QWEN, OPENCODE)}

#: The default ``stall_seconds``: long enough for a model to think, short enough not to burn a night.
STALL_SECONDS = 600.0

#: How often a CLI's session file is read for the usage it adds (a read of what it appended, if anything).
FOLLOW_SECONDS = 0.5


def _tail(text: str, limit: int = 400) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


class CliAgentExecutor(Executor):
    """Runs a coding-agent CLI per request; the agent reports through stepline's MCP server.

    The agent runs under a supervisor (:mod:`stepline.executors.cli_agents._process`): it dies with the driver that
    started it, however that ends, and it is journaled (pid, start time, process group) before it starts, so a resumed
    step first stops an agent a dead driver left. While it runs, each line it prints is appended to the step's output
    log in the run's folder (:meth:`StepSession.output_log`, followed by ``stepline logs RUN -f``), and the usage it
    streams is measured against the call's budget — the caller's (``hints["budget"]``, see
    :mod:`stepline.executors._budget`) or ``max_call_tokens`` / ``max_call_cost_usd``. Past it, the agent's process
    group is stopped (SIGTERM, SIGKILL after ``stop_grace_seconds``), the call is journaled as stopped with what it had
    used, and :class:`~stepline.errors.BudgetExceeded` is raised; a call stopped at its ``timeout_seconds`` or ended
    without finishing has what it used journaled (:meth:`StepSession.record_usage`), then raised. An agent that prints
    nothing and changes no file in its folder for ``stall_seconds`` is stopped too
    (:class:`~stepline.errors.AgentStalled`); one that ends at a permission or login prompt, a rate limit or quota, or
    an unreachable endpoint raises the matching :class:`~stepline.errors.AgentEnvironmentError` (its ``kind`` in the
    message), not a plain failure of the work.

    The whole agent run is one :meth:`StepSession.memo`: a resumed step replays the agent's journaled calls instead of
    running it again. An agent interrupted halfway is run again from the start, and its calls must then match the ones
    journaled before the interruption.

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
        stall_seconds: stop an agent that prints no line and changes no file for this long (default 600; 0: never).
        exit_grace_seconds: how long the agent may run on after ``finish`` before it is killed (default 30).
        extra_args: more arguments for the CLI.
        max_call_tokens / max_call_cost_usd: stop a call whose streamed usage goes past this (no caller's budget).
        stop_grace_seconds: how long a stopped agent's group has between SIGTERM and SIGKILL (default 3).
    """

    name = "cli-agent"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})
        agent = str(self.options.get("agent") or "claude")
        if agent not in AGENTS:
            raise UsageError(f"unknown agent CLI {agent!r}", hint="use one of " + ", ".join(AGENTS))
        self.cli = AGENTS[agent]
        self._meters = Meters()  # live budget pools (parallel calls sharing what is left)

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

    def _execution(self, request: StepRequest) -> tuple[str | None, str | None, bool, Usage]:
        """(id to record this conversation under, native session id to continue, whether to fork it, the session's
        recorded running usage, for a CLI that reports a continued session's running total)."""
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
            return record_as, None, False, Usage()
        known = request.variables.get(f"cli_session:{parent}")
        if not isinstance(known, dict) or not known.get("session_id"):
            raise ExecutorError(f"no {self.cli.name} session is recorded for execution id {parent!r}",
                                hint="the step that starts it must run first with that execution_id")
        if known.get("agent") != self.cli.name:
            raise ExecutorError(f"execution {parent!r} was a {known.get('agent')} session, not {self.cli.name}")
        before = Usage.from_record(known["usage"]) if isinstance(known.get("usage"), dict) else Usage()
        return record_as, str(known["session_id"]), strategy in ("fork", "merge_fork"), before

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Run the agent once for ``request`` (or replay its journaled run) and end the request as it did."""
        from stepline.executors._mcp_bridge import replay_calls

        executable = self._executable()
        mode = self._mode(request)
        cwd = self._cwd(request)
        record_as, resume, fork, before = self._execution(request)
        prompt = build_prompt(request, mode, self.cli)
        live = False

        async def compute() -> dict[str, Any]:
            nonlocal live
            live = True
            return await self._run(executable, request, session, prompt,
                                   mode=mode, cwd=cwd, resume=resume, fork=fork, before=before)

        payload = {"agent": self.cli.name, "mode": mode, "cwd": str(cwd), "resume": resume, "fork": fork,
                   "prompt_sha256": hashlib.sha256(prompt.encode("utf-8")).hexdigest()}
        record = await session.memo(f"cli-agent:{self.cli.name}", payload, compute)
        if not live:
            await replay_calls(session, record["calls"])
        if record.get("stopped"):  # journaled as stopped, with what it had used: raised again on replay
            raise BudgetExceeded(f"{self.cli.name} was stopped in step {request.step_id!r}: {record['stopped']}",
                                 usage=record.get("usage") or {})
        if record_as and record.get("session_id"):
            known: dict[str, Any] = {"agent": self.cli.name, "session_id": record["session_id"]}
            if record.get("session_usage"):  # what the next call on this session takes off its reports
                known["usage"] = record["session_usage"]
            await session.set_var(f"cli_session:{record_as}", known)
        final = record["final"]
        if final["method"] == "decide":
            await session.decide(bool(final["args"]["value"]), str(final["args"].get("reason") or ""))
        else:
            await session.finish(final["args"].get("choice"), final["args"].get("summary"))

    async def _run(self, executable: str, request: StepRequest, session: StepSession, prompt: str, *,
                   mode: Mode, cwd: Path, resume: str | None, fork: bool, before: Usage) -> dict[str, Any]:
        """One agent run with a per-request MCP server; returns what the memo journals: the usage is the call's
        own (``before``, the session's running total when it started, taken off a total of the session)."""
        from mcp.server.mcpserver import MCPServer

        from stepline.executors._mcp_bridge import StepBridge, add_step_tools, serve_http, step_payload

        bridge = StepBridge(hold_final=True)
        server: MCPServer[Any] = MCPServer(SERVER, log_level="WARNING",
                                           instructions=f"stepline step {request.step_id} of run {request.run_id}")
        add_step_tools(server, bridge)

        reached: list[bool] = []  # whether the agent asked for its step: it started

        @server.tool()
        async def get_step() -> dict[str, Any]:
            """This step's request (the same step your prompt describes; never a later one)."""
            reached.append(True)
            return step_payload(request)

        timeout = self.options.get("timeout_seconds")
        grace = float(self.options.get("exit_grace_seconds", 30))
        stop_grace = float(self.options.get("stop_grace_seconds", 3))
        stall = float(self.options.get("stall_seconds", STALL_SECONDS) or 0) or None
        streamed = StreamedUsage(self.cli.streamed_usage, before)
        model = self.options.get("model")
        label = f"{self._who}#{request.hints.get('invocation', 0)}"
        session_id: str | None = None
        # A private folder (0700) for what a CLI reads only from files; removed with the run.
        with (tempfile.TemporaryDirectory(prefix=private_prefix(request.run_id, request.step_id)) as tmp,
              self._meters.join(self._budget(request)) as meter, OutputLog(session.output_log(), label) as log):
            call = object()  # its key in the meters: an id() could be a finished call's again
            if meter is not None and meter.reason is not None:  # spent before it starts (or by its pool): not run
                log.line("---", f"not started: {meter.reason}")
                return {"final": None, "calls": [], "session_id": None, "text": "", "usage": {}, "exit_status": None,
                        "stopped": meter.reason}

            def used(line: str) -> None:
                if streamed.feed(line) and meter is not None:
                    meter.report(call, streamed.usage, streamed.model or model)

            def on_line(stream: str, text: str) -> None:
                nonlocal session_id
                log.line(stream, text)
                if stream == "out":
                    session_id = session_id or _session_id(text)
                    used(text)

            async def journal(process: dict[str, Any]) -> None:
                left = await session.agent_process({**process, "agent": self.cli.name, "tmp": tmp})
                if left is not None and (done := await stop_left_over(left, stop_grace)):
                    log.line("---", done)

            token = secrets.token_urlsafe(32)  # this step's: its MCP server answers its agent only
            async with serve_http(server, token=token) as url:
                inv = Invocation(mode=mode, cwd=cwd, mcp_url=url, mcp_token=token, config_dir=Path(tmp),
                                 include_dirs=[str(d) for d in self.options.get("include_dirs") or []]
                                 + [str(d) for d in request.hints.get("include_dirs") or []],
                                 model=self.options.get("model"), resume=resume, fork=fork,
                                 extra_args=[str(a) for a in self.options.get("extra_args") or []])
                args, extra_env = self.cli.command(inv)
                # for a custom agent (the ``command`` option): docs/guides/sprint.md
                config = mcp_config_file(inv, "mcp.json", {"type": "http", "url": url, "headers": inv.mcp_headers()})
                env = {**os.environ, **extra_env, "STEPLINE_MCP_URL": url, "STEPLINE_MCP_CONFIG": str(config),
                       TOKEN_ENV: token}
                log.line("---", f"started {executable} ({mode} mode) in {cwd}")
                tail = FileTail(_since(datetime.now(UTC), used))  # the CLI's own wall-clock stamps, compared
                serving = asyncio.ensure_future(bridge.serve(request, session))
                running = asyncio.ensure_future(run_process(
                    [executable, *args], prompt, cwd, env, on_line=on_line, journal=journal,
                    budget=meter.crossed if meter is not None else asyncio.Event(), grace=stop_grace, stall=stall))
                following = asyncio.ensure_future(self._follow(tail, env, lambda: session_id))
                timed_out = False
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
                    timed_out = True
                finally:
                    for task in (serving, running, following):
                        task.cancel()
                    await asyncio.gather(serving, running, following, return_exceptions=True)
                    with contextlib.suppress(OSError):  # what it wrote to its session's file up to the end
                        tail.read(self._session_file(env, session_id))
                ran = Ran(-1, "", "", None) if running.cancelled() or running.exception() else running.result()
                # Past its budget without finishing: stopped for it (a CLI that reports usage only as it ends, too).
                stopped = meter.reason if meter is not None and bridge.final is None and not timed_out else None
                if not timed_out:
                    log.line("---", f"stopped for its budget: {stopped}" if stopped
                             else f"stopped: no output and no file change for {stall:g}s" if ran.stopped == "stall"
                             else f"exited {ran.status}")
        report = self.cli.parse(ran.stdout)
        usage = {**streamed.usage.to_record(), **({"model": m} if (m := streamed.model or model) else {})}
        record: dict[str, Any] = {"final": bridge.final, "calls": bridge.calls, "session_id": report.session_id,
                                  "text": _tail(report.text, 2000), "usage": usage, "exit_status": ran.status}
        if streamed.session is not None:
            record["session_usage"] = streamed.session.to_record()
        if stopped is not None:  # no final text: what it was saying last, said short
            said = report.text or " | ".join(describe_output(line) for line in ran.stdout.splitlines()[-3:])
            return {**record, "final": None, "text": _tail(said, 2000), "stopped": stopped}
        if timed_out or bridge.final is None:  # no result to journal: what it used is, then the failure is raised
            await session.record_usage(f"cli-agent:{self.cli.name}", usage)
            if timed_out:
                raise ExecutorError(f"{self._who} did not finish step {request.step_id!r} within {timeout}s; it "
                                    "was stopped", retryable=True)
            raise self._failure(request, ran, report.error, report.text, stall, reached=bool(reached or bridge.calls))
        return record

    def _session_file(self, env: Mapping[str, str], session_id: str | None) -> Path | None:
        if self.cli.session_file is None or session_id is None:
            return None
        return self.cli.session_file(env, session_id)

    async def _follow(self, tail: FileTail, env: Mapping[str, str], session_id: Any) -> None:
        """Read what the CLI appends to its session's file while it runs (once its session id is known)."""
        if self.cli.session_file is None:
            return
        path: Path | None = None
        while True:
            await asyncio.sleep(FOLLOW_SECONDS)
            path = path or await asyncio.to_thread(self._session_file, env, session_id())
            if path is not None:
                with contextlib.suppress(OSError):
                    tail.read(path)

    @property
    def _who(self) -> str:
        """How logs and messages name the agent: the configured command's name, else the CLI's."""
        command = self.options.get("command")
        return Path(str(command)).name if command else self.cli.name

    def _failure(self, request: StepRequest, ran: Ran, error: str | None, text: str,
                 stall: float | None, *, reached: bool) -> ExecutorError:
        """Why the agent ended without finishing: a stall, a reason outside the work (its kind named), a crash at
        start (it exited with an error before it printed a line or reached stepline), or the work's own failure
        (retryable, with what it said)."""
        last = "\n".join(line for line in ran.stdout.splitlines()[-5:] if line.strip())
        # The error it reported says why; without one, what it said last (a CLI's stderr logs warnings too).
        said = error or "\n".join(part for part in (ran.stderr[-4000:], last) if part)
        detail = error or _tail(ran.stderr) or _tail(text) or f"exit status {ran.status}"
        where, who = f"step {request.step_id!r}", self._who
        found = classify(self.cli, said)
        if ran.stopped == "stall" and found is None:
            return AgentStalled(f"{who} stalled in {where} [{AgentStalled.kind}]: no output and no file "
                                f"change for {stall:g}s; it was stopped (last said: {_tail(said, 200) or 'nothing'})",
                                hint="raise the executor's stall_seconds if it needs longer to think")
        if found is None and not reached and ran.status != 0 and not ran.stdout.strip():
            return AgentCrashed(f"{who} crashed at start in {where} [{AgentCrashed.kind}]: it exited {ran.status} "
                                f"before it reached stepline: {_tail(ran.stderr) or 'it said nothing'}",
                                hint=f"start `{self.options.get('command') or self.cli.name}` by hand in the project "
                                     "to see why")
        if found is None:
            return ExecutorError(f"{who} exited without calling finish for {where}: {detail}", retryable=True)
        cls, fix = found
        what = {"permission": "stopped at a permission or login prompt", "rate-limit": "hit a rate limit or quota",
                "connection": "could not reach its model"}[cls.kind]
        if ran.stopped == "stall":
            what += f" (it was stopped at its stall limit, {stall:g}s)"
        line = _tail(" ".join(said.split()), 300)
        return cls(f"{who} {what} in {where} [{cls.kind}]: {line}",
                   hint=fix or (f"the {self.cli.name} CLI cannot go on unattended as it is set up"
                                if cls.kind == "permission" else None))

    def _budget(self, request: StepRequest) -> CallBudget | None:
        """The request's budget (a caller's, in its hints), else the per-call limits of this executor's options."""
        budget = CallBudget.from_hints(request.hints)
        if budget is None and (self.options.get("max_call_tokens") or self.options.get("max_call_cost_usd")):
            tokens, cost = self.options.get("max_call_tokens"), self.options.get("max_call_cost_usd")
            budget = CallBudget(tokens=float(tokens) if tokens else None, cost_usd=float(cost) if cost else None,
                                what=f"the {self.cli.name} call's limit")
        return budget


def _session_id(line: str) -> str | None:
    """The session id a line of a CLI's stream names (``session_id``, codex's ``thread_id``, ``sessionID``)."""
    if '"session' not in line and '"thread_id"' not in line:
        return None
    with contextlib.suppress(ValueError):
        event = json.loads(line)
        if isinstance(event, dict):
            found = event.get("session_id") or event.get("thread_id") or event.get("sessionID")
            return str(found) if found else None
    return None


def _since(started: datetime, feed: Any) -> Any:
    """``feed`` for the lines of a session's file stamped at or after ``started``: a resumed or forked session's
    file holds the earlier calls' responses too."""
    def fed(line: str) -> None:
        with contextlib.suppress(ValueError, TypeError):
            event = json.loads(line)
            stamp = event.get("timestamp") if isinstance(event, dict) else None
            if isinstance(stamp, str) and datetime.fromisoformat(stamp) < started:
                return
        feed(line)
    return fed
