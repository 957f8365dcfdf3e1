"""The anthropic executor against a local fake Messages server: tool_use blocks, usage, reliability, resume."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the shared fakes package

from fakes.fake_anthropic import FakeAnthropic, fault, message
from fakes.runs import OUTPUT, greeting_workflow, memo_records, run_dir, truncate_after_first
from stepline import Engine
from stepline.executors._anthropic import AnthropicExecutor
from stepline.executors._protocol import StepRequest

SECRET = "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeAnthropic]:
    """One fake Anthropic server for the module."""
    with FakeAnthropic().running() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeAnthropic) -> FakeAnthropic:
    """The fake server with an empty script and request log."""
    shared_server.reset()
    return shared_server


def options(server: FakeAnthropic, **extra: Any) -> dict[str, Any]:
    return {"base_url": server.base_url, "api_key": SECRET, "model": "fake-claude", "backoff_seconds": 0.001,
            **extra}


def greeting_turns(server: FakeAnthropic) -> None:
    server.queue(
        message(("write_output", {"content": "Hello, Ada!\n"}), text="Writing the greeting."),
        message(("finish", {"summary": "wrote the greeting"})),
    )


def run(tmp_path: Path, **kwargs: Any) -> tuple[Engine, Any]:
    engine = Engine(project_root=tmp_path, executor="anthropic", mode="yolo", **kwargs)
    return engine, asyncio.run(engine.start(greeting_workflow()))


def test_workflow_runs_to_completion_through_tool_use(tmp_path: Path, server: FakeAnthropic) -> None:
    """tool_use blocks write the output and finish; results go back as tool_result blocks."""
    greeting_turns(server)
    engine, result = run(tmp_path, executor_options=options(server, max_tokens=512))
    assert result.status.value == "completed"
    assert (tmp_path / OUTPUT).read_text() == "Hello, Ada!\n"
    first = server.requests[0]
    assert first["max_tokens"] == 512 and "one step of a workflow" in first["system"][0]["text"]
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}  # the cache breakpoint
    assert {t["name"] for t in first["tools"]} >= {"write_output", "finish"}
    assert first["tools"][0]["input_schema"]["required"] == ["path"]
    follow_up = server.requests[1]["messages"]
    assert follow_up[1]["content"][1]["type"] == "tool_use"
    assert follow_up[2]["content"][0]["type"] == "tool_result"
    assert follow_up[2]["content"][0]["content"] == '{"path": "out/greeting.md"}'
    assert any(SECRET in value for value in server.headers[0].values())  # x-api-key or bearer, by SDK version
    assert SECRET not in run_dir(engine, result).journal_path.read_text()


def test_usage_recorded_per_call(tmp_path: Path, server: FakeAnthropic) -> None:
    """Each Messages request is journaled as memo:anthropic with its token usage and cost."""
    greeting_turns(server)
    prices = {"fake-claude": {"input": 3.0, "output": 15.0}}
    engine, result = run(tmp_path, executor_options=options(server, prices=prices))
    records = memo_records(engine, result, "anthropic")
    assert [r["result"]["usage"]["input_tokens"] for r in records] == [120, 120]
    assert records[0]["result"]["usage"]["cost_usd"] == pytest.approx((120 * 3.0 + 30 * 15.0) / 1e6)
    assert records[0]["result"]["usage"]["model"] == "fake-claude"


def test_overloaded_and_rate_limited_are_retried(tmp_path: Path, server: FakeAnthropic) -> None:
    """529 overloaded and 429 answers are retried until the request succeeds."""
    server.queue(fault(529), fault(429))
    greeting_turns(server)
    _, result = run(tmp_path, executor_options=options(server))
    assert result.status.value == "completed"
    assert len(server.requests) == 4


def test_bad_request_is_not_retried(tmp_path: Path, server: FakeAnthropic) -> None:
    """A 400 fails the step after exactly one request."""
    server.queue(fault(400, "messages: roles must alternate"))
    _, result = run(tmp_path, executor_options=options(server))
    assert result.status.value == "failed"
    assert len(server.requests) == 1
    assert "HTTP 400: messages: roles must alternate" in (result.steps["write"].error or "")


def test_resumed_step_does_not_call_the_model_again(tmp_path: Path, server: FakeAnthropic) -> None:
    """After a crash past the first answer, resuming sends only the second request."""
    greeting_turns(server)
    engine, result = run(tmp_path, executor_options=options(server))
    truncate_after_first(engine, result, "memo:anthropic")
    (tmp_path / OUTPUT).unlink()  # the process died before the write that followed the model's answer
    server.queue(message(("finish", {"summary": "resumed"})))
    resumed = asyncio.run(Engine(project_root=tmp_path, executor="anthropic", executor_options=options(server),
                                 mode="yolo").resume(result.run_id))
    assert resumed.status.value == "completed"
    assert len(server.requests) == 3
    assert server.requests[-1]["messages"][-1]["content"][0]["type"] == "tool_result"
    assert (tmp_path / OUTPUT).read_text() == "Hello, Ada!\n"


def test_decide_request_ends_with_decide_and_a_finish_is_sent_back(tmp_path: Path, server: FakeAnthropic) -> None:
    """A decide request ends with the model's decide call; its value and reason reach the session. The tools are
    the run's one set (a cache-friendly prefix), so a `finish` there is refused back to the model."""
    from stepline.executors._protocol import StepSession

    class Recorder(StepSession):
        decided: tuple[bool, str] | None = None

        async def read(self, path: str) -> str:
            return ""

        async def ask(self, question: str, choices: list[str] | None = None) -> str:
            return ""

        async def write_output(self, content: str, **kwargs: Any) -> str:
            return ""

        async def set_var(self, name: str, value: Any) -> None:
            return None

        async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
            return {}

        async def decide(self, value: bool, reason: str) -> None:
            self.decided = (value, reason)

        async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
            raise AssertionError("finish must not end a decide request")

        async def memo(self, label: str, payload: dict[str, Any], compute: Any) -> dict[str, Any]:
            result: dict[str, Any] = await compute()
            return result

    server.queue(message(("finish", {"summary": "done"})),
                 message(("decide", {"value": True, "reason": "the file exists"})))
    executor = AnthropicExecutor(options(server))
    session = Recorder()
    request = StepRequest(kind="decide", run_id="r", step_id="check", title="Check", condition="the PRD exists")

    async def go() -> None:
        await executor.perform(request, session)
        await executor.aclose()

    asyncio.run(go())
    assert session.decided == (True, "the file exists")
    names = {t["name"] for t in server.requests[0]["tools"]}
    assert {"decide", "finish"} <= names
    assert "the PRD exists" in server.requests[0]["messages"][0]["content"]
    refused = server.requests[1]["messages"][-1]["content"][0]
    assert refused["is_error"] and "ends with `decide`, not `finish`" in refused["content"]


def test_a_decide_request_that_only_finishes_names_the_refusal(server: FakeAnthropic) -> None:
    """A model that answers a decide request with `finish` every turn fails with that refusal named."""
    from stepline.errors import ExecutorError

    class Session:
        async def memo(self, label: str, payload: dict[str, Any], compute: Any) -> dict[str, Any]:
            result: dict[str, Any] = await compute()
            return result

    server.queue(message(("finish", {"summary": "done"})), message(("finish", {"summary": "done, really"})))
    executor = AnthropicExecutor(options(server, max_turns=2))
    request = StepRequest(kind="decide", run_id="r", step_id="check", title="Check", condition="the PRD exists")

    async def go() -> None:
        try:
            await executor.perform(request, Session())  # type: ignore[arg-type]
        finally:
            await executor.aclose()

    with pytest.raises(ExecutorError, match=r"did not call decide within 2 model turns: it never called `decide`; "
                                            r"the last refused call was `finish`: this decide request ends with "
                                            r"`decide`, not `finish`"):
        asyncio.run(go())
