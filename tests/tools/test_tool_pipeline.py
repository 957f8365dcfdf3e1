"""The tool pipeline's stages, in order, and its worker that is really stopped."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import tool_test_handlers as handlers
from tool_test_support import Events, process_gone

from stepline.errors import ToolError
from stepline.model import ToolCall
from stepline.time import frozen
from stepline.tools import (
    ToolPipeline,
    ToolPolicy,
    ToolRegistry,
    ToolSpec,
    dump_tool_results,
    load_tool_results,
    tool_gate_id,
)

OBJECT_MARKER = {"type": "object", "properties": {"marker": {"type": "string"}}, "additionalProperties": False}


def registry(**overrides: Any) -> ToolRegistry:
    """Build a registry of the test handlers; ``overrides`` replace fields of the ``touch`` spec."""
    touch = {"name": "touch", "description": "leave a marker", "handler": handlers.touch,
             "args_schema": OBJECT_MARKER, "risk": "low", **overrides}
    return ToolRegistry([
        ToolSpec(**touch),
        ToolSpec(name="sleepy", description="sleep", handler=handlers.sleepy, idempotent=True),
        ToolSpec(name="flaky", description="fail first", handler=handlers.flaky, idempotent=True),
        ToolSpec(name="flaky_once", description="not idempotent", handler=handlers.flaky),
        ToolSpec(name="boom", description="raise", handler=handlers.boom),
        ToolSpec(name="not_json", description="bad result", handler=handlers.not_json),
        ToolSpec(name="chatty", description="print", handler=handlers.chatty),
        ToolSpec(name="clock", description="time", handler=handlers.clock),
    ])


def run(pipeline: ToolPipeline, root: Path, name: str, args: dict[str, Any] | None = None, **kw: Any) -> Any:
    call = ToolCall(name=name, args=args or {}, risk=kw.pop("risk", None))
    return pipeline.run(call, step_id="s1", project_root=root, **kw)


class TestStages:
    """Each stage refuses before the next one, and a refused tool never runs."""

    def test_ok_call_runs_and_reports_started_then_completed(self, tmp_path: Path, events: Events) -> None:
        """A low-risk call with valid args runs once and emits ToolStarted then ToolCompleted."""
        result = run(ToolPipeline(registry()), tmp_path, "touch", on_event=events)
        assert result.status == "ok" and result.result == {"marker": "ran.marker"}
        assert (tmp_path / "ran.marker").exists()
        assert events.names == ["ToolStarted", "ToolCompleted"]
        assert events.items[0][1] == {"tool": "touch", "step_id": "s1", "risk": "low", "attempt": 1}

    def test_unknown_tool_is_refused_with_a_suggestion(self, tmp_path: Path, events: Events) -> None:
        """Resolve is the first stage: an unknown name is refused and the close name suggested."""
        result = run(ToolPipeline(registry()), tmp_path, "tuoch", on_event=events)
        assert result.status == "refused"
        assert "did you mean 'touch'" in (result.error or "")
        assert events.names == ["ToolFailed"]

    def test_blocklisted_tool_never_runs(self, tmp_path: Path, events: Events) -> None:
        """A blocklisted tool is refused and its side effect does not happen."""
        pipeline = ToolPipeline(registry(), ToolPolicy(blocklist=["touch"]))
        result = run(pipeline, tmp_path, "touch", on_event=events)
        assert result.status == "refused" and "blocklisted" in (result.error or "")
        assert not (tmp_path / "ran.marker").exists()
        assert "ToolStarted" not in events.names

    def test_tool_outside_a_nonempty_allowlist_never_runs(self, tmp_path: Path) -> None:
        """With an allowlist, a tool not on it is refused; an empty allowlist allows everything."""
        refused = run(ToolPipeline(registry(), ToolPolicy(allowlist=["clock"])), tmp_path, "touch")
        assert refused.status == "refused" and "allowlist" in (refused.error or "")
        assert not (tmp_path / "ran.marker").exists()
        assert run(ToolPipeline(registry(), ToolPolicy(allowlist=[])), tmp_path, "touch").status == "ok"

    def test_blocklist_wins_over_allowlist(self, tmp_path: Path) -> None:
        """A tool on both lists is refused."""
        policy = ToolPolicy(allowlist=["touch"], blocklist=["touch"])
        assert run(ToolPipeline(registry(), policy), tmp_path, "touch").status == "refused"

    def test_invalid_args_are_refused_before_running(self, tmp_path: Path) -> None:
        """Arguments that fail the JSON schema are refused with the offending path named; the tool never runs."""
        result = run(ToolPipeline(registry()), tmp_path, "touch", {"marker": 5, "extra": True})
        assert result.status == "refused"
        assert "args.marker: 5 is not of type 'string'" in (result.error or "")
        assert "'extra' was unexpected" in (result.error or "")
        assert not any(tmp_path.iterdir())

    def test_list_check_comes_before_args_check(self, tmp_path: Path) -> None:
        """A blocklisted call with bad args is refused for the blocklist (the earlier stage)."""
        result = run(ToolPipeline(registry(), ToolPolicy(blocklist=["touch"])), tmp_path, "touch", {"marker": 5})
        assert "blocklisted" in (result.error or "")

    def test_args_check_comes_before_the_risk_gate(self, tmp_path: Path, events: Events) -> None:
        """A high-risk call with bad args is refused, not blocked on a gate nobody should approve."""
        result = run(ToolPipeline(registry(risk="high")), tmp_path, "touch", {"marker": 5}, on_event=events)
        assert result.status == "refused"
        assert "ToolApprovalRequired" not in events.names

    def test_missing_project_root_is_refused(self, tmp_path: Path) -> None:
        """A project root that is not a directory is refused before anything runs."""
        assert run(ToolPipeline(registry()), tmp_path / "nope", "touch").status == "refused"


class TestRiskGate:
    """High-risk calls wait for a person; the gate id is ``tool:<name>:<step_id>``."""

    def test_high_risk_blocks_without_running(self, tmp_path: Path, events: Events) -> None:
        """Unapproved, a high-risk tool is blocked on its gate and its side effect does not happen."""
        asked: list[str] = []

        def pending(gate_id: str) -> Any:
            asked.append(gate_id)
            return "pending"

        result = run(ToolPipeline(registry(risk="high")), tmp_path, "touch", approvals=pending, on_event=events)
        assert result.status == "blocked"
        assert asked == ["tool:touch:s1"] == [tool_gate_id("touch", "s1")]
        assert events.names == ["ToolApprovalRequired"]
        assert events.items[0][1]["gate_id"] == "tool:touch:s1"
        assert not (tmp_path / "ran.marker").exists()

    def test_approved_high_risk_runs(self, tmp_path: Path) -> None:
        """Once the gate is approved the same call runs."""
        result = run(ToolPipeline(registry(risk="high")), tmp_path, "touch", approvals=lambda g: "approved")
        assert result.status == "ok" and (tmp_path / "ran.marker").exists()

    def test_rejected_high_risk_is_refused(self, tmp_path: Path) -> None:
        """A rejected gate refuses the call and the tool never runs."""
        result = run(ToolPipeline(registry(risk="high")), tmp_path, "touch", approvals=lambda g: "rejected")
        assert result.status == "refused" and "rejected at gate tool:touch:s1" in (result.error or "")
        assert not (tmp_path / "ran.marker").exists()

    def test_medium_risk_gate_is_configurable(self, tmp_path: Path) -> None:
        """Medium risk runs by default and blocks when ``medium_requires_approval`` is on."""
        assert run(ToolPipeline(registry(risk="medium")), tmp_path, "touch").status == "ok"
        strict = ToolPipeline(registry(risk="medium"), ToolPolicy(medium_requires_approval=True))
        assert run(strict, tmp_path, "touch").status == "blocked"

    def test_high_risk_without_approval_policy_runs(self, tmp_path: Path) -> None:
        """Turning ``high_requires_approval`` off lets high-risk tools run without a gate."""
        pipeline = ToolPipeline(registry(risk="high"), ToolPolicy(high_requires_approval=False))
        assert run(pipeline, tmp_path, "touch").status == "ok"

    def test_a_step_can_raise_a_tools_risk_but_not_lower_it(self, tmp_path: Path) -> None:
        """The effective risk is the higher of the tool's and the call's."""
        assert run(ToolPipeline(registry()), tmp_path, "touch", risk="high").status == "blocked"
        lowered = run(ToolPipeline(registry(risk="high")), tmp_path, "touch", risk="low")
        assert lowered.status == "blocked" and lowered.risk == "high"


class TestWorker:
    """Handlers run in a child process that is killed on timeout or cancellation."""

    def test_timed_out_tool_is_really_stopped(self, tmp_path: Path, events: Events) -> None:
        """A tool that overruns its timeout is killed: its worker process no longer exists."""
        pipeline = ToolPipeline(registry(), ToolPolicy(timeout_seconds=1.0, max_retries=0))
        result = run(pipeline, tmp_path, "sleepy", on_event=events)
        assert result.status == "timeout" and "timed out" in (result.error or "")
        pid = int((tmp_path / "worker.pid").read_text())
        assert process_gone(pid)
        assert events.names == ["ToolStarted", "ToolFailed"]

    def test_call_timeout_tightens_the_policy_timeout(self, tmp_path: Path) -> None:
        """The engine's remaining step time bounds the call even when the policy allows more."""
        result = run(ToolPipeline(registry(), ToolPolicy(max_retries=0)), tmp_path, "sleepy",
                     timeout_seconds=1.0)
        assert result.status == "timeout" and result.duration_ms < 10_000

    def test_cancelling_arun_kills_the_worker(self, tmp_path: Path) -> None:
        """Cancelling the awaiting task (a step timeout) stops the tool's process before re-raising."""
        pipeline = ToolPipeline(registry())

        async def main() -> None:
            call = ToolCall(name="sleepy")
            task = asyncio.ensure_future(pipeline.arun(call, step_id="s1", project_root=tmp_path))
            while not (tmp_path / "worker.pid").exists():
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert process_gone(int((tmp_path / "worker.pid").read_text()))

    def test_handler_exception_becomes_an_error_result(self, tmp_path: Path) -> None:
        """A bug in a handler is an ``error`` result naming the exception, not a crash of the engine."""
        result = run(ToolPipeline(registry()), tmp_path, "boom")
        assert result.status == "error" and result.error == "ValueError: boom"

    def test_result_must_be_json(self, tmp_path: Path) -> None:
        """A handler returning what tool_results.json cannot hold fails the call."""
        result = run(ToolPipeline(registry()), tmp_path, "not_json")
        assert result.status == "error" and "TypeError" in (result.error or "")

    def test_handler_prints_do_not_corrupt_the_answer_and_output_is_clipped(self, tmp_path: Path) -> None:
        """print() in a handler is harmless, and captured output is cut at ``max_output_bytes``."""
        pipeline = ToolPipeline(registry(), ToolPolicy(max_output_bytes=100))
        result = run(pipeline, tmp_path, "chatty", {"size": 500})
        assert result.status == "ok" and result.result == "fine"
        assert result.stdout.startswith("x" * 100) and "truncated 400 bytes" in result.stdout

    def test_handler_sees_the_call_time_from_the_time_provider(self, tmp_path: Path) -> None:
        """Inside the worker, stepline.time.now() is the frozen instant the call was made at."""
        with frozen("2026-05-04T03:02:01+00:00"):
            result = run(ToolPipeline(registry()), tmp_path, "clock")
        assert result.result["now"] == "2026-05-04T03:02:01.000000+00:00"
        assert result.started_at == "2026-05-04T03:02:01.000000+00:00"


class TestCommandTools:
    """A third-party tool can be a program: its argv is built from the args and run directly."""

    @staticmethod
    def pipeline(command: Any) -> ToolPipeline:
        return ToolPipeline(ToolRegistry([ToolSpec(name="say", description="print", command=command)]))

    def test_command_tool_runs_its_program(self, tmp_path: Path, events: Events) -> None:
        """The built argv runs in the project root; its exit code is the result."""
        pipeline = self.pipeline(lambda args: ["printf", "%s", args["text"]])
        result = run(pipeline, tmp_path, "say", {"text": "hi there"}, on_event=events)
        assert result.status == "ok" and result.stdout == "hi there" and result.result == {"exit_code": 0}
        assert events.names == ["ToolStarted", "ToolCompleted"]

    def test_missing_program_is_an_error_result(self, tmp_path: Path) -> None:
        """A program that does not exist fails the call; nothing is raised to the engine."""
        result = run(self.pipeline(lambda args: ["/nonexistent/prog"]), tmp_path, "say")
        assert result.status == "error" and "could not start '/nonexistent/prog'" in (result.error or "")

    def test_a_broken_argv_builder_is_an_error_result(self, tmp_path: Path) -> None:
        """A bug in the argv builder fails the call, like a bug in a handler."""
        result = run(self.pipeline(lambda args: ["echo", args["missing"]]), tmp_path, "say")
        assert result.status == "error" and result.error == "KeyError: 'missing'"
        assert run(self.pipeline(lambda args: []), tmp_path, "say").status == "error"


async def no_sleep(seconds: float) -> None:
    """A retry backoff that does not wait."""


class TestRetry:
    """Only retryable errors of idempotent tools are retried, a bounded number of times."""

    def test_retryable_error_of_idempotent_tool_is_retried_until_success(self, tmp_path: Path,
                                                                          events: Events) -> None:
        """A flaky idempotent tool succeeds on its third attempt, after two backoff sleeps."""
        sleeps: list[float] = []

        async def record(seconds: float) -> None:
            sleeps.append(seconds)

        pipeline = ToolPipeline(registry(), ToolPolicy(max_retries=3, retry_backoff_seconds=0.5), sleep=record)
        result = run(pipeline, tmp_path, "flaky", {"succeed_on": 3}, on_event=events)
        assert result.status == "ok" and result.result == {"attempts": 3}
        assert sleeps == [0.5, 1.0]
        assert events.names == ["ToolStarted", "ToolFailed", "ToolStarted", "ToolFailed", "ToolStarted",
                                "ToolCompleted"]

    def test_retries_are_bounded(self, tmp_path: Path) -> None:
        """A tool that keeps failing is tried ``max_retries + 1`` times, then fails."""
        pipeline = ToolPipeline(registry(), ToolPolicy(max_retries=2), sleep=no_sleep)
        result = run(pipeline, tmp_path, "flaky")
        assert result.status == "error" and (tmp_path / "attempts").read_text() == "3"

    def test_non_retryable_error_is_not_retried(self, tmp_path: Path) -> None:
        """An error the tool marks non-retryable fails at once."""
        pipeline = ToolPipeline(registry(), ToolPolicy(max_retries=2), sleep=no_sleep)
        assert run(pipeline, tmp_path, "flaky", {"retryable": False}).status == "error"
        assert (tmp_path / "attempts").read_text() == "1"

    def test_non_idempotent_tool_is_not_retried(self, tmp_path: Path) -> None:
        """A retryable error of a non-idempotent tool is not retried: running it twice may not be harmless."""
        pipeline = ToolPipeline(registry(), ToolPolicy(max_retries=2), sleep=no_sleep)
        assert run(pipeline, tmp_path, "flaky_once").status == "error"
        assert (tmp_path / "attempts").read_text() == "1"


def test_tool_results_round_trip_through_json(tmp_path: Path) -> None:
    """dump_tool_results writes a JSON list that load_tool_results reads back unchanged."""
    with frozen():
        results = [run(ToolPipeline(registry()), tmp_path, "touch"), run(ToolPipeline(registry()), tmp_path, "x")]
    text = dump_tool_results(results)
    assert [item["status"] for item in json.loads(text)] == ["ok", "refused"]
    assert load_tool_results(text) == results


def test_tool_error_is_what_the_registry_raises(tmp_path: Path) -> None:
    """Looking up an unknown tool directly raises ToolError (the pipeline turns it into a refusal)."""
    with pytest.raises(ToolError):
        registry().get("nope")
