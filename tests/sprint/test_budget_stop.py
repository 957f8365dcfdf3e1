"""An enforced budget stops a CLI agent that runs past it mid-call: its process group is stopped within a couple of
seconds, the call is journaled as stopped (with evidence), the story is deferred or escalated, the loop goes on."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, add_config, git, make_project

from fakes.processes import alive
from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


@pytest.fixture
def runaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Story 1-1's first build never ends (fake_agent.py's ``runaway``); returns the file of its pids."""
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "runaway"}))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("FAKE_TIMES", str(tmp_path / "times"))
    return tmp_path / "pids"


def _budgeted(root: Path, budgets: str) -> None:
    add_config(root, f"budgets: {budgets}\n", "a budget")


def test_a_runaway_agent_is_stopped_mid_build_the_story_deferred_and_the_loop_goes_on(
        tmp_path: Path, agent_env: Path, runaway: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    _budgeted(root, "{mode: enforce, story: {tokens: 5000}}")
    started = time.time()
    assert run_cli(["sprint", "run", "--max-stories", "2", "-C", str(root), "--json", "-q"]) == 11
    stories = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert (stories["1-1-add"]["outcome"], stories["1-2-sub"]["outcome"]) == ("deferred", "committed")
    reason = ("the agent was stopped mid-build: claude was stopped in step 'build': the story's budget: 6000 tokens "
              "> the 5000 left")
    assert stories["1-1-add"]["summary"] == f"1-1-add deferred: {reason}"
    assert stories["1-1-add"]["usage"]["input_tokens"] >= 5400  # what it used until it was stopped is counted

    # Stopped within a couple of seconds of crossing the limit, and nothing it started is left running.
    crossed = next(float(when) for total, when in (line.split() for line in (tmp_path / "times").read_text()
                                                   .splitlines()) if float(total) > 5000)
    [pids] = [line.split() for line in runaway.read_text().splitlines()]
    deadline = time.monotonic() + 5
    while any(alive(int(pid)) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(int(pid)) for pid in pids)
    lines = (tmp_path / "times").read_text().splitlines()
    assert float(lines[-1].split()[1]) - crossed < 2.0 and crossed > started  # it printed nothing after that

    # The journal says why, the evidence records it, the ledger and the board are right.
    run_id = stories["1-1-add"]["run_id"]
    journal = [json.loads(line) for line in (root / ".stepline" / "runs" / run_id / "journal.jsonl").read_text()
               .splitlines() if line.strip()]
    [stop] = [e["data"]["result"] for e in journal if e["type"] == "CallRecorded"
              and str(e["data"].get("op")).startswith("memo:cli-agent") and e["data"]["result"].get("stopped")]
    assert stop["stopped"] == "the story's budget: 6000 tokens > the 5000 left" and stop["final"] is None
    evidence = json.loads((root / ".stepline" / "runs" / run_id / "evidence.json").read_text())
    assert any("claude was stopped in step 'build'" in e["claim"] for e in evidence)
    assert f"deferred by the sprint loop: {reason}" in (root / ARTIFACTS / "deferred-work.md").read_text()
    board = (root / ARTIFACTS / "sprint-status.yaml").read_text()
    assert "1-1-add: ready-for-dev" in board and "1-2-sub: done" in board
    changed = {line[3:] for line in git(root, "status", "--porcelain", "-uall").splitlines()}
    assert changed == {f"{ARTIFACTS}/sprint-status.yaml", f"{ARTIFACTS}/deferred-work.md"}  # the ledgers only
    assert run_cli(["logs", run_id, "-C", str(root)]) == 0
    shown = capsys.readouterr().out
    assert "STOPPED: the story's budget: 6000 tokens > the 5000 left" in shown
    assert "---| stopped for its budget" in shown and shown.count("claude#0 out| thinking") >= 6


def test_an_escalated_budget_waits_for_a_person_who_lets_the_story_go_on(
        tmp_path: Path, agent_env: Path, runaway: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    _budgeted(root, "{mode: enforce, on_exceeded: escalate, story: {tokens: 5000}}")
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 9
    [blocked] = json.loads(capsys.readouterr().out)
    assert blocked["outcome"] == "blocked" and "Story 1-1-add went past its budget (the agent was stopped" in \
        blocked["summary"]
    assert not any(alive(int(pid)) for pid in runaway.read_text().split())
    assert run_cli(["answer", blocked["run_id"], "continue", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "committed"  # past its budget, with a person's leave: no more stops
    calls = [json.loads(line) for line in agent_env.read_text().splitlines()]
    assert [c["step"] for c in calls] == ["build", "build@2", "review"]  # the stopped build is not run again
    assert "diff: no change besides the story file" in calls[1]["told"]  # what the verification after it found


def test_the_loops_budget_stops_a_runaway_agent_and_then_the_loop(
        tmp_path: Path, agent_env: Path, runaway: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    _budgeted(root, "{mode: enforce, run: {tokens: 5000}}")
    assert run_cli(["sprint", "run", "-C", str(root), "--json", "-q"]) == 11
    results = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["outcome"]) for r in results] == [("1-1-add", "deferred"), ("1-2-sub", "stopped")]
    assert results[0]["summary"].endswith("the loop's budget: 6000 tokens > the 5000 left")
    assert results[1]["summary"].startswith("the loop's budget is spent: ")
    assert not any(alive(int(pid)) for pid in runaway.read_text().split())
    assert [json.loads(line)["step"] for line in agent_env.read_text().splitlines()] == ["build"]  # nothing after


def test_a_reviewer_that_runs_past_what_the_build_left_is_stopped_and_the_story_deferred(
        tmp_path: Path, agent_env: Path, runaway: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "runaway-reviewer"}))
    root = make_project(tmp_path / "calc", layers=1)
    _budgeted(root, "{mode: enforce, story: {tokens: 3000}}")
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 11
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "deferred"  # the build's 1,700 tokens left 1,300 to the review
    assert result["summary"] == ("1-1-add deferred: a reviewer was stopped mid-review: layer-1: claude was stopped in "
                                 "step 'review': the story's budget: 2000 tokens > the 1300 left")
    assert not any(alive(int(pid)) for pid in runaway.read_text().split())
    assert git(root, "log", "--format=%(trailers:key=Stepline-Story)").strip() == ""  # nothing committed
