"""An agent that fails for a reason outside the work — a stall, a rate limit, a login prompt — spends no build
attempt: the run says which it was; a stall is stopped at stall_seconds; a prompt only a person can pass asks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, add_config, git, make_project

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
