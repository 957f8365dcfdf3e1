"""The tool pipeline (R-T1): resolve → allow/blocklist → args → code confined → risk gate → run (timeout) → retry
→ result.

The pipeline decides and runs; it does not persist. The engine journals what :paramref:`on_event` reports and
appends the returned :class:`~stepline.model.ToolResult` to ``tool_results.json`` (see
:func:`dump_tool_results`). A call refused at any stage never runs (neither its handler nor its command).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from stepline.errors import ToolError
from stepline.model import Risk, ToolResult
from stepline.time import isoformat, now
from stepline.tools._command import run_command
from stepline.tools._policy import ToolPolicy
from stepline.tools._spec import (
    RISK_ORDER,
    RunOutcome,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolSpec,
    tool_gate_id,
)
from stepline.tools._worker import run_in_worker

__all__ = [
    "ApprovalLookup",
    "EventCallback",
    "ToolCallLike",
    "ToolPipeline",
    "dump_tool_results",
    "load_tool_results",
]

ApprovalLookup = Callable[[str], Literal["approved", "rejected", "pending"]]
"""Answers "what did a person decide on this gate id?" — the engine reads its approvals."""

EventCallback = Callable[[str, dict[str, Any]], None]
"""Receives ``(event name, data)`` for ToolStarted, ToolCompleted, ToolFailed and ToolApprovalRequired."""


class ToolCallLike(Protocol):
    """A call to make: :class:`stepline.model.ToolCall` or anything with the same four attributes."""

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> Mapping[str, Any]: ...

    @property
    def required(self) -> bool: ...

    @property
    def risk(self) -> Risk | None: ...


def _ignore_event(name: str, data: dict[str, Any]) -> None:
    """Default event sink: the caller did not ask to hear about events."""


def _nothing_approved(gate_id: str) -> Literal["pending"]:
    """Default approval lookup: no person has decided anything."""
    return "pending"


@dataclass(slots=True)
class _Call:
    """One call going through the stages, with what each stage learned."""

    name: str
    args: dict[str, Any]
    step_id: str
    project_root: Path
    started_at: str
    started: float
    on_event: EventCallback
    risk: Risk = "low"

    def event(self, kind: str, **data: Any) -> None:
        self.on_event(kind, {"tool": self.name, "step_id": self.step_id, "risk": self.risk, **data})

    def result(self, status: Literal["ok", "error", "refused", "timeout", "blocked"], *,
               error: str | None = None, **fields: Any) -> ToolResult:
        return ToolResult(name=self.name, status=status, risk=self.risk, started_at=self.started_at,
                          ended_at=isoformat(now()),
                          duration_ms=round((time.monotonic() - self.started) * 1000, 3),
                          error=error, step_id=self.step_id, args=self.args, **fields)

    def refuse(self, reason: str) -> ToolResult:
        self.event("ToolFailed", status="refused", error=reason, attempt=0, will_retry=False)
        return self.result("refused", error=reason)


class ToolPipeline:
    """Runs tool calls through the policy's stages and returns a :class:`~stepline.model.ToolResult`.

    The pipeline is asynchronous: the engine awaits :meth:`arun`, and a command tool's program is awaited in
    the engine's loop (no thread, no polling). :meth:`run` is the same for synchronous callers.

    Args:
        registry: the tools that exist.
        policy: what may run and how; the defaults when omitted.
        sleep: how to wait between retries (tests pass a recorder; nothing else should).
    """

    def __init__(self, registry: ToolRegistry, policy: ToolPolicy | None = None, *,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.registry = registry
        self.policy = policy or ToolPolicy()
        self._sleep = sleep

    def run(self, call: ToolCallLike, *, step_id: str, project_root: Path | str,
            approvals: ApprovalLookup = _nothing_approved, on_event: EventCallback = _ignore_event,
            timeout_seconds: float | None = None) -> ToolResult:
        """:meth:`arun` in an event loop of its own, for code that has none running (scripts, tests)."""
        return asyncio.run(self.arun(call, step_id=step_id, project_root=project_root, approvals=approvals,
                                     on_event=on_event, timeout_seconds=timeout_seconds))

    async def arun(self, call: ToolCallLike, *, step_id: str, project_root: Path | str,
                   approvals: ApprovalLookup = _nothing_approved, on_event: EventCallback = _ignore_event,
                   timeout_seconds: float | None = None) -> ToolResult:
        """Run one call through every stage; never raises for a refused or failed tool.

        Status ``refused``: unknown tool, not allowed, bad arguments, or rejected at its gate.
        Status ``blocked``: the risk gate ``tool:<name>:<step_id>`` (:func:`tool_gate_id`) waits for a
        person; a ToolApprovalRequired event carries its id, and the tool did not run. Run the call again
        once ``approvals`` says ``approved``. Otherwise ``ok``, ``error`` or ``timeout``.

        Cancelling the awaiting task (the engine's step timeout does) kills the running tool's processes,
        then the cancellation propagates; no result is returned.

        Args:
            call: name, args, required, risk (a step's risk can raise the tool's risk, never lower it).
            step_id: the step making the call (part of the gate id and of the result).
            project_root: the directory the tool works in and may not leave.
            approvals: looks up the decision on a gate id.
            on_event: receives the tool events for the journal.
            timeout_seconds: a tighter bound than the policy's (what is left of the step's time).
        """
        state = _Call(name=call.name, args=dict(call.args), step_id=step_id, project_root=Path(project_root),
                      started_at=isoformat(now()), started=time.monotonic(), on_event=on_event)
        try:
            spec = self.registry.get(call.name)
        except ToolError as exc:
            return state.refuse(exc.format_message())
        state.risk = max(spec.risk, call.risk or "low", key=RISK_ORDER.__getitem__)
        refusal = self.policy.refusal(spec.name) or _args_problem(spec, state.args)
        if refusal is None and not state.project_root.is_dir():
            refusal = f"project root {str(project_root)!r} is not a directory"
        if refusal is None and spec.code is not None:
            refusal = next(filter(None, (self.policy.code_refusal(path, str(state.project_root))
                                         for path in spec.code(state.args))), None)
        if refusal is None and spec.precondition is not None:
            refusal = spec.precondition(state.args, str(state.project_root))
        if refusal is not None:
            return state.refuse(refusal)
        if self.policy.requires_approval(state.risk):
            gate_id = tool_gate_id(spec.name, step_id)
            decision = approvals(gate_id)
            if decision == "rejected":
                return state.refuse(f"rejected at gate {gate_id}")
            if decision != "approved":
                state.event("ToolApprovalRequired", gate_id=gate_id, reason=f"{state.risk}-risk tool")
                return state.result("blocked", error=f"approval required at gate {gate_id}")
        return await self._execute(spec, state, timeout_seconds)

    async def _execute(self, spec: ToolSpec, state: _Call, timeout_seconds: float | None) -> ToolResult:
        timeout = spec.timeout_seconds or self.policy.timeout_seconds
        if timeout_seconds is not None:
            timeout = min(timeout, timeout_seconds)
        attempt = 0
        while True:
            attempt += 1
            state.event("ToolStarted", attempt=attempt)
            ctx = ToolContext(project_root=str(state.project_root.resolve()), step_id=state.step_id,
                              now=now(), default_timezone=self.policy.default_timezone,
                              max_output_bytes=self.policy.max_output_bytes)
            outcome = await _run_once(spec, state.args, ctx, timeout)
            output = outcome.output
            if outcome.status == "ok" and output is not None and output.error is None:
                state.event("ToolCompleted", attempt=attempt, status="ok")
                return state.result("ok", result=output.result, stdout=output.stdout, stderr=output.stderr,
                                    artifacts=list(output.artifacts))
            error = outcome.error or (output.error if output is not None else None)
            will_retry = outcome.retryable and spec.idempotent and attempt <= self.policy.max_retries
            status: Literal["error", "timeout"] = "timeout" if outcome.status == "timeout" else "error"
            state.event("ToolFailed", attempt=attempt, status=status, error=error, will_retry=will_retry)
            if not will_retry:
                return _failed(state, status, error, output)
            await self._sleep(self.policy.retry_backoff_seconds * 2 ** (attempt - 1))


async def _run_once(spec: ToolSpec, args: dict[str, Any], ctx: ToolContext, timeout: float) -> RunOutcome:
    """One attempt: a command's program runs directly; a Python handler runs in a worker process.

    The worker waits synchronously, so it waits in a thread; cancelling this task tells it to kill the worker
    and waits for that before re-raising, so a cancelled call leaves no process behind either way. Captured
    output comes back cut to ``max_output_bytes``: a command's at its source, which knows the true size.
    """
    if spec.command is not None:
        try:
            argv = list(spec.command(args))
        except Exception as exc:  # a bug in a third-party tool's argv builder fails the call, not the step
            return RunOutcome("error", error=f"{type(exc).__name__}: {exc}")
        if not argv:
            return RunOutcome("error", error=f"tool {spec.name!r} built an empty command")
        return await run_command(argv, ctx, timeout=timeout)
    assert spec.handler is not None  # a spec has exactly one of the two
    cancel = threading.Event()
    task = asyncio.ensure_future(asyncio.to_thread(
        run_in_worker, spec.handler, args, ctx, timeout=timeout, cancel=cancel))
    try:
        outcome = await asyncio.shield(task)
    except asyncio.CancelledError:
        cancel.set()
        with contextlib.suppress(Exception):
            await task
        raise
    if outcome.output is not None:
        outcome.output.stdout = _clip(outcome.output.stdout, ctx.max_output_bytes)
        outcome.output.stderr = _clip(outcome.output.stderr, ctx.max_output_bytes)
    return outcome


def _failed(state: _Call, status: Literal["error", "timeout"], error: str | None,
            output: ToolOutput | None) -> ToolResult:
    if output is None:
        return state.result(status, error=error)
    return state.result(status, error=error, result=output.result, stdout=output.stdout, stderr=output.stderr,
                        artifacts=list(output.artifacts))


def _args_problem(spec: ToolSpec, args: dict[str, Any]) -> str | None:
    """Validate ``args`` against the tool's JSON Schema; return every problem in one message."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(dict(spec.args_schema))
    errors = sorted(validator.iter_errors(args), key=lambda e: [str(p) for p in e.path])
    if not errors:
        return None
    problems = "; ".join(f"{'.'.join(str(p) for p in ('args', *e.path))}: {e.message}" for e in errors)
    return f"invalid arguments for tool {spec.name!r}: {problems}"


def _clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore")
    return f"{kept}\n…[truncated {len(data) - limit} bytes]"


def dump_tool_results(results: Iterable[ToolResult]) -> str:
    """Serialise results as the JSON list ``tool_results.json`` holds (stable key order, UTF-8)."""
    return json.dumps([result.model_dump(mode="json") for result in results], ensure_ascii=False, indent=2)


def load_tool_results(text: str) -> list[ToolResult]:
    """Read back what :func:`dump_tool_results` wrote."""
    return [ToolResult.model_validate(item) for item in json.loads(text)]
