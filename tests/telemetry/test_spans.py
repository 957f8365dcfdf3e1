"""The spans the telemetry observer makes of runs, checked attribute by attribute (kept in memory): a native run
with a tool, a validation gate and a human gate, approved from another process and resumed (the same trace goes
on); the openai executor's model requests against the fake OpenAI server; an agent CLI's call and the tool it
called; a fork; a process stopped mid-step, then resumed."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from fakes.fake_openai import FakeOpenAI, completion
from stepline import Engine
from stepline.engine import HumanChannel
from stepline.executors import Executor, StepRequest, StepSession
from stepline.families import load_workflow
from stepline.interfaces.cli._app import run_cli
from stepline.store import read_journal
from stepline.telemetry._spans import _usage

from .conftest import Spans

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"


def _hex(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def _parent(span: ReadableSpan) -> str | None:
    return format(span.parent.span_id, "016x") if span.parent is not None else None


def _journal(project: Path, run_id: str) -> list[Any]:
    return list(read_journal(project / ".stepline" / "runs" / run_id / "journal.jsonl"))


def _gated_run(project: Path, write_workflow: Callable[..., Path], write_script: Callable[..., Path]) -> str:
    """A run that calls a tool, passes a validation gate, then blocks at a human gate; returns its id."""
    (project / "notes.md").write_text("", encoding="utf-8")
    write_workflow([{"id": "gather", "name": "Gather", "body": "Note the time.", "outputs": ["notes.md"],
                     "validation": "Template/schema validation"},
                    {"id": "publish", "name": "Publish", "body": "Publish the notes.", "human_gate": "required"}],
                   id="notes")
    script = write_script({"gather": [{"call_tool": {"name": "getCurrentTime", "args": {}}},
                                      {"write_output": {"content": "# Notes\n\nnoted\n", "mode": "replace"}},
                                      {"finish": {"summary": "noted"}}],
                           "publish": [{"finish": {"summary": "published"}}]})
    engine = Engine(project_root=project, executor="scripted", executor_options={"script": str(script)},
                    human=HumanChannel(interactive=False))
    run = asyncio.run(engine.start(load_workflow(project / "flow.yaml", project_root=project)))
    assert run.status.value == "blocked", run.error
    return run.run_id


def test_a_run_its_steps_tool_and_gates_and_its_resume_in_the_same_trace(
        project: Path, write_workflow: Callable[..., Path], write_script: Callable[..., Path], spans: Spans) -> None:
    run_id = _gated_run(project, write_workflow, write_script)
    common = {"stepline.run.id": run_id, "stepline.workflow.family": "native"}

    first = spans.one("invoke_workflow notes")
    trace_id, run_span = _hex(first)
    started = next(e for e in _journal(project, run_id) if e.type == "WorkflowStarted")
    assert started.data["trace"] == {"trace_id": trace_id, "span_id": run_span, "run_id": run_id}
    assert first.parent is None and first.kind == SpanKind.INTERNAL
    assert dict(first.attributes or {}) == {
        **common, "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "notes",
        "stepline.executor": "scripted", "stepline.run.status": "blocked",
        "stepline.run.blocked_reason": "publish: waiting for approval of gate step:publish (the step's human_gate is "
                                       "required)"}

    gather = spans.one("step gather")
    assert _parent(gather) == run_span and gather.status.status_code == StatusCode.OK
    assert dict(gather.attributes or {}) == {**common, "stepline.step.id": "gather", "stepline.step.attempt": 1,
                                             "stepline.step.name": "Gather", "stepline.step.status": "completed"}
    assert [(e.name, dict(e.attributes or {})) for e in gather.events] == [
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "template", "gen_ai.evaluation.score.label": "pass"})]

    tool = spans.one("execute_tool getCurrentTime")
    assert _parent(tool) == _hex(gather)[1] and tool.status.status_code == StatusCode.UNSET
    assert dict(tool.attributes or {}) == {
        **common, "stepline.step.id": "gather", "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "getCurrentTime", "gen_ai.tool.type": "function", "stepline.tool.risk": "low"}
    assert gather.start_time is not None and tool.start_time is not None and tool.end_time is not None
    assert gather.start_time <= tool.start_time <= tool.end_time <= (gather.end_time or 0)

    blocked = spans.one("step publish")
    assert dict(blocked.attributes or {})["stepline.step.status"] == "blocked"
    assert [e.name for e in blocked.events] == ["stepline.gate.required"]

    # Approved by `stepline approve` (nobody drives the run), then resumed by another process.
    Engine(project_root=project).decide_gate(run_id, "step:publish", approved=True, by="ada", notes="ship it")
    spans.new_process()
    resumed = asyncio.run(Engine(project_root=project, human=HumanChannel(interactive=False)).resume(run_id))
    assert resumed.status.value == "completed"

    second = [s for s in spans.named("invoke_workflow notes") if s is not first]
    assert len(second) == 1
    again = second[0]
    assert _hex(again)[0] == trace_id and _parent(again) == run_span  # the journaled trace goes on
    assert dict(again.attributes or {}) == {
        **common, "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "notes",
        "stepline.executor": "scripted", "stepline.run.resumed": True, "stepline.run.status": "completed"}
    assert again.status.status_code == StatusCode.OK
    assert [(e.name, dict(e.attributes or {})) for e in again.events] == [
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "human_approval",
                                      "gen_ai.evaluation.score.label": "approved", "gen_ai.evaluation.score.value": 1.0,
                                      "gen_ai.evaluation.explanation": "ship it", "stepline.gate.id": "step:publish",
                                      "stepline.gate.decided_by": "ada"})]
    published = [s for s in spans.named("step publish") if s is not blocked]
    assert len(published) == 1 and _parent(published[0]) == _hex(again)[1]
    assert {_hex(s)[0] for s in spans.all()} == {trace_id}


def test_model_requests_are_chat_spans_with_the_whole_prompt_as_input(
        project: Path, write_workflow: Callable[..., Path], fake_openai: FakeOpenAI, spans: Spans,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The openai executor, and the conventions' newer shape of the run span (OTEL_SEMCONV_STABILITY_OPT_IN)."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http,gen_ai_latest_experimental")
    write_workflow([{"id": "write", "name": "Write", "body": "Write the notes.", "outputs": ["notes.md"]}], id="notes")
    first = completion(("write_output", {"content": "hello\n"}), ("call_tool", {"name": "getCurrentTime"}),
                       usage=(1200, 30))
    first.body["usage"]["prompt_tokens_details"] = {"cached_tokens": 1000}  # read from the provider's cache
    fake_openai.queue(first, completion(("finish", {"summary": "wrote"}), usage=(1300, 5)))
    engine = Engine(project_root=project, executor="openai", mode="yolo",
                    executor_options={"base_url": fake_openai.base_url, "api_key": "test", "model": "fake-request"})
    run = asyncio.run(engine.start(load_workflow(project / "flow.yaml", project_root=project)))
    assert run.status.value == "completed", run.error

    root = spans.one("invoke_agent notes")
    assert {k: v for k, v in (root.attributes or {}).items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.name": "notes", "gen_ai.provider.name": "openai"}
    step = spans.one("step write")
    chats = spans.named("chat fake-request")
    assert len(chats) == 2 and all(_parent(c) == _hex(step)[1] and c.kind == SpanKind.CLIENT for c in chats)
    port = int(fake_openai.base_url.split(":")[2].split("/")[0])
    common = {"stepline.run.id": run.run_id, "stepline.workflow.family": "native", "stepline.step.id": "write",
              "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "fake-request",
              "gen_ai.response.model": "fake-gpt", "server.address": "127.0.0.1", "server.port": port}
    chats.sort(key=lambda s: s.start_time or 0)
    assert dict(chats[0].attributes or {}) == {
        **common, "gen_ai.response.finish_reasons": ("tool_calls",), "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 30, "gen_ai.usage.cache_read.input_tokens": 1000,
        "gen_ai.usage.cache_creation.input_tokens": 0}
    assert dict(chats[1].attributes or {})["gen_ai.usage.input_tokens"] == 1300
    recorded = [e for e in _journal(project, run.run_id) if e.type == "CallRecorded" and e.data["op"] == "memo:openai"]
    for chat, record in zip(chats, recorded, strict=True):  # the span lasts what the request took, ending when recorded
        assert chat.end_time is not None and chat.start_time is not None
        assert chat.end_time - chat.start_time == int(record.data["result"]["usage"]["latency_ms"] * 1_000_000)
    tool = spans.one("execute_tool getCurrentTime")
    assert _parent(tool) == _hex(step)[1]


def test_an_agent_cli_call_is_invoke_agent_with_its_session_and_the_tool_it_called(
        project: Path, write_workflow: Callable[..., Path], spans: Spans, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKES), str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.setenv("FAKE_AGENT_TOOL", "getCurrentTime")
    write_workflow([{"id": "outline", "name": "Outline", "body": "Outline it.", "outputs": ["out/outline.md"]}],
                   id="article")
    engine = Engine(project_root=project, executor="cli-agent", human=HumanChannel(interactive=False),
                    executor_options={"agent": "claude", "cd": str(project)})
    run = asyncio.run(asyncio.wait_for(engine.start(load_workflow(project / "flow.yaml", project_root=project)), 120))
    assert run.status.value == "completed", run.error

    agent = spans.one("invoke_agent claude")
    assert agent.kind == SpanKind.CLIENT and _parent(agent) == _hex(spans.one("step outline"))[1]
    assert dict(agent.attributes or {}) == {
        "stepline.run.id": run.run_id, "stepline.workflow.family": "native", "stepline.step.id": "outline",
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "claude", "gen_ai.provider.name": "anthropic",
        "gen_ai.conversation.id": "claude-session-outline", "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30, "gen_ai.usage.cache_read.input_tokens": 0,
        "gen_ai.usage.cache_creation.input_tokens": 0, "stepline.usage.cost_usd": 0.01}
    tool = spans.one("execute_tool getCurrentTime")
    assert _parent(tool) == _hex(agent)[1]  # the agent's call, not the step's own
    assert agent.start_time is not None and tool.start_time is not None and tool.end_time is not None
    assert agent.start_time <= tool.start_time <= tool.end_time <= (agent.end_time or 0)


def test_a_fork_is_a_new_trace_linked_to_its_parent(
        project: Path, write_workflow: Callable[..., Path], write_script: Callable[..., Path], spans: Spans,
        monkeypatch: pytest.MonkeyPatch) -> None:
    parent_id = _gated_run(project, write_workflow, write_script)
    parent = spans.one("invoke_workflow notes")
    monkeypatch.chdir(project)
    spans.new_process()
    assert run_cli(["fork", parent_id, "--at", "publish", "-q"]) == 9  # blocked again at the gate
    forked = [s for s in spans.named("invoke_workflow notes") if s is not parent]
    assert len(forked) == 1
    fork = forked[0]
    fork_id = dict(fork.attributes or {})["stepline.run.id"]
    assert fork_id != parent_id and dict(fork.attributes or {})["stepline.fork.parent_run_id"] == parent_id
    assert fork.parent is None and _hex(fork)[0] != _hex(parent)[0]
    assert [(format(link.context.span_id, "016x")) for link in fork.links] == [_hex(parent)[1]]
    resumed = [e for e in _journal(project, fork_id) if e.type == "WorkflowResumed"]
    assert resumed[-1].data["trace"] == {"trace_id": _hex(fork)[0], "span_id": _hex(fork)[1], "run_id": fork_id}


class _Crash(BaseException):
    """What a killed process is to the engine: nothing it catches."""


class _CrashingOnce(Executor):
    """Calls a tool, then the first time the process 'dies'; the next time (a resume) it finishes."""

    name = "crashing-once"
    pure = False

    def __init__(self, crash: bool) -> None:
        self.crash = crash

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        await session.call_tool("getCurrentTime", {})
        if self.crash:
            raise _Crash
        await session.finish(summary="done on resume")


def test_a_process_stopped_mid_step_ends_its_spans_and_the_resume_continues_the_step(
        project: Path, write_workflow: Callable[..., Path], spans: Spans) -> None:
    write_workflow([{"id": "work", "name": "Work", "body": "Do it."}], id="once")
    engine = Engine(project_root=project, executor=_CrashingOnce(crash=True))
    with pytest.raises(_Crash):
        asyncio.run(engine.start(load_workflow(project / "flow.yaml", project_root=project)))
    [first] = spans.named("invoke_workflow once")
    [stopped] = spans.named("step work")
    assert dict(stopped.attributes or {})["stepline.interrupted"] is True
    assert dict(first.attributes or {})["stepline.interrupted"] is True
    run_id = dict(first.attributes or {})["stepline.run.id"]

    spans.new_process()
    resumed = asyncio.run(Engine(project_root=project, executor=_CrashingOnce(crash=False)).resume(str(run_id)))
    assert resumed.status.value == "completed"
    [again] = [s for s in spans.named("step work") if s is not stopped]
    assert dict(again.attributes or {}) == {
        "stepline.run.id": run_id, "stepline.workflow.family": "native", "stepline.step.id": "work",
        "stepline.step.attempt": 1, "stepline.step.name": "Work", "stepline.step.resumed": True,
        "stepline.step.status": "completed"}
    [segment] = [s for s in spans.named("invoke_workflow once") if s is not first]
    assert _parent(again) == _hex(segment)[1] and _parent(segment) == _hex(first)[1]
    assert len(spans.named("execute_tool getCurrentTime")) == 1  # the journaled call is replayed, not run again


@pytest.mark.parametrize("recorded", [
    {"input_tokens": 200, "cached_input_tokens": 700, "cache_write_tokens": 100, "output_tokens": 30},  # billed apart
    {"input_tokens": 1000, "cache_read_tokens": 700, "cache_write_tokens": 100, "output_tokens": 30},  # whole prompt
])
def test_usage_is_counted_as_the_conventions_do_in_either_recorded_shape(recorded: dict[str, int],
                                                                         spans: Spans) -> None:
    span = spans.provider.get_tracer("test").start_span("chat")
    _usage(span, recorded)
    span.end()
    assert dict(spans.one("chat").attributes or {}) == {
        "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cache_read.input_tokens": 700, "gen_ai.usage.cache_creation.input_tokens": 100}
