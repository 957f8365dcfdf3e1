"""The cli-agent executor while the agent runs: its output streams into the step's log, and a call whose
streamed usage crosses its budget is stopped (its whole process group), journaled as stopped, and raised."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from fakes.processes import alive
from stepline.errors import BudgetExceeded
from stepline.executors import StepRequest, StepSession, create_executor
from stepline.executors._budget import CallBudget

BIN = Path(__file__).resolve().parent / "watch_bin"
STEPLINE = Path(sys.executable).parent / "stepline"


class LoggedSession(StepSession):
    """An in-memory session with an output log; ``memos`` plays the journal of memoised results."""

    def __init__(self, log: Path, memos: dict[str, dict[str, Any]] | None = None) -> None:
        self.log = log
        self.memos = {} if memos is None else memos
        self.finished: list[Any] = []

    async def read(self, path: str) -> str:
        return ""

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        return "yes"

    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: Any = "append") -> str:
        return path or "out.md"

    async def set_var(self, name: str, value: Any) -> None:
        pass

    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return {}

    async def decide(self, value: bool, reason: str) -> None:
        self.finished.append(("decide", value))

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        self.finished.append(("finish", summary))

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        if label not in self.memos:
            self.memos[label] = await compute()
        return self.memos[label]

    def output_log(self) -> Path | None:
        return self.log


@pytest.fixture
def spender(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake claude that spends tokens forever (see watch_bin/_watch_agent.py); returns its pids file."""
    monkeypatch.setenv("WATCH_AGENT", "spend")
    monkeypatch.setenv("WATCH_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("WATCH_TIMES", str(tmp_path / "times"))
    return tmp_path / "pids"


def _request(budget: CallBudget | None = None, step: str = "build") -> StepRequest:
    hints: dict[str, Any] = {"invocation": 0}
    if budget is not None:
        hints["budget"] = budget.to_hint()
    return StepRequest(kind="work", run_id="run-x", step_id=step, title="Build", content="Build it.", hints=hints)


def _crossed_at(times: Path, limit: float) -> float:
    """When the agent printed the message that took its total past ``limit`` (epoch seconds)."""
    for line in times.read_text(encoding="utf-8").splitlines():
        total, when = line.split()
        if float(total) > limit:
            return float(when)
    raise AssertionError(f"the agent never went past {limit}")


@pytest.mark.parametrize("ignores_term", [False, True], ids=["stops-on-sigterm", "ignores-sigterm"])
def test_an_agent_that_runs_past_its_budget_is_stopped_with_everything_it_started(
        tmp_path: Path, spender: Path, monkeypatch: pytest.MonkeyPatch, ignores_term: bool) -> None:
    """Crossing 2,000 tokens mid-call stops the agent and its child within a couple of seconds (SIGKILL after the
    grace when SIGTERM is ignored); the call is journaled as stopped with its usage; BudgetExceeded says why."""
    monkeypatch.setenv("WATCH_IGNORE_TERM", "1" if ignores_term else "0")
    executor = create_executor("cli-agent", {"agent": "claude", "command": str(BIN / "claude"), "cd": str(tmp_path),
                                             "stop_grace_seconds": 1})
    session = LoggedSession(tmp_path / "logs" / "build.log")
    budget = CallBudget(tokens=2000, what="the story's budget")
    with pytest.raises(BudgetExceeded) as caught:
        asyncio.run(asyncio.wait_for(executor.perform(_request(budget), session), timeout=60))
    stopped_at = time.time()
    assert "claude was stopped in step 'build': the story's budget: 2100 tokens > the 2000 left" in str(caught.value)
    # What it used is counted whole, the lines it printed while being stopped too.
    assert not caught.value.retryable and caught.value.usage["input_tokens"] >= 1750
    assert stopped_at - _crossed_at(tmp_path / "times", 2000) < 3.0
    pids = [int(pid) for pid in spender.read_text(encoding="utf-8").split()]
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)  # no orphan: the child went with the agent
    [record] = session.memos.values()
    assert record["stopped"] == "the story's budget: 2100 tokens > the 2000 left" and record["final"] is None
    assert record["usage"] == caught.value.usage and record["usage"]["output_tokens"] >= 350
    log = (tmp_path / "logs" / "build.log").read_text(encoding="utf-8")
    assert log.count('"type": "assistant"') >= 7
    assert log.rstrip().endswith("claude#0 ---| stopped for its budget: the story's budget: 2100 tokens > the "
                                 "2000 left")
    assert session.finished == []

    # Replayed (a resumed step), the journaled stop is raised again and no agent runs.
    spender.unlink()
    with pytest.raises(BudgetExceeded, match="2100 tokens > the 2000 left"):
        asyncio.run(executor.perform(_request(budget), LoggedSession(tmp_path / "again.log", dict(session.memos))))
    assert not spender.exists() and not (tmp_path / "again.log").exists()


def test_parallel_calls_of_one_pool_share_what_is_left(tmp_path: Path, spender: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Two reviewers sharing 3,000 tokens are both stopped once their sum crosses it (each alone is under it)."""
    pids = [tmp_path / "pids-1", tmp_path / "pids-2"]
    gate = tmp_path / "spend"  # both agents wait for it before they spend: neither is ahead by the machine's load
    monkeypatch.setenv("WATCH_GATE", str(gate))
    monkeypatch.setenv("WATCH_TOKENS", "100")
    executor = create_executor("cli-agent", {"agent": "claude", "command": str(BIN / "claude"), "cd": str(tmp_path),
                                             "stop_grace_seconds": 1})
    budget = CallBudget(tokens=3000, what="the story's budget", pool="run-x/review")
    logs = tmp_path / "review.log"

    async def started(agent: Path) -> None:
        while not agent.exists():
            await asyncio.sleep(0.02)

    async def both() -> list[Any]:
        calls = []
        for agent in pids:  # each agent reads its pids file from the environment as it starts
            os.environ["WATCH_PIDS"] = str(agent)
            calls.append(asyncio.ensure_future(executor.perform(_request(budget, "review"), LoggedSession(logs))))
            await started(agent)
        gate.touch()
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(asyncio.wait_for(both(), timeout=60))
    assert all(isinstance(r, BudgetExceeded) for r in results), results
    usages = [r.usage["input_tokens"] + r.usage["output_tokens"] for r in results]
    assert sum(usages) > 3000 and all(u < 3000 for u in usages)
    for agent in pids:
        assert not any(alive(int(pid)) for pid in agent.read_text().split())
    assert executor._meters._live == {}  # type: ignore[attr-defined]  # the pool is gone with its last call


WORKFLOW = """\
id: watched
steps:
  - id: build
    name: Build
    body: "Build the thing."
"""


def test_the_agents_output_is_in_stepline_logs_while_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`stepline run` with a CLI agent: its lines are in `stepline logs RUN` before it finishes; `logs -f`,
    started while it runs, prints them as they come, then the run's end, and exits when the run ends."""
    project = tmp_path / "project"
    (project / "config").mkdir(parents=True)
    (project / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    (project / "config" / "runtime.yaml").write_text(
        f"executors:\n  cli-agent: {{agent: claude, command: {BIN / 'claude'}, exit_grace_seconds: 5}}\n",
        encoding="utf-8")
    gate = tmp_path / "gate"
    env = {**os.environ, "WATCH_AGENT": "slow", "WATCH_GATE": str(gate), "WATCH_LINES": "3",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    run = subprocess.Popen([str(STEPLINE), "run", "flow.yaml", "--executor", "cli-agent", "--non-interactive",
                            "-C", str(project)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    follower: subprocess.Popen[str] | None = None
    try:
        runs = project / ".stepline" / "runs"
        log = _wait_for(lambda: next(iter(runs.glob("*/logs/build.log")), None) if runs.is_dir() else None)
        _wait_for(lambda: "a note on stderr" in log.read_text(encoding="utf-8") or None)
        run_id = log.parent.parent.name
        now = subprocess.run([str(STEPLINE), "logs", run_id, "-C", str(project)], env=env, capture_output=True,
                             text=True, timeout=60)
        assert now.returncode == 0, now.stderr
        lines = now.stdout.splitlines()
        assert [line.split(" out| ")[-1] for line in lines if " out| " in line] == [
            "working on part 1", "working on part 2", "working on part 3"]
        assert any(line.endswith("err| a note on stderr") for line in lines)
        assert "WorkflowCompleted" not in now.stdout and run.poll() is None  # the agent is still at work

        follower = subprocess.Popen([str(STEPLINE), "logs", run_id, "-f", "-C", str(project)], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert follower.stdout is not None
        printed: list[str] = []
        reader = threading.Thread(target=lambda: printed.extend(iter(follower.stdout.readline, "")), daemon=True)
        reader.start()
        _wait_for(lambda: sum(" out| working on part" in line for line in printed) == 3)
        assert follower.poll() is None and run.poll() is None  # following a run whose agent is still at work
        gate.write_text("go", encoding="utf-8")  # the agent finishes
        assert follower.wait(timeout=60) == 0, follower.stderr.read() if follower.stderr else ""
        reader.join(timeout=10)
        rest = "".join(printed)
        assert "claude#0 out| result: did it slowly [100 in / 20 out, $0.01]" in rest and "---| exited 0" in rest
        assert "WorkflowCompleted" in rest.rstrip().splitlines()[-1]
        raw = subprocess.run([str(STEPLINE), "logs", run_id, "--raw", "-C", str(project)], env=env,
                             capture_output=True, text=True, timeout=60)
        assert 'out| {"type": "result", "subtype": "success", "is_error": false, "result": "did it slowly"' \
            in raw.stdout
    finally:
        gate.write_text("go", encoding="utf-8")
        _, err = run.communicate(timeout=60)
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait()
    assert run.returncode == 0, err


def _wait_for(probe: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_the_agents_streamed_usage_is_read_per_cli() -> None:
    """Each CLI's usage normalizer: input is the whole prompt, its cached part included, whichever way the CLI
    counts it. Claude's repeated message usage counts once and its cache reads and writes are added to its uncached
    input; its result is the call's; codex's and qwen's session totals count only past the total the session had;
    gemini's ``stats.cached`` are cache reads; opencode sums its steps, reasoning as output."""
    from stepline.executors import Usage
    from stepline.executors.cli_agents import AGENTS, StreamedUsage

    claude = StreamedUsage(AGENTS["claude"].streamed_usage)
    message = {"id": "m1", "model": "claude-x", "usage": {"input_tokens": 10, "output_tokens": 5,
                                                          "cache_read_input_tokens": 100,
                                                          "cache_creation_input_tokens": 20}}
    for _ in range(2):  # one event per content block, the same message
        assert claude.feed(json.dumps({"type": "assistant", "message": message}))
    assert not claude.feed("plain text") and not claude.feed('{"type": "user"}')
    assert claude.usage == Usage(130, 5, 100, 20, None, 1) and claude.model == "claude-x"
    claude.feed(json.dumps({"type": "result", "total_cost_usd": 0.5,
                            "usage": {"input_tokens": 11, "output_tokens": 6}}))
    assert claude.usage == Usage(11, 6, 0, 0, 0.5, 1)
    codex = StreamedUsage(AGENTS["codex"].streamed_usage)
    codex.feed(json.dumps({"type": "turn.completed",
                           "usage": {"input_tokens": 100, "cached_input_tokens": 40, "output_tokens": 7}}))
    assert codex.usage == Usage(100, 7, 40, 0, None, 1)
    # a resumed thread's totals are its running total: the latest one counts, less the total before the call; a
    # rollout file's token_count event reads the same
    resumed = StreamedUsage(AGENTS["codex"].streamed_usage, Usage(100, 7, 40, 0, None, 1))
    resumed.feed(json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage": {
        "input_tokens": 150, "cached_input_tokens": 45, "output_tokens": 8}}}}))
    assert resumed.usage == Usage(50, 1, 5, 0, None, 1)
    resumed.feed(json.dumps({"type": "turn.completed",
                             "usage": {"input_tokens": 180, "cached_input_tokens": 50, "output_tokens": 9}}))
    assert resumed.usage == Usage(80, 2, 10, 0, None, 1)
    qwen = StreamedUsage(AGENTS["qwen"].streamed_usage, Usage(1000, 100, 800, 0, None, 1))
    for n in (1, 2):  # qwen's input_tokens hold its cached part: not added to it again
        qwen.feed(json.dumps({"type": "assistant", "message": {"id": f"q{n}", "usage": {
            "input_tokens": 50, "output_tokens": 5, "cache_read_input_tokens": 40}}}))
    assert qwen.usage == Usage(100, 10, 80, 0, None, 2)
    qwen.feed(json.dumps({"type": "result", "usage": {"input_tokens": 1100, "output_tokens": 110,
                                                      "cache_read_input_tokens": 880}}))
    assert qwen.usage == Usage(100, 10, 80, 0, None, 1)
    gemini = StreamedUsage(AGENTS["gemini"].streamed_usage)
    gemini.feed(json.dumps({"type": "result", "stats": {"input_tokens": 90, "output_tokens": 4, "cached": 60,
                                                        "input": 30, "models": {"gemini-x": {}}}}))
    assert gemini.usage == Usage(90, 4, 60, 0, None, 1) and gemini.model == "gemini-x"
    opencode = StreamedUsage(AGENTS["opencode"].streamed_usage)
    for n in (1, 2):
        opencode.feed(json.dumps({"type": "step_finish", "part": {"id": f"p{n}", "cost": 0.25, "tokens": {
            "input": 5, "output": 1, "reasoning": 1, "cache": {"read": 3 * n, "write": 0}}}}))
    assert opencode.usage == Usage(19, 4, 9, 0, 0.5, 2)


@pytest.mark.parametrize(("line", "said"), [
    ('{"type": "assistant", "message": {"content": [{"type": "text", "text": "Reading the story"}, {"type": '
     '"tool_use", "name": "Edit", "input": {"file_path": "calc.py"}}]}}',
     'Reading the story | tool Edit {"file_path": "calc.py"}'),
    ('{"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}}', "tool result: ok"),
    ('{"type": "item.completed", "item": {"type": "command_execution", "command": "pytest -q", "exit_code": 1}}',
     "$ pytest -q -> exit 1"),
    ('{"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}', "usage [10 in / 2 out]"),
    ('{"type": "tool_use", "tool_name": "read_file", "parameters": {"path": "a.py"}}',
     'tool read_file {"path": "a.py"}'),
    ('{"type": "step_finish", "part": {"tokens": {"input": 5, "output": 1}, "cost": 0.25}}',
     "usage [5 in / 1 out, $0.25]"),
    ("plain text, as printed", "plain text, as printed"),
    ("{not json", "{not json"),
])
def test_stepline_logs_says_an_agents_stream_json_events_short(line: str, said: str) -> None:
    """Each CLI's events are shown as what they are; a line that is no JSON event is shown as it is."""
    from stepline.executors.cli_agents import describe_output

    assert describe_output(line) == said


def test_a_ccw_session_done_by_a_cli_agent_has_each_tasks_output_in_stepline_logs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`ccw execute --executor cli-agent` (a fake codex): every task's agent output is in its step's log and in
    `stepline logs RUN`, said short."""
    import shutil

    from stepline.interfaces.cli._app import run_cli

    tests = Path(__file__).resolve().parents[1]
    project = tmp_path / "project"
    shutil.copytree(tests / "fixtures" / "ccw" / "project-active", project)
    config = project / "config" / "runtime.yaml"
    config.write_text(config.read_text() + "executors:\n  cli-agent: {agent: codex, mode: write}\n")
    monkeypatch.setenv("PATH", os.pathsep.join([str(tests / "fakes" / "bin"), str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    monkeypatch.setenv("FAKE_AGENT_LOG", str(tmp_path / "agents.jsonl"))
    assert run_cli(["ccw", "execute", "--resume-session", "payment", "--executor", "cli-agent", "-C", str(project),
                    "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    logs = sorted((project / ".stepline" / "runs" / run_id / "logs").glob("*.log"))
    assert len(logs) == 3 and all('"type": "turn.completed"' in log.read_text() for log in logs)
    assert run_cli(["logs", run_id, "-C", str(project)]) == 0
    shown = capsys.readouterr().out
    for log in logs:
        assert f"{log.stem:<14} codex#0 out| done with {log.stem}" in shown
    assert shown.count("codex#0 out| usage [100 in / 20 out]") == 3


@pytest.mark.parametrize("data", [b"", b"no newline", b"one\n", b"a\nb", b"\n\n",
                                  b"x" * 200_000 + b"\nyy\n" + b"z" * 70_000],
                         ids=["empty", "unterminated", "one", "two", "blank", "long"])
def test_an_agents_output_is_handed_on_line_by_line_however_it_arrives(data: bytes) -> None:
    """Lines longer than a read (200 kB of stream JSON) and a last line without a newline come whole, once."""
    from stepline.executors.cli_agents._process import _pump

    async def pump() -> tuple[list[str], list[str]]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        kept: list[str] = []
        handed: list[str] = []
        await _pump(reader, "out", kept, lambda _stream, line: handed.append(line))
        return kept, handed

    kept, handed = asyncio.run(pump())
    expected = data.decode().split("\n")
    expected = expected[:-1] if expected[-1] == "" else expected
    assert kept == handed == expected


def test_a_call_with_nothing_left_is_not_started(tmp_path: Path, spender: Path) -> None:
    """A budget already spent (an earlier layer used it) stops the call before any agent starts, saying so."""
    executor = create_executor("cli-agent", {"agent": "claude", "command": str(BIN / "claude"), "cd": str(tmp_path)})
    session = LoggedSession(tmp_path / "review.log")
    with pytest.raises(BudgetExceeded, match=r"the story's budget: nothing is left \(120 tokens over before this"):
        asyncio.run(executor.perform(_request(CallBudget(tokens=-120, what="the story's budget"), "review"), session))
    assert not spender.exists()  # no agent ran
    [record] = session.memos.values()
    assert record["usage"] == {} and record["stopped"].startswith("the story's budget: nothing is left")


def test_a_recorded_run_keeps_its_agents_output_log_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`--record` wraps the session; the agent's lines still reach the step's log."""
    from stepline.interfaces.cli._app import run_cli

    project = tmp_path / "project"
    (project / "config").mkdir(parents=True)
    (project / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    (project / "config" / "runtime.yaml").write_text(
        f"executors:\n  cli-agent: {{agent: claude, command: {BIN / 'claude'}}}\n", encoding="utf-8")
    (tmp_path / "gate").write_text("go", encoding="utf-8")
    for name, value in (("WATCH_AGENT", "slow"), ("WATCH_GATE", str(tmp_path / "gate")), ("WATCH_LINES", "2")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert run_cli(["run", "flow.yaml", "--executor", "cli-agent", "--record", str(tmp_path / "tape.yaml"),
                    "--non-interactive", "-C", str(project), "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    log = (project / ".stepline" / "runs" / run_id / "logs" / "build.log").read_text(encoding="utf-8")
    assert "out| working on part 2" in log and (tmp_path / "tape.yaml").is_file()
