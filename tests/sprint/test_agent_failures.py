"""An agent that fails for a reason outside the work — a stall, a rate limit, a login prompt — spends no build
attempt: the run says which it was; a stall is stopped at stall_seconds; a prompt only a person can pass asks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, HERE, add_config, git, make_project

from stepline.executors import Executor, StepRequest, StepSession
from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def _failures(root: Path, run_id: str) -> list[dict[str, str]]:
    raw = (root / ".stepline" / "runs" / run_id / "journal.jsonl").read_bytes().rstrip(b"\0").decode()
    return [e["data"]["result"] for e in map(json.loads, filter(str.strip, raw.splitlines()))
            if e["type"] == "CallRecorded" and str(e["data"]["op"]).startswith("sprint:agent-failure/")]


def test_a_stall_a_rate_limit_and_a_login_prompt_are_told_apart_and_spend_no_build_attempt(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from fakes.processes import alive

    root = make_project(tmp_path / "calc", layers=1, builds=1)  # one build each: a spent attempt would defer
    add_config(root, "stall_seconds: 1.5\nagent_retry_wait_seconds: 0\n", "stall limit")
    (tmp_path / "once").mkdir()
    monkeypatch.setenv("FAKE_ONCE_DIR", str(tmp_path / "once"))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "staller", "1-2": "quota", "1-3": "login"}))
    started = time.monotonic()
    assert run_cli(["sprint", "run", "--max-stories", "3", "-C", str(root), "--json"]) == 9
    out = capsys.readouterr()
    assert time.monotonic() - started < 60  # the stalled agent was stopped at its limit, not after its 120 s
    results = json.loads(out.out)
    assert [(r["key"], r["outcome"]) for r in results] == [
        ("1-1-add", "committed"), ("1-2-sub", "committed"), ("1-3-mul", "blocked")]
    runs = {r["key"]: r["run_id"] for r in results}
    [stall] = _failures(root, runs["1-1-add"])
    assert stall["kind"] == "stall" and "no output and no file change for 1.5s" in stall["error"]
    [quota] = _failures(root, runs["1-2-sub"])
    assert quota["kind"] == "rate-limit" and "429 Too Many Requests" in quota["error"]
    [login] = _failures(root, runs["1-3-mul"])
    assert login["kind"] == "permission" and "/login" in login["error"]
    assert "✗ build" not in out.err  # none is a failed build
    blocked = results[2]["summary"]
    assert "the agent failed in build, not for the work's sake [permission]" in blocked and "answer retry" in blocked
    # Nothing left running of the stalled agent (or of the others).
    assert [pid for pid in map(int, (tmp_path / "pids").read_text().split()) if alive(pid)] == []
    assert run_cli(["answer", runs["1-3-mul"], "retry", "-C", str(root)]) == 0
    assert "ask:build-agent:1-3-mul:1:1" in capsys.readouterr().out
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    # One build each: none of these failures spent the story's only build attempt.
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    rows = {row["key"]: row for row in json.loads(capsys.readouterr().out)["entries"]}
    assert [rows[k]["attempts"] for k in ("1-1-add", "1-2-sub", "1-3-mul")] == [1, 1, 1]
    # What the run says: each failure with its kind, in the timeline.
    assert run_cli(["logs", runs["1-1-add"], "-C", str(root)]) == 0
    assert "agent-failure/1: kind=stall, error=claude stalled in step 'build' [stall]" in capsys.readouterr().out


def test_a_reviewer_refused_for_a_rate_limit_is_asked_again_not_escalated(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    add_config(root, "agent_retry_wait_seconds: 0\n", "no wait")
    (tmp_path / "once").mkdir()
    monkeypatch.setenv("FAKE_ONCE_DIR", str(tmp_path / "once"))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "quota-reviewer"}))
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "committed"
    [quota] = _failures(root, result["run_id"])
    assert (quota["kind"], quota["layer"]) == ("rate-limit", "layer-1")
    reviews = [line for line in agent_env.read_text().splitlines() if '"review"' in line]
    assert len(reviews) == 2  # refused once, asked again


class LostOnce(Executor):
    """An agent whose first build is lost with its Ray worker halfway (a line appended to NOTES.md): what
    :class:`~stepline.distributed.WorkerLost` says, without Ray."""

    name = "lost-once"

    def __init__(self) -> None:
        self.builds = 0

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        from stepline.distributed import WorkerLost

        cwd = Path(request.context["project_root"])
        if request.hints.get("stage") == "build":
            self.builds += 1
            with (cwd / "NOTES.md").open("a", encoding="utf-8") as notes:
                notes.write("- story 1-1: a change made once\n")
            if self.builds == 1:
                raise WorkerLost("the Ray worker running the step died (ActorDiedError)")
            (cwd / "calc_add.py").write_text("def add(a, b):\n    return a + b\n")
            story = cwd / ARTIFACTS / "1-1-add.md"
            story.write_text(story.read_text().replace("status: ready-for-dev", "status: review"))
        await session.finish(summary="done" if request.hints.get("stage") == "build" else "none")


def test_a_build_whose_ray_worker_is_lost_is_built_again_from_the_stage_start_spending_no_attempt(
        tmp_path: Path, agent_env: Path) -> None:
    import asyncio

    from stepline import Engine
    from stepline.sprint import find_project, load_sprint_config
    from stepline.sprint._loop import LoopOptions, run_loop

    root = make_project(tmp_path / "calc", layers=1, builds=1)
    agent = LostOnce()
    engine = Engine(project_root=root, executor=agent, mode="non-interactive")
    config = load_sprint_config(root).model_copy(update={"agent_retry_wait_seconds": 0.0})
    [result] = asyncio.run(run_loop(engine, find_project(root), config, LoopOptions(story="1-1")))
    assert (result.key, result.outcome) == ("1-1-add", "committed")
    assert git(root, "show", "HEAD:NOTES.md") == "- story 1-1: a change made once\n"
    [lost] = _failures(root, result.run_id)
    assert lost["kind"] == "worker-lost" and "ActorDiedError" in lost["error"]
    assert agent.builds == 2  # built again within the one build stage


def _agent(root: Path, command: str) -> None:
    """The project's agent is ``tests/sprint/bin/<command>`` (committed: the loop needs a clean checkout)."""
    (root / "config" / "runtime.yaml").write_text(
        f"executors:\n  cli-agent: {{agent: claude, command: {HERE / 'bin' / command}, exit_grace_seconds: 5}}\n")
    git(root, "commit", "-q", "-am", f"agent: {command}")


def test_an_agent_that_crashes_at_start_is_an_agent_failure_named_with_its_stderr_and_stops_the_loop(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    _agent(root, "crasher")
    assert run_cli(["sprint", "run", "--max-stories", "3", "-C", str(root), "--json", "-q"]) == 9
    out = capsys.readouterr()
    [result] = json.loads(out.out)  # the loop stops at the first story: no story is deferred for it
    assert result["outcome"] == "blocked"
    assert "crasher crashed at start in step 'build' [crash]: it exited 1 before it reached stepline" in \
        result["summary"]
    assert "ModuleNotFoundError: No module named 'stepline_test_agent_module_that_is_not_installed'" in \
        result["summary"]
    assert "ask:build-agent:1-1-add:1:1" in out.err
    [crash] = _failures(root, result["run_id"])
    assert crash["kind"] == "crash"
    assert run_cli(["sprint", "watch", "-C", str(root)]) == 9
    watched = capsys.readouterr().out
    assert "crasher#0 err| ModuleNotFoundError" in watched and "claude#0" not in watched  # the configured command


def test_stories_in_a_row_failing_the_same_way_stop_the_loop_instead_of_each_being_deferred(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An agent that ends at once without doing anything: two stories deferred for it, then the loop stops
    (exit 8), naming the failure; the other stories are not taken."""
    root = make_project(tmp_path / "calc", layers=1, builds=1)
    _agent(root, "quitter")
    assert run_cli(["sprint", "run", "-C", str(root), "--json", "-q"]) == 8
    out = capsys.readouterr()
    assert [(r["key"], r["outcome"]) for r in json.loads(out.out)] == [
        ("1-1-add", "deferred"), ("1-2-sub", "deferred"), ("1-3-mul", "halted")]
    said = " ".join(out.err.split())
    assert ("the loop stopped: the agent failed the same way on 2 stories in a row (1-1-add, 1-2-sub): quitter "
            "exited without calling finish for step 'build': exit status 0; fix the agent") in said, said
    started = [json.loads(line)["key"] for line in (root / ".stepline" / "sprint" / "loop.jsonl").read_text()
               .splitlines() if '"story-started"' in line]
    assert started == ["1-1-add", "1-2-sub"]


def test_stories_at_once_crashing_the_same_way_stop_the_parallel_loop(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1, isolation="worktree")
    _agent(root, "crasher")
    assert run_cli(["sprint", "run", "-j", "2", "-C", str(root), "--json", "-q"]) == 8
    out = capsys.readouterr()
    outcomes = {r["key"]: r["outcome"] for r in json.loads(out.out)}
    # 1-3 may have started while 1-2 was still failing; no story after the second failure in a row is taken
    assert list(outcomes.values()).count("halted") == 1 and "1-4-div" not in [
        json.loads(line)["key"] for line in (root / ".stepline" / "sprint" / "loop.jsonl").read_text().splitlines()
        if '"story-started"' in line]
    both = {"1-1-add": "blocked", "1-2-sub": "blocked"}
    assert {k: v for k, v in outcomes.items() if v != "halted"} in (both, {**both, "1-3-mul": "blocked"})
    said = " ".join(out.err.split())
    assert "the agent failed the same way on 2 stories in a row" in said and "[crash]" in said
    assert "ask:build-agent:1-1-add:1:1" in said and "ask:build-agent:1-2-sub:1:1" in said  # both answerable
