"""A run's journal as OpenTelemetry spans, following the GenAI semantic conventions; times are the records'.

* the run: ``invoke_workflow {workflow}`` (``gen_ai.workflow.name``), or with ``OTEL_SEMCONV_STABILITY_OPT_IN``
  naming ``gen_ai_latest_experimental`` the newer shape, an internal ``invoke_agent {workflow}`` span
  (``gen_ai.agent.name``; the operation stays ``invoke_workflow``). Its trace and span ids are journaled with
  WorkflowStarted; each resume is a span of the same trace under it. A fork is a new trace linked to its parent;
  a child run (a workflow a step invokes) sits under the step that started it;
* each step attempt: ``step {id}``; under it each model request ``chat {model}`` (usage, the whole prompt counted
  as input), each agent CLI call ``invoke_agent {cli}`` (``gen_ai.conversation.id``: the CLI's session) and each
  tool call ``execute_tool {tool}`` (under the agent whose call it was, when one made it);
* gate decisions, validation gates and the sprint's review verdicts: ``gen_ai.evaluation.result`` span events.

Every span carries ``stepline.run.id`` and ``stepline.workflow.family`` (``stepline.story.key`` for a sprint story,
``stepline.fork.parent_run_id`` for a fork), every span of a step ``stepline.step.id``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from stepline import time
from stepline.executors import Usage
from stepline.model import Event, EventType, Run, StepStatus

__all__ = ["SpanObserver"]

_E = EventType
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TOOL_OPS = frozenset(("call_tool", "step_tool", "pre_analysis"))
#: An agent CLI's vendor, as ``gen_ai.provider.name`` names it.
_CLI_PROVIDERS = {"claude": "anthropic", "codex": "openai", "gemini": "gcp.gemini", "qwen": "qwen",
                  "opencode": "opencode"}
_DECISIONS = (_E.HUMAN_GATE_APPROVED.value, _E.HUMAN_GATE_REJECTED.value)
_RUN_ENDS = (_E.WORKFLOW_COMPLETED.value, _E.WORKFLOW_FAILED.value, _E.WORKFLOW_BLOCKED.value)


def _ns(stamp: str) -> int:
    """Nanoseconds since the epoch of a journal time (ISO 8601 with microseconds), exactly."""
    moment = datetime.fromisoformat(stamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def _latest_shape() -> bool:
    opted = os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "")
    return "gen_ai_latest_experimental" in (part.strip() for part in opted.split(","))


@dataclass(slots=True)
class _RunTrace:
    """What one run has open in this process."""

    common: dict[str, AttributeValue]
    name: str
    workflow: str
    root: Span | None = None  # the run span of this process (a resume's own)
    parent: Context | None = None  # a resume: the journaled run span, parent of this process's
    decided_since: list[Event] = field(default_factory=list)  # a resume: decisions made while nobody drove the run
    steps: dict[str, Span] = field(default_factory=dict)
    agents: dict[str, Span] = field(default_factory=dict)  # call prefix (step/attempt/invocation) -> agent span
    tools: dict[tuple[str, str], list[Span]] = field(default_factory=dict)  # (step, tool) -> calls running
    intents: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (step, tool) -> call prefixes


class SpanObserver:
    """The engine observer (:class:`stepline.engine.RunObserver`) that makes spans of what runs journal."""

    def __init__(self, provider: trace.TracerProvider) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            own = version("stepline")
        except PackageNotFoundError:
            own = None
        self.tracer = provider.get_tracer("stepline", own)
        self.runs: dict[str, _RunTrace] = {}
        self.broken = False

    # -- the engine's observer ------------------------------------------------------------------------------
    def opened(self, run: Run, history: list[Event]) -> dict[str, Any] | None:
        """Start the run's trace, or continue the one its journal names; return what the journal keeps of it."""
        if self.broken:
            return None
        try:
            return self._open(run, history)
        except Exception as exc:  # telemetry never stops a run
            self._break(exc)
            return None

    def journaled(self, run: Run, event: Event) -> None:
        """Turn one record into span starts, ends and events."""
        state = self.runs.get(run.run_id)
        if state is None or self.broken:
            return
        try:
            self._record(run, state, event)
        except Exception as exc:
            self._break(exc)

    def closed(self, run: Run) -> None:
        """End whatever the run left open here (a process stopped mid-run: its spans say so)."""
        state = self.runs.pop(run.run_id, None)
        if state is None or self.broken:
            return
        try:
            end = _ns(time.now_iso())
            for span in [s for spans in state.tools.values() for s in spans] + [*state.agents.values(),
                                                                                 *state.steps.values()]:
                span.set_attribute("stepline.interrupted", True)
                span.end(end_time=end)
            if state.root is not None and state.root.is_recording():
                state.root.set_attribute("stepline.interrupted", True)
                state.root.end(end_time=end)
        except Exception as exc:
            self._break(exc)

    def _break(self, exc: Exception) -> None:
        self.broken = True
        print(f"note: stepline's telemetry stopped ({type(exc).__name__}: {exc}); the run goes on without traces",
              file=sys.stderr)

    # -- a run ----------------------------------------------------------------------------------------------
    def _open(self, run: Run, history: list[Event]) -> dict[str, Any] | None:
        workflow = run.workflow.id
        common: dict[str, AttributeValue] = {"stepline.run.id": run.run_id,
                                             "stepline.workflow.family": run.workflow.format}
        story = run.workflow.meta.get("story")
        if story:
            common["stepline.story.key"] = str(story)
        if run.forked_at and run.parent_run_id:
            common["stepline.fork.parent_run_id"] = run.parent_run_id
        latest = _latest_shape()
        state = _RunTrace(common, f"{'invoke_agent' if latest else 'invoke_workflow'} {workflow}", workflow)
        recorded = _recorded_trace(history)
        if recorded is not None and recorded.get("run_id") == run.run_id:  # a resume: the same trace goes on
            state.parent = trace.set_span_in_context(NonRecordingSpan(_span_context(recorded)))
            state.decided_since = _decided_since(history)
            self.runs[run.run_id] = state
            return None
        links = [Link(_span_context(recorded))] if recorded is not None else []  # a fork: its parent's run
        start = run.created_at if not history else time.now_iso()
        state.root = self._run_span(run, state, self._parent_of(run), start, links)
        self.runs[run.run_id] = state
        context = state.root.get_span_context()
        return {"trace": {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x"),
                          "run_id": run.run_id}}

    def _parent_of(self, run: Run) -> Context | None:
        """A child run's parent: the step of the run that started it, when this process drives that run."""
        if run.parent_run_id and not run.forked_at:
            parent = self.runs.get(run.parent_run_id)
            if parent is not None:
                open_steps = list(parent.steps.values())
                span = open_steps[-1] if open_steps else parent.root
                if span is not None:
                    return trace.set_span_in_context(span)
        carrier = os.environ.get("TRACEPARENT")
        if carrier:
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            return TraceContextTextMapPropagator().extract({"traceparent": carrier,
                                                            "tracestate": os.environ.get("TRACESTATE", "")})
        return None

    def _run_span(self, run: Run, state: _RunTrace, parent: Context | None, start: str,
                  links: list[Link]) -> Span:
        attributes: dict[str, AttributeValue] = {**state.common, "gen_ai.operation.name": "invoke_workflow",
                                                 "stepline.executor": run.executor}
        if state.name.startswith("invoke_agent"):
            attributes["gen_ai.agent.name"] = state.workflow
            attributes["gen_ai.provider.name"] = _provider(run.executor)
        else:
            attributes["gen_ai.workflow.name"] = state.workflow
        return self.tracer.start_span(state.name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes,
                                      links=links, start_time=_ns(start))

    # -- records --------------------------------------------------------------------------------------------
    def _record(self, run: Run, state: _RunTrace, event: Event) -> None:
        kind, data, at = event.type, event.data, _ns(event.time)
        step = run.steps.get(event.step_id or "")
        if step is not None and step.status == StepStatus.RUNNING and step.step_id not in state.steps and \
                kind != _E.STEP_STARTED.value:  # a step a stopped process left running, continued here
            self._step_span(state, step.step_id, step.attempts, step.name, at).set_attribute(
                "stepline.step.resumed", True)
        if kind == _E.WORKFLOW_RESUMED.value:
            if state.root is None:  # continuing the journaled trace: this process's part of the run
                state.root = self._run_span(run, state, state.parent, event.time, [])
                state.root.set_attribute("stepline.run.resumed", True)
            for decided in state.decided_since:  # decided by a person while no process drove the run
                self._decision(state.root, decided)
            state.decided_since = []
        elif kind in _RUN_ENDS and state.root is not None:
            status = {_E.WORKFLOW_COMPLETED.value: "completed", _E.WORKFLOW_FAILED.value: "failed"}.get(kind, "blocked")
            state.root.set_attribute("stepline.run.status", status)
            if status == "failed":
                _fail(state.root, str(data.get("error") or "failed"))
            elif status == "blocked":
                state.root.set_attribute("stepline.run.blocked_reason", str(data.get("reason") or ""))
            else:
                state.root.set_status(Status(StatusCode.OK))
            state.root.end(end_time=at)
        elif kind == _E.STEP_STARTED.value and event.step_id:
            self._end_step(state, event.step_id, at)  # an attempt left open (it cannot be, but never leak one)
            self._step_span(state, event.step_id, int(data.get("attempt") or 1), data.get("name"), at)
        elif kind in (_E.STEP_COMPLETED.value, _E.STEP_FAILED.value, _E.STEP_BLOCKED.value) and event.step_id:
            self._step_ended(run, state, event, at)
        elif kind in _DECISIONS:
            self._decision(self._step_or_run(state, event.step_id), event)
        elif kind in (_E.VALIDATION_PASSED.value, _E.VALIDATION_FAILED.value):
            self._evaluation(self._step_or_run(state, event.step_id), at, str(data.get("gate") or "validation"),
                             "pass" if kind == _E.VALIDATION_PASSED.value else "fail",
                             "; ".join(str(i) for i in data.get("issues") or []) or None)
        elif kind == _E.HUMAN_GATE_REQUIRED.value:
            span = self._step_or_run(state, event.step_id)
            if span is not None:
                span.add_event("stepline.gate.required", {"stepline.gate.id": str(data.get("gate_id")),
                                                          "stepline.gate.reason": str(data.get("reason") or "")},
                               timestamp=at)
        elif kind == _E.TOOL_STARTED.value and event.step_id:
            self._tool_started(state, event, at)
        elif kind in (_E.TOOL_COMPLETED.value, _E.TOOL_FAILED.value) and event.step_id:
            self._tool_ended(state, event, at)
        elif kind == _E.CALL_STARTED.value and event.step_id:
            self._call_started(state, event, at)
        elif kind == _E.CALL_RECORDED.value and event.step_id and str(data.get("op", "")).startswith("memo:"):
            self._memo(run, state, event, at)

    def _step_span(self, state: _RunTrace, step_id: str, attempt: int, name: Any, at: int) -> Span:
        attributes: dict[str, AttributeValue] = {**state.common, "stepline.step.id": step_id,
                                                 "stepline.step.attempt": attempt}
        if name:
            attributes["stepline.step.name"] = str(name)
        span = state.steps[step_id] = self.tracer.start_span(f"step {step_id}", context=_within(state.root),
                                                             attributes=attributes, start_time=at)
        return span

    def _step_or_run(self, state: _RunTrace, step_id: str | None) -> Span | None:
        return state.steps.get(step_id or "") or state.root

    def _end_step(self, state: _RunTrace, step_id: str, at: int) -> None:
        """End a step's span and whatever of it is still open (an agent or tool its failure cut short)."""
        for prefix in [p for p in state.agents if p.split("/", 1)[0] == step_id]:
            state.agents[prefix].end(end_time=at)
            del state.agents[prefix]
        for key in [k for k in state.tools if k[0] == step_id]:
            for tool in state.tools.pop(key):
                tool.end(end_time=at)
        for key in [k for k in state.intents if k[0] == step_id]:
            del state.intents[key]
        step = state.steps.pop(step_id, None)
        if step is not None:
            step.end(end_time=at)

    def _step_ended(self, run: Run, state: _RunTrace, event: Event, at: int) -> None:
        span = state.steps.get(event.step_id or "")
        if span is None:
            return
        data = event.data
        if event.type == _E.STEP_COMPLETED.value:
            span.set_attribute("stepline.step.status", "completed")
            if data.get("choice"):
                span.set_attribute("stepline.step.choice", str(data["choice"]))
            if run.workflow.format == "sprint" and str(event.step_id).split("@", 1)[0] == "review":
                self._evaluation(span, at, "code_review", str(data.get("choice") or "clean"),
                                 str(data.get("summary") or "") or None)
            span.set_status(Status(StatusCode.OK))
        elif event.type == _E.STEP_FAILED.value:
            span.set_attribute("stepline.step.status", "failed")
            _fail(span, str(data.get("error") or "failed"))
        else:
            span.set_attribute("stepline.step.status", "blocked")
            span.set_attribute("stepline.step.blocked_reason", str(data.get("reason") or ""))
            if data.get("gate_id"):
                span.set_attribute("stepline.gate.id", str(data["gate_id"]))
        self._end_step(state, str(event.step_id), at)

    # -- evaluations ----------------------------------------------------------------------------------------
    def _decision(self, span: Span | None, event: Event) -> None:
        data = event.data
        approved = event.type == _E.HUMAN_GATE_APPROVED.value
        self._evaluation(span, _ns(event.time), "human_approval", "approved" if approved else "rejected",
                         str(data.get("notes") or "") or None, score=1.0 if approved else 0.0,
                         more={"stepline.gate.id": str(data.get("gate_id")),
                               "stepline.gate.decided_by": str(data.get("by") or "")})

    @staticmethod
    def _evaluation(span: Span | None, at: int, name: str, label: str, explanation: str | None, *,
                    score: float | None = None, more: dict[str, AttributeValue] | None = None) -> None:
        if span is None:
            return
        attributes: dict[str, AttributeValue] = {"gen_ai.evaluation.name": name,
                                                 "gen_ai.evaluation.score.label": label, **(more or {})}
        if score is not None:
            attributes["gen_ai.evaluation.score.value"] = score
        if explanation:
            attributes["gen_ai.evaluation.explanation"] = explanation
        span.add_event("gen_ai.evaluation.result", attributes, timestamp=at)

    # -- tools ----------------------------------------------------------------------------------------------
    def _call_started(self, state: _RunTrace, event: Event, at: int) -> None:
        data = event.data
        op, key = str(data.get("op") or ""), str(data.get("key") or "")
        args = _mapping(data.get("args"))
        if op == "agent_process":  # the agent CLI's process starts: its call's span
            prefix = key.rsplit("/", 1)[0]
            if prefix not in state.agents:
                state.agents[prefix] = self._agent_span(state, event.step_id or "", str(args.get("agent") or ""), at)
        elif op in _TOOL_OPS and args.get("name"):
            state.intents.setdefault((event.step_id or "", str(args["name"])), []).append(key.rsplit("/", 1)[0])

    def _tool_started(self, state: _RunTrace, event: Event, at: int) -> None:
        step, tool = str(event.step_id), str(event.data.get("tool"))
        running = state.tools.setdefault((step, tool), [])
        if int(event.data.get("attempt") or 1) > 1 and running:
            return  # a retry of the call whose span is open
        running.append(self._tool_span(state, step, tool, event.data, at))

    def _tool_span(self, state: _RunTrace, step: str, tool: str, data: dict[str, Any], at: int) -> Span:
        intents = state.intents.get((step, tool))
        prefix = intents.pop(0) if intents else None  # the journaled call this run of the pipeline is
        owner = state.agents.get(prefix or "") or state.steps.get(step) or state.root
        attributes: dict[str, AttributeValue] = {
            **state.common, "stepline.step.id": step, "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool, "gen_ai.tool.type": "function", "stepline.tool.risk": str(data.get("risk"))}
        return self.tracer.start_span(f"execute_tool {tool}", context=_within(owner), kind=SpanKind.INTERNAL,
                                      attributes=attributes, start_time=at)

    def _tool_ended(self, state: _RunTrace, event: Event, at: int) -> None:
        step, tool, data = str(event.step_id), str(event.data.get("tool")), event.data
        running = state.tools.get((step, tool)) or []
        if event.type == _E.TOOL_FAILED.value and data.get("will_retry"):
            if running:
                running[0].add_event("stepline.tool.retry", {"stepline.tool.error": str(data.get("error") or "")},
                                     timestamp=at)
            return
        span = running.pop(0) if running else self._tool_span(state, step, tool, data, at)  # refused: never ran
        if event.type == _E.TOOL_FAILED.value:
            span.set_attribute("error.type", str(data.get("status") or "error"))
            span.set_status(Status(StatusCode.ERROR, str(data.get("error") or data.get("status") or "failed")))
        span.end(end_time=at)

    # -- model and agent calls ------------------------------------------------------------------------------
    def _agent_span(self, state: _RunTrace, step: str, cli: str, at: int) -> Span:
        attributes: dict[str, AttributeValue] = {
            **state.common, "stepline.step.id": step, "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": cli, "gen_ai.provider.name": _CLI_PROVIDERS.get(cli, cli)}
        return self.tracer.start_span(f"invoke_agent {cli}", context=_within(state.steps.get(step) or state.root),
                                      kind=SpanKind.CLIENT, attributes=attributes, start_time=at)

    def _memo(self, run: Run, state: _RunTrace, event: Event, at: int) -> None:
        data = event.data
        label = str(data["op"]).removeprefix("memo:")
        payload = _mapping(_mapping(data.get("args")).get("payload"))
        result = _mapping(data.get("result"))
        prefix = str(data.get("key") or "").rsplit("/", 1)[0]
        if label.startswith("cli-agent:"):
            cli = label.removeprefix("cli-agent:")
            span = state.agents.pop(prefix, None) or self._agent_span(state, str(event.step_id), cli, at)
            if result.get("session_id"):
                span.set_attribute("gen_ai.conversation.id", str(result["session_id"]))
            _usage(span, result.get("usage"))
            if result.get("stopped"):
                span.set_attribute("error.type", "budget_exceeded")
                span.set_status(Status(StatusCode.ERROR, str(result["stopped"])))
            span.end(end_time=at)
        elif "model" in payload and isinstance(result.get("usage"), dict):
            self._chat(run, state, event, payload, result, at)

    def _chat(self, run: Run, state: _RunTrace, event: Event, payload: dict[str, Any], result: dict[str, Any],
              at: int) -> None:
        usage: dict[str, Any] = result["usage"]
        label = str(event.data["op"]).removeprefix("memo:")
        requested = str(payload["model"])
        attributes: dict[str, AttributeValue] = {
            **state.common, "stepline.step.id": str(event.step_id), "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _provider(label), "gen_ai.request.model": requested,
            "gen_ai.response.model": str(usage.get("model") or requested)}
        if result.get("stop_reason"):
            attributes["gen_ai.response.finish_reasons"] = [str(result["stop_reason"])]
        base_url = run.executor_options.get("base_url") if run.executor == label else None
        if isinstance(base_url, str) and base_url:
            parts = urlsplit(base_url)
            if parts.hostname:
                attributes["server.address"] = parts.hostname
                attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
        latency_ns = int(float(usage.get("latency_ms") or 0) * 1_000_000)
        span = self.tracer.start_span(f"chat {requested}", context=_within(self._step_or_run(state, event.step_id)),
                                      kind=SpanKind.CLIENT, attributes=attributes, start_time=at - latency_ns)
        _usage(span, usage)
        span.end(end_time=at)


def _usage(span: Span, usage: Any) -> None:
    """A call's usage as the conventions count it, as :class:`stepline.executors.Usage` does: ``input_tokens`` the
    whole prompt, its cached part (read from the cache, written to it) included."""
    if not isinstance(usage, dict):
        return
    used = Usage.from_record(usage)
    span.set_attribute("gen_ai.usage.input_tokens", int(used.input_tokens))
    span.set_attribute("gen_ai.usage.output_tokens", int(used.output_tokens))
    span.set_attribute("gen_ai.usage.cache_read.input_tokens", int(used.cache_read_tokens))
    span.set_attribute("gen_ai.usage.cache_creation.input_tokens", int(used.cache_write_tokens))
    if used.cost_usd:
        span.set_attribute("stepline.usage.cost_usd", used.cost_usd)


def _provider(executor: str) -> str:
    """``gen_ai.provider.name`` of an executor: the model API's vendor, else the executor itself."""
    return {"openai": "openai", "anthropic": "anthropic"}.get(executor, executor)


def _fail(span: Span, error: str) -> None:
    span.set_attribute("error.type", "timeout" if error.startswith("timed out") else "_OTHER")
    span.set_status(Status(StatusCode.ERROR, error))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _within(span: Span | None) -> Context | None:
    return trace.set_span_in_context(span) if span is not None else None


def _recorded_trace(history: list[Event]) -> dict[str, Any] | None:
    """The trace the journal last recorded for its run (with WorkflowStarted, or a resume that began one)."""
    for event in reversed(history):
        if event.type in (_E.WORKFLOW_STARTED.value, _E.WORKFLOW_RESUMED.value):
            recorded = event.data.get("trace")
            if isinstance(recorded, dict) and recorded.get("trace_id") and recorded.get("span_id"):
                return recorded
    return None


def _span_context(recorded: dict[str, Any]) -> SpanContext:
    return SpanContext(trace_id=int(str(recorded["trace_id"]), 16), span_id=int(str(recorded["span_id"]), 16),
                       is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _decided_since(history: list[Event]) -> list[Event]:
    """The gate decisions recorded after the run's last process stopped driving it (by ``stepline approve``)."""
    decided: list[Event] = []
    for event in reversed(history):
        if event.type in _RUN_ENDS or event.type in (_E.WORKFLOW_STARTED.value, _E.WORKFLOW_RESUMED.value):
            break
        if event.type in _DECISIONS:
            decided.append(event)
    return decided[::-1]
