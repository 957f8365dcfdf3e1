"""The openai executor against a local fake Chat Completions server: protocol, usage, reliability, resume."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the shared fakes package

from fakes.fake_openai import FakeOpenAI, completion, fault
from fakes.runs import OUTPUT, greeting_workflow, memo_records, run_dir, truncate_after_first
from stepline import Engine
from stepline.engine import build_timeline
from stepline.errors import ExecutorError
from stepline.executors._openai import OpenAIExecutor
from stepline.executors._reliability import CircuitOpenError

SECRET = "sk-test-0123456789abcdefghijklmnopqrstuv"


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeOpenAI]:
    """One fake OpenAI server for the module (starting one costs more than a test)."""
    with FakeOpenAI().running() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeOpenAI) -> FakeOpenAI:
    """The fake server with an empty script and request log."""
    shared_server.reset()
    return shared_server


def options(server: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {"base_url": server.base_url, "api_key": SECRET, "model": "fake-gpt", "backoff_seconds": 0.001,
            **extra}


def greeting_turns(server: FakeOpenAI) -> None:
    server.queue(
        completion(("write_output", {"content": "Hello, Ada!\n"}), ("set_var", {"name": "greeted", "value": True})),
        completion(("finish", {"summary": "wrote the greeting"})),
    )


def run(tmp_path: Path, executor: Any, **kwargs: Any) -> tuple[Engine, Any]:
    engine = Engine(project_root=tmp_path, executor=executor, mode="yolo", **kwargs)
    return engine, asyncio.run(engine.start(greeting_workflow()))


def test_workflow_runs_to_completion_through_tool_calls(tmp_path: Path, server: FakeOpenAI) -> None:
    """The model's function calls write the output file, set a variable and finish the step."""
    greeting_turns(server)
    engine, result = run(tmp_path, "openai", executor_options=options(server))
    assert result.status.value == "completed"
    assert (tmp_path / OUTPUT).read_text() == "Hello, Ada!\n"
    assert result.variables["greeted"] is True
    assert result.steps["write"].summary == "wrote the greeting"
    first = server.requests[0]
    assert first["model"] == "fake-gpt"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "greeting for Ada" in first["messages"][1]["content"]
    assert {t["function"]["name"] for t in first["tools"]} == {
        "read", "ask", "write_output", "set_var", "call_tool", "decide", "finish"}
    assert first["tools"] == server.requests[1]["tools"]  # one set for the whole run: a cacheable prefix
    second = server.requests[1]["messages"]
    assert second[2]["tool_calls"][0]["function"]["name"] == "write_output"
    assert [m["role"] for m in second[3:]] == ["tool", "tool"]
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    journal = run_dir(engine, result).journal_path.read_text()
    manifest = run_dir(engine, result).manifest_path.read_text()
    assert SECRET not in journal and SECRET not in manifest


def test_usage_and_cost_recorded_per_call(tmp_path: Path, server: FakeOpenAI) -> None:
    """Each model request is a memo:openai journal record whose usage the timeline sums."""
    greeting_turns(server)
    prices = {"fake-gpt": {"input": 1.0, "output": 2.0}}
    engine, result = run(tmp_path, "openai", executor_options=options(server, prices=prices))
    records = memo_records(engine, result, "openai")
    assert len(records) == 2
    usage = records[0]["result"]["usage"]
    assert usage["input_tokens"] == 100 and usage["output_tokens"] == 20
    assert usage["cost_usd"] == pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6)
    assert usage["model"] == "fake-gpt" and usage["latency_ms"] >= 0
    assert records[0]["args"]["payload"]["turn"] == 1 and "api_key" not in records[0]["args"]["payload"]
    totals = build_timeline(run_dir(engine, result))["usage"]["write"]
    assert totals["calls"] == 2 and totals["input_tokens"] == 200 and totals["output_tokens"] == 40


def test_retries_429_and_500_then_succeeds(tmp_path: Path, server: FakeOpenAI) -> None:
    """A rate limit and a server error are retried with growing backoff before the request succeeds."""
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    server.queue(fault(429), fault(500))
    greeting_turns(server)
    executor = OpenAIExecutor(options(server, backoff_seconds=1.0), sleep=sleep)
    _, result = run(tmp_path, executor)
    assert result.status.value == "completed"
    assert len(server.requests) == 4
    assert len(delays) == 2 and 0.75 <= delays[0] <= 1.25 and 1.5 <= delays[1] <= 2.5


def test_timeout_is_retried(tmp_path: Path, server: FakeOpenAI) -> None:
    """A reply slower than the client timeout counts as a retryable failure; the retry succeeds."""
    slow = completion(("finish", {}))
    slow.delay = 0.3
    server.queue(slow)
    greeting_turns(server)
    _, result = run(tmp_path, "openai", executor_options=options(server, timeout_seconds=0.1))
    assert result.status.value == "completed"
    assert len(server.requests) == 3
    assert (tmp_path / OUTPUT).read_text() == "Hello, Ada!\n"


def test_bad_request_is_not_retried(tmp_path: Path, server: FakeOpenAI) -> None:
    """A 400 fails the step after exactly one request, naming the server's message."""
    server.queue(fault(400, "tools[3] is invalid"))
    _, result = run(tmp_path, "openai", executor_options=options(server))
    assert result.status.value == "failed"
    assert len(server.requests) == 1
    assert "HTTP 400: tools[3] is invalid" in (result.steps["write"].error or "")


def test_breaker_opens_fails_fast_and_half_opens(server: FakeOpenAI) -> None:
    """After N failed requests calls fail without a request, until the reset time lets one trial through."""
    now = [0.0]
    executor = OpenAIExecutor(options(server, retries=0, breaker_threshold=2, breaker_reset_seconds=30),
                              clock=lambda: now[0])
    call = [{"role": "user", "content": "hi"}]

    async def scenario() -> list[str]:
        outcomes = []
        for _ in range(3):
            try:
                await executor.reliability.call(lambda: executor.send("sys", call, []))
                outcomes.append("ok")
            except CircuitOpenError:
                outcomes.append("open")
            except ExecutorError:
                outcomes.append("error")
        requests_while_open = len(server.requests)
        now[0] = 29.0
        with pytest.raises(CircuitOpenError):
            await executor.reliability.call(lambda: executor.send("sys", call, []))
        assert len(server.requests) == requests_while_open
        now[0] = 30.5
        await executor.reliability.call(lambda: executor.send("sys", call, []))
        outcomes.append(executor.reliability.breaker.state)
        await executor.aclose()
        return outcomes

    server.queue(fault(500), fault(503), completion(text="back"))
    assert asyncio.run(scenario()) == ["error", "error", "open", "closed"]
    assert len(server.requests) == 3


def test_resumed_step_does_not_call_the_model_again(tmp_path: Path, server: FakeOpenAI) -> None:
    """A run cut off after the first model answer resumes from the journal and asks only for the next turn."""
    greeting_turns(server)
    engine, result = run(tmp_path, "openai", executor_options=options(server))
    truncate_after_first(engine, result, "memo:openai")
    (tmp_path / OUTPUT).unlink()  # the process died before the write that followed the model's answer
    before = len(server.requests)
    server.queue(completion(("finish", {"summary": "done after resume"})))
    resumed = asyncio.run(Engine(project_root=tmp_path, executor="openai", executor_options=options(server),
                                 mode="yolo").resume(result.run_id))
    assert resumed.status.value == "completed"
    assert len(server.requests) == before + 1
    assert server.requests[-1]["messages"][-1]["role"] == "tool"
    assert (tmp_path / OUTPUT).read_text() == "Hello, Ada!\n"
    assert resumed.steps["write"].summary == "done after resume"


def test_exceeding_max_turns_is_a_clear_error(tmp_path: Path, server: FakeOpenAI) -> None:
    """A model that never calls finish fails the step with an error naming the step, the limit and the last
    refused call."""
    server.queue(completion(text="I think the greeting is nice."), completion(("read", {"path": "../outside.md"})))
    _, result = run(tmp_path, "openai", executor_options=options(server, max_turns=2))
    assert result.status.value == "failed"
    error = result.steps["write"].error
    assert "step 'write' (work request) did not call finish within 2 model turns" in error
    assert "it never called `finish`; the last refused call was `read`: " in error and "outside.md" in error
    assert "Use the tools" in server.requests[1]["messages"][-1]["content"]


def test_bad_tool_call_is_reported_back_to_the_model(tmp_path: Path, server: FakeOpenAI) -> None:
    """A call with missing arguments or a path outside the project becomes an error result, not a crash."""
    server.queue(completion(("write_output", {}), ("read", {"path": "../outside.md"})),
                 completion(("finish", {"summary": "gave up"})))
    _, result = run(tmp_path, "openai", executor_options=options(server))
    assert result.status.value == "completed"
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0] == "error: write_output needs content"
    assert results[1].startswith("error: path '../outside.md' is outside the project root")


def test_missing_model_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a model option or STEPLINE_OPENAI_MODEL the executor refuses to start, naming both."""
    monkeypatch.delenv("STEPLINE_OPENAI_MODEL", raising=False)
    with pytest.raises(ExecutorError, match="STEPLINE_OPENAI_MODEL"):
        OpenAIExecutor({"api_key": SECRET})


def test_options_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_BASE_URL, OPENAI_API_KEY and STEPLINE_OPENAI_MODEL fill options that are not given."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("STEPLINE_OPENAI_MODEL", "env-model")
    settings = OpenAIExecutor({"api_key": "***"}).settings
    assert (settings.base_url, settings.api_key, settings.model) == ("http://127.0.0.1:9/v1", SECRET, "env-model")
    assert SECRET not in repr(settings)


def test_prompt_holds_the_current_step_only_with_secrets_redacted() -> None:
    """The user message carries the step's content, menu, variables and context, with secret values redacted."""
    from stepline.executors import MenuOption, StepRequest
    from stepline.executors._llm import build_prompt, protocol_tools

    request = StepRequest(kind="choose", run_id="r", step_id="step-03", title="Review",
                          content="Check the PRD of {project}; the key is {api_key}.",
                          variables={"project": "demo", "api_key": SECRET, "unused": "x" * 500}, mode="yolo",
                          menu=[MenuOption("C", "Continue", default=True), MenuOption("X", "Exit")],
                          context={"telis": [{"tier": "nano", "text": "PRDs live in docs/"}]})
    system, user = build_prompt(request)
    assert "#yolo" in system and "`finish`" in system
    assert "# Step step-03: Review" in user and "Check the PRD of {project}" in user
    assert "[C] Continue (default)" in user and "PRDs live in docs/" in user and '"project": "demo"' in user
    assert SECRET not in user
    assert "x" * 500 not in user and "Others set: unused" in user  # only what the step names
    assert protocol_tools() == protocol_tools()  # no per-request part (a menu's enum) in the tools


class _Finished:
    """A session that keeps the choice the executor finished with, and runs each model call."""

    choice: str | None = None

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        self.choice = choice

    async def memo(self, label: str, payload: dict[str, Any], compute: Any) -> dict[str, Any]:
        result: dict[str, Any] = await compute()
        return result


def test_a_choice_outside_the_menu_is_sent_back(tmp_path: Path, server: FakeOpenAI) -> None:
    """finish with a key the menu does not offer is refused to the model, which then picks a valid one."""
    from stepline.executors import MenuOption, StepRequest

    server.queue(completion(("finish", {"choice": "Z"})), completion(("finish", {"choice": "X"})))
    executor = OpenAIExecutor(options(server))
    session = _Finished()
    request = StepRequest(kind="choose", run_id="r", step_id="menu", title="Menu",
                          menu=[MenuOption("C", "Continue"), MenuOption("X", "Exit")])

    async def go() -> None:
        await executor.perform(request, session)  # type: ignore[arg-type]
        await executor.aclose()

    asyncio.run(go())
    assert session.choice == "X"
    assert server.requests[1]["messages"][-1]["content"] == "error: choice must be one of C, X"


def test_a_choice_with_a_placeholder_takes_the_models_own_text(server: FakeOpenAI) -> None:
    """A choice with a ``<…>`` placeholder (a #yolo turn's ``line 12: <the user's answer>``) takes the model's text
    in its place; one that does not fit it, or none, is refused."""
    from stepline.executors import StepRequest, choice_fits

    choices = ["line 12", "line 9", "line 12: <the user's answer>", "line 9: [<key>]"]
    assert choice_fits("line 9: [A], [C]", choices) and not choice_fits("line 9: A", choices)
    assert not choice_fits("line 12: ", choices) and not choice_fits("line 7: yes", choices)
    server.queue(completion(("finish", {"choice": "line 7: yes"})), completion(("finish", {})),
                 completion(("finish", {"choice": "line 12: Stepline, as named"})))
    executor = OpenAIExecutor(options(server))
    session = _Finished()
    request = StepRequest(kind="work", run_id="r", step_id="ask", title="Ask", content="Ask.", mode="yolo",
                          choices=choices)

    async def go() -> None:
        await executor.perform(request, session)  # type: ignore[arg-type]
        await executor.aclose()

    asyncio.run(go())
    assert session.choice == "line 12: Stepline, as named"
    refused = [r["messages"][-1]["content"] for r in server.requests[1:]]
    assert refused == [f"error: choice must be one of {', '.join(choices)}"] * 2


def test_a_finish_refused_every_turn_names_the_refusal(server: FakeOpenAI) -> None:
    """A model that calls finish every turn with a key the menu does not offer fails the step with that refusal
    (not only "did not call finish"): the real cause and how often it happened."""
    from stepline.executors import MenuOption, StepRequest

    class Session:
        async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
            raise AssertionError("a refused choice must not reach the session")

        async def memo(self, label: str, payload: dict[str, Any], compute: Any) -> dict[str, Any]:
            result: dict[str, Any] = await compute()
            return result

    server.queue(*(completion(("finish", {"choice": "Z"})) for _ in range(3)))
    executor = OpenAIExecutor(options(server, max_turns=3))
    request = StepRequest(kind="choose", run_id="r", step_id="menu", title="Menu",
                          menu=[MenuOption("C", "Continue"), MenuOption("X", "Exit")])

    async def go() -> None:
        try:
            await executor.perform(request, Session())  # type: ignore[arg-type]
        finally:
            await executor.aclose()

    with pytest.raises(ExecutorError) as raised:
        asyncio.run(go())
    message = raised.value.format_message()
    assert "did not call finish within 3 model turns" in message
    assert "it called `finish` 3 times and was refused, last: choice must be one of C, X" in message
    assert "max_turns" not in (raised.value.hint or "")  # more turns would not help
