"""The ``cli-agent`` executor, run against fake agent CLIs that speak MCP back to stepline."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fakes.processes import alive
from fakes.sessions import RecordingSession
from stepline import Engine
from stepline.engine import HumanChannel
from stepline.errors import (
    AgentEnvironmentError,
    AgentNeedsPermission,
    AgentRateLimited,
    AgentUnreachable,
    ExecutorError,
)
from stepline.executors import StepRequest, StepSession, create_executor
from stepline.families import load_workflow

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"

WORKFLOW = """\
id: trio
variables: {topic: owls}
steps:
  - id: outline
    name: Outline
    body: "Outline an article about {topic}. MARK-ONE"
    outputs: [out/outline.md]
  - id: draft
    name: Draft
    body: "Draft the article. MARK-TWO"
    outputs: [out/draft.md]
  - id: review
    name: Review
    body: "Review the draft. MARK-THREE"
    outputs: [out/review.md]
"""


@pytest.fixture
def agent_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the fake agent CLIs first on PATH (with this interpreter next) and log their invocations."""
    log = tmp_path / "agent-log.jsonl"
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKES), str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    monkeypatch.setenv("FAKE_AGENT_LOG", str(log))
    return log


def _invocations(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _run_workflow(project: Path, agent: str) -> Any:
    (project / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    engine = Engine(project_root=project, executor="cli-agent", executor_options={"agent": agent, "cd": str(project)},
                    human=HumanChannel(interactive=False))
    workflow = load_workflow(project / "flow.yaml", project_root=project)
    return asyncio.run(asyncio.wait_for(engine.start(workflow), timeout=120))


def _request(kind: Any = "work", **fields: Any) -> StepRequest:
    base: dict[str, Any] = {"run_id": "run-x", "step_id": "s1", "title": "Step one", "content": "Do it. MARK-S1",
                            "hints": {"output": True, "outputs": ["out.md"]}}
    return StepRequest(kind=kind, **(base | fields))


def _perform(agent: str, request: StepRequest, session: StepSession, **options: Any) -> None:
    executor = create_executor("cli-agent", {"agent": agent, "cd": os.getcwd(), **options})
    asyncio.run(asyncio.wait_for(executor.perform(request, session), timeout=60))


def test_codex_runs_a_native_workflow_through_stepline_mcp(tmp_path: Path, agent_log: Path) -> None:
    """Fake codex does three steps: outputs land via write_output, each prompt shows only its own step."""
    run = _run_workflow(tmp_path, "codex")
    assert run.status.value == "completed"
    assert (tmp_path / "out" / "outline.md").read_text(encoding="utf-8") == \
        "codex did outline: Outline an article about owls. MARK-ONE\n"
    assert (tmp_path / "out" / "review.md").read_text(encoding="utf-8").startswith("codex did review")
    calls = _invocations(agent_log)
    assert len(calls) == 3
    argv = calls[0]["argv"]
    assert argv[:5] == ["exec", "--json", "--skip-git-repo-check", "-C", str(tmp_path.resolve())]
    assert argv[argv.index("-s") + 1] == "workspace-write" and argv[-1] == "-"
    assert calls[0]["url"].startswith("http://127.0.0.1:") and calls[0]["url"] == calls[0]["env_url"]
    assert "MARK-ONE" in calls[0]["prompt"] and "MARK-TWO" not in calls[0]["prompt"]
    assert "MARK-TWO" in calls[1]["prompt"] and "MARK-THREE" not in calls[1]["prompt"]
    assert run.steps["draft"].summary == "codex finished draft"


def test_claude_runs_a_native_workflow_with_an_mcp_config_file(tmp_path: Path, agent_log: Path) -> None:
    """Fake claude (stream-JSON) completes the workflow; it is given --mcp-config and write permissions."""
    run = _run_workflow(tmp_path, "claude")
    assert run.status.value == "completed"
    assert (tmp_path / "out" / "draft.md").read_text(encoding="utf-8") == \
        "claude did draft: Draft the article. MARK-TWO\n"
    argv = _invocations(agent_log)[0]["argv"]
    assert argv[:4] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert "--mcp-config" in argv and argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert argv[argv.index("--allowedTools") + 1] == "mcp__stepline"


@pytest.mark.parametrize("agent", ["gemini", "qwen", "opencode"])
def test_other_agents_report_their_session_and_usage(agent: str, agent_log: Path) -> None:
    """gemini, qwen and opencode finish the step over MCP; their session id is recorded under the execution id (with
    qwen, whose ``result`` line reports the session's running usage, that total too)."""
    session = RecordingSession()
    _perform(agent, _request(), session, execution_id="E1")
    assert session.calls[0] == ("write_output", f"{agent} did s1: Do it. MARK-S1\n")
    known: dict[str, Any] = {"agent": agent, "session_id": f"{agent}-session-s1"}
    if agent == "qwen":
        known["usage"] = {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 0, "cache_write_tokens": 0}
    assert ("set_var", "cli_session:E1", known) in session.calls
    assert session.calls[-1] == ("finish", None, f"{agent} finished s1")
    record = session.memos[f"cli-agent:{agent}"]
    assert record["usage"]["input_tokens"] > 0 and record["text"] == "done with s1"


def test_fork_and_resume_continue_the_recorded_sessions(agent_log: Path) -> None:
    """A fork resumes the parent's native session with --fork-session; codex resume uses `exec … resume ID -`, and
    as codex reports the thread's running usage, its recorded total is taken off and the new total recorded."""
    before = {"input_tokens": 70.0, "output_tokens": 15.0, "cached_input_tokens": 0.0}  # fake codex reports 100/20
    variables = {"cli_session:A": {"agent": "claude", "session_id": "claude-native-A"},
                 "cli_session:C": {"agent": "codex", "session_id": "codex-native-C", "usage": before}}
    forked = RecordingSession()
    _perform("claude", _request(variables=variables, hints={"cli_execution": {
        "id": "B", "strategy": "fork", "resume_from": "A"}}), forked)
    resumed = RecordingSession()
    _perform("codex", _request(variables=variables, hints={"cli_execution": {
        "strategy": "resume", "resume_from": "C"}}), resumed)
    claude_argv, codex_argv = (call["argv"] for call in _invocations(agent_log))
    assert claude_argv[-3:] == ["--resume", "claude-native-A", "--fork-session"]
    assert ("set_var", "cli_session:B", {"agent": "claude", "session_id": "claude-session-s1"}) in forked.calls
    assert codex_argv[-3:] == ["resume", "codex-native-C", "-"]
    assert resumed.memos["cli-agent:codex"]["usage"] == {"input_tokens": 30, "output_tokens": 5,
                                                         "cache_read_tokens": 0, "cache_write_tokens": 0}
    assert ("set_var", "cli_session:C", {"agent": "codex", "session_id": "codex-native-C", "usage": {
        "input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 0, "cache_write_tokens": 0}}) in resumed.calls


def test_unknown_parent_execution_is_a_clear_error(agent_log: Path) -> None:
    """Resuming an execution id nobody recorded names the id instead of starting a fresh session silently."""
    with pytest.raises(ExecutorError, match="execution id 'missing'"):
        _perform("claude", _request(hints={"cli_execution": {"strategy": "resume", "resume_from": "missing"}}),
                 RecordingSession())


def test_a_decision_runs_in_analysis_mode_and_ends_with_decide(agent_log: Path) -> None:
    """A decide request runs codex read-only and its decide call ends the request."""
    session = RecordingSession()
    _perform("codex", _request("decide", condition="the draft exists", hints={}), session)
    argv = _invocations(agent_log)[0]["argv"]
    assert argv[argv.index("-s") + 1] == "read-only"
    assert session.calls == [("decide", True, "fake says yes to the draft exists")]
    assert "analysis mode" in _invocations(agent_log)[0]["prompt"]


def test_a_resumed_step_replays_the_journaled_agent_run(agent_log: Path) -> None:
    """With the agent run journaled, performing again replays its calls and does not start the agent twice."""
    memos: dict[str, dict[str, Any]] = {}
    first, second = RecordingSession(memos), RecordingSession(memos)
    _perform("codex", _request(), first)
    _perform("codex", _request(), second)
    assert len(_invocations(agent_log)) == 1
    assert second.calls == first.calls


def test_a_missing_cli_names_it_and_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without gemini on PATH the error names the CLI and the install command."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ExecutorError) as caught:
        _perform("gemini", _request(), RecordingSession())
    assert "gemini" in caught.value.message and "@google/gemini-cli" in caught.value.format_message()


def test_an_agent_that_exits_without_finish_fails_retryably(agent_log: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that never calls finish is a retryable ExecutorError carrying its stderr."""
    monkeypatch.setenv("FAKE_AGENT_BEHAVIOR", "no-finish")
    with pytest.raises(ExecutorError, match=r"without calling finish.*I could not do it") as caught:
        _perform("claude", _request(), RecordingSession())
    assert caught.value.retryable


@pytest.mark.parametrize(("says", "error", "kind"), [
    ("API Error: 429 Too Many Requests", AgentRateLimited, "rate-limit"),
    ("You exceeded your current quota, please check your plan and billing details", AgentRateLimited, "rate-limit"),
    ("Error: connect ECONNREFUSED 127.0.0.1:443", AgentUnreachable, "connection"),
    ("Invalid API key · Please run /login", AgentNeedsPermission, "permission"),
])
def test_a_failure_outside_the_work_is_classified(says: str, error: type[AgentEnvironmentError], kind: str,
                                                  agent_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rate limit or quota, an unreachable endpoint, a login prompt: each its own error class, its kind in the
    message; a login names what the user must set, and is not retried as it is."""
    monkeypatch.setenv("FAKE_AGENT_BEHAVIOR", "no-finish")
    monkeypatch.setenv("FAKE_AGENT_SAYS", says)
    with pytest.raises(error, match=rf"\[{kind}\]: {re.escape(says)}") as caught:
        _perform("claude", _request(), RecordingSession())
    assert caught.value.kind == kind and caught.value.retryable == (kind != "permission")
    if kind == "permission":
        assert "ANTHROPIC_API_KEY" in str(caught.value)


def test_a_stall_is_stopped_at_its_limit_and_journaled_as_one(tmp_path: Path, agent_log: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that prints nothing and changes no file is stopped at stall_seconds, not at its timeout; the
    step's failure in the journal says it was a stall."""
    monkeypatch.setenv("FAKE_AGENT_BEHAVIOR", "hang")
    monkeypatch.setenv("FAKE_AGENT_PIDS", str(tmp_path / "pids"))
    (tmp_path / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    engine = Engine(project_root=tmp_path, executor="cli-agent", human=HumanChannel(interactive=False),
                    executor_options={"agent": "codex", "cd": str(tmp_path), "stall_seconds": 1.5,
                                      "timeout_seconds": 60})
    started = time.monotonic()
    run = asyncio.run(engine.start(load_workflow(tmp_path / "flow.yaml", project_root=tmp_path)))
    assert run.status.value == "failed" and time.monotonic() - started < 30
    assert "codex stalled in step 'outline' [stall]: no output and no file change for 1.5s" in run.error
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert not any(alive(pid) for pid in pids)


def test_a_timeout_kills_the_agent_and_its_children(agent_log: Path, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """When the agent overruns its timeout its whole process group is killed."""
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("FAKE_AGENT_BEHAVIOR", "hang")
    monkeypatch.setenv("FAKE_AGENT_PIDS", str(pids_file))
    with pytest.raises(ExecutorError, match="within 3s") as caught:
        _perform("codex", _request(), RecordingSession(), timeout_seconds=3)
    assert caught.value.retryable
    pids = [int(pid) for pid in pids_file.read_text(encoding="utf-8").split()]
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)


