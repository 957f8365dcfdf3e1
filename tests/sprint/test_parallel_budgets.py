"""Budgets, escalations, stalls and deferral with stories running at once (`stepline sprint run -j N`): each works per
story as with -j 1, and they add up per loop — the loop's budget is shared live by the stories running at once (a
runaway story is stopped mid-call once the loop's total crosses it); several stories' questions wait at once, each
named with its story and the command that answers it, and are answered in any order."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sprint_kit import ARTIFACTS, BMAD, add_config, git, make_project

from fakes.processes import alive
from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

REPORT = 1000  # the tokens of one usage report of fake_agent.py's runaway agent


@pytest.fixture
def runaways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stories 1-1 and 1-2 build with an agent that runs away (fake_agent.py); returns the file of their pids."""
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "runaway", "1-2": "runaway"}))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("FAKE_TIMES", str(tmp_path / "times"))
    return tmp_path / "pids"


def _story_commits(root: Path) -> Counter[str]:
    log = git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)", "HEAD")
    return Counter(line.strip() for line in log.splitlines() if line.strip())


def _journal(root: Path, run_id: str) -> list[dict[str, Any]]:
    raw = (root / ".stepline" / "runs" / run_id / "journal.jsonl").read_bytes().rstrip(b"\0").decode()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def _stopped_calls(root: Path, run_id: str) -> list[dict[str, Any]]:
    return [e["data"]["result"] for e in _journal(root, run_id) if e["type"] == "CallRecorded"
            and str(e["data"].get("op")).startswith("memo:cli-agent") and e["data"]["result"].get("stopped")]


def _sprint(root: Path, capsys: pytest.CaptureFixture[str], code: int, *args: str) -> tuple[dict[str, Any], str]:
    """`stepline sprint ARGS --json -q` in ``root``, its exit ``code`` checked (what it printed shown when not): each
    story's result by key, and what it said on stderr."""
    got = run_cli(["sprint", *args, "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert got == code, (out.out[-3000:], out.err[-3000:])
    return {r["key"]: r for r in json.loads(out.out)}, out.err


def _all_stopped(pids: Path) -> bool:
    return not any(alive(int(pid)) for pid in pids.read_text().split())


def test_two_runaway_stories_share_the_loops_budget_and_are_both_stopped_mid_call(
        tmp_path: Path, agent_env: Path, runaways: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", isolation="worktree")
    limit = 30000
    add_config(root, f"budgets: {{mode: enforce, run: {{tokens: {limit}}}}}\n", "a loop budget")
    results, _ = _sprint(root, capsys, 11, "run", "-j", "2", "--max-stories", "3")
    assert {k: r["outcome"] for k, r in results.items()} == {
        "1-1-add": "deferred", "1-2-sub": "deferred", "1-3-mul": "stopped"}
    # Both were running (each streamed usage) when the loop's total crossed its budget: both stopped mid-call for
    # the loop's budget, once their sum was one usage report past it.
    spent = 0.0
    for key in ("1-1-add", "1-2-sub"):
        [stop] = _stopped_calls(root, results[key]["run_id"])
        assert stop["stopped"] == f"the loop's budget: {limit + REPORT} tokens > the {limit} left"
        assert stop["final"] is None
        assert "the agent was stopped mid-build: claude was stopped in step 'build': the loop's budget: " in \
            results[key]["summary"]
        used = results[key]["usage"]
        assert used["input_tokens"] > 0  # it ran, and what it used is counted
        spent += used["input_tokens"] + used["output_tokens"] + used["cache_read_tokens"]
    printed = REPORT * len((tmp_path / "times").read_text().splitlines())  # what the two agents streamed in all
    # The loop's total: past its budget by the report that crossed it, plus what the agents had streamed before
    # their stop landed (none or one report on an idle machine, two with its cores saturated) — never a second
    # budget's worth (each alone was let run to the whole budget before: 62,000-66,000 tokens in all).
    assert limit < spent <= limit + REPORT + 2 * 2 * REPORT, (spent, printed)
    assert spent <= printed <= spent + 2 * REPORT  # all it printed is counted, but a line cut off by the stop
    assert results["1-3-mul"]["summary"].startswith("the loop's budget is spent: ")
    assert sorted(json.loads(line)["story"] for line in agent_env.read_text().splitlines()) == ["1-1-add", "1-2-sub"]
    assert _all_stopped(runaways)  # each agent and the child it started
    assert _story_commits(root) == Counter()
    deferred = (root / ARTIFACTS / "deferred-work.md").read_text()
    assert deferred.count("deferred by the sprint loop: the agent was stopped mid-build") == 2
    board = (root / ARTIFACTS / "sprint-status.yaml").read_text()
    assert "1-1-add: ready-for-dev" in board and "1-2-sub: ready-for-dev" in board and "1-3-mul: ready-for-dev" in board


def test_two_stories_past_the_loops_budget_at_once_each_ask_their_own_question(
        tmp_path: Path, agent_env: Path, runaways: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """budgets.on_exceeded: escalate: both stopped stories wait at once; the exit message and `sprint status` name
    both questions, each with its story and the command that answers it."""
    root = make_project(tmp_path / "calc", isolation="worktree")
    add_config(root, "budgets: {mode: enforce, on_exceeded: escalate, run: {tokens: 30000}}\n", "a loop budget")
    results, err = _sprint(root, capsys, 9, "run", "-j", "2", "--max-stories", "2")
    assert {k: r["outcome"] for k, r in results.items()} == {"1-1-add": "blocked", "1-2-sub": "blocked"}
    assert _all_stopped(runaways)
    for key in results:
        run_id = results[key]["run_id"]
        assert f"Story {key} went past its budget (the agent was stopped mid-build" in results[key]["summary"]
        assert "the loop's budget: " in results[key]["summary"]
        line = next(line for line in err.splitlines() if f"ask:build-budget:{key}:1" in line)
        assert f"stepline answer {run_id} ANSWER --gate ask:build-budget:{key}:1" in line, err
    assert run_cli(["sprint", "status", "-C", str(root)]) == 0
    shown = capsys.readouterr().out
    for key in results:
        assert f"stepline answer {results[key]['run_id']} ANSWER --gate ask:build-budget:{key}:1" in shown


def test_two_stories_escalating_at_once_are_answered_in_reverse_order_each_answer_settling_its_own(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", isolation="worktree")
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:layer-1:review": "escalate: should add() accept strings?",
                                                  "1-2:layer-1:review": "escalate: should sub() go below zero?"}))
    results, err = _sprint(root, capsys, 9, "run", "-j", "2", "--max-stories", "2")
    runs = {key: r["run_id"] for key, r in results.items()}
    assert {key: r["outcome"] for key, r in results.items()} == {"1-1-add": "blocked", "1-2-sub": "blocked"}
    # Every waiting question, one line each, with its story and the command that answers it (not the first only).
    asked = [line for line in err.splitlines() if "ask:review-escalation:" in line]
    assert len(asked) == 2, err
    assert any(f"stepline answer {runs['1-1-add']} ANSWER --gate ask:review-escalation:1-1-add:1" in line
               and "should add() accept strings?" in line for line in asked)
    assert any(f"stepline answer {runs['1-2-sub']} ANSWER --gate ask:review-escalation:1-2-sub:1" in line
               and "should sub() go below zero?" in line for line in asked)
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    waiting = json.loads(capsys.readouterr().out)["waiting"]
    assert sorted((w["key"], w["gate_id"], w["run_id"]) for w in waiting) == [
        ("1-1-add", "ask:review-escalation:1-1-add:1", runs["1-1-add"]),
        ("1-2-sub", "ask:review-escalation:1-2-sub:1", runs["1-2-sub"])]

    # The second story's question first: only it goes on; the first still waits on its own question.
    assert run_cli(["answer", runs["1-2-sub"], "accept", "--gate", "ask:review-escalation:1-2-sub:1",
                    "-C", str(root)]) == 0
    capsys.readouterr()
    results, err = _sprint(root, capsys, 9, "resume")
    assert {key: r["outcome"] for key, r in results.items()} == {"1-1-add": "blocked", "1-2-sub": "committed"}
    assert [line for line in err.splitlines() if "ask:" in line and "--gate" in line] == [
        line for line in err.splitlines() if "ask:review-escalation:1-1-add:1" in line and "--gate" in line]
    assert _story_commits(root) == Counter({"1-2-sub": 1})
    gates = json.loads((root / ".stepline" / "runs" / runs["1-1-add"] / "gates.json").read_text())
    assert [(g["gate_id"], g["status"]) for g in gates] == [("ask:review-escalation:1-1-add:1", "pending")]
    assert not [e for e in _journal(root, runs["1-1-add"]) if e["type"] == "AnswerGiven"]

    # Then the first's: "fix" sends only it back to its builder.
    assert run_cli(["answer", runs["1-1-add"], "fix", "-C", str(root)]) == 0
    capsys.readouterr()
    results, _ = _sprint(root, capsys, 0, "resume")
    assert [(key, r["outcome"]) for key, r in results.items()] == [("1-1-add", "committed")]
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})
    steps = Counter((c["story"], c["step"]) for c in map(json.loads, agent_env.read_text().splitlines()))
    assert steps == Counter({("1-1-add", "build"): 1, ("1-1-add", "review"): 1, ("1-1-add", "build@2"): 1,
                             ("1-1-add", "review@2"): 1, ("1-2-sub", "build"): 1, ("1-2-sub", "review"): 1})
    told = next(c["told"] for c in map(json.loads, agent_env.read_text().splitlines()) if c["step"] == "build@2")
    assert told == "- [layer-1] should add() accept strings?"  # its own escalation, not the other story's
    for key, answer in (("1-1-add", "fix"), ("1-2-sub", "accept")):
        [given] = [e for e in _journal(root, runs[key]) if e["type"] == "AnswerGiven"]
        assert given["data"]["answer"] == answer


def test_one_story_stalls_while_the_other_commits(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", isolation="worktree", builds=1)
    config = root / "config" / "sprint.yaml"  # a stalled agent is not tried again: a person is asked at once
    config.write_text(config.read_text().replace("review: 2}", "review: 2, agent: 0}"))
    add_config(root, "stall_seconds: 1.5\n", "stall limit")
    (tmp_path / "once").mkdir()
    monkeypatch.setenv("FAKE_ONCE_DIR", str(tmp_path / "once"))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "staller"}))
    results, err = _sprint(root, capsys, 9, "run", "-j", "2", "--max-stories", "2")
    assert (results["1-1-add"]["outcome"], results["1-2-sub"]["outcome"]) == ("blocked", "committed")
    assert "the agent failed in build, not for the work's sake [stall]" in results["1-1-add"]["summary"]
    assert f"stepline answer {results['1-1-add']['run_id']} ANSWER --gate ask:build-agent:1-1-add:1:1" in err
    assert _story_commits(root) == Counter({"1-2-sub": 1})
    assert _all_stopped(tmp_path / "pids")
    # The stall is the stalled story's alone: journaled in its run, none in the other's.
    failures = {key: [e["data"]["result"]["kind"] for e in _journal(root, r["run_id"])
                      if e["type"] == "CallRecorded" and str(e["data"]["op"]).startswith("sprint:agent-failure/")]
                for key, r in results.items()}
    assert failures == {"1-1-add": ["stall"], "1-2-sub": []}
    assert run_cli(["answer", results["1-1-add"]["run_id"], "retry", "-C", str(root)]) == 0
    capsys.readouterr()
    resumed, _ = _sprint(root, capsys, 0, "resume")
    assert [(key, r["outcome"]) for key, r in resumed.items()] == [("1-1-add", "committed")]
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})


def test_a_deferred_story_does_not_stop_the_others_commit(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    root = make_project(tmp_path / "calc", isolation="worktree", builds=1)
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "stubborn"}))
    results, _ = _sprint(root, capsys, 11, "run", "-j", "2", "--max-stories", "2")
    assert (results["1-1-add"]["outcome"], results["1-2-sub"]["outcome"]) == ("deferred", "committed")
    assert "verification failed" in results["1-1-add"]["summary"]
    assert _story_commits(root) == Counter({"1-2-sub": 1})
    assert "sprint/1-1-add" in git(root, "branch", "--list", "sprint/*")  # the deferred attempt is kept
    assert not (root / "calc_add.py").exists() and (root / "calc_sub.py").is_file()
    board = (root / ARTIFACTS / "sprint-status.yaml").read_text()
    assert "1-1-add: ready-for-dev" in board and "1-2-sub: done" in board
    assert "## 1-1-add" in (root / ARTIFACTS / "deferred-work.md").read_text()
    checks = subprocess.run([sys.executable, "-m", "unittest", "discover", "-q", "-s", "tests"], cwd=root,
                            capture_output=True, text=True)
    assert checks.returncode == 0, checks.stderr


def test_a_loop_meter_stops_the_calls_of_every_story_within_it_and_leaves_with_its_last_call() -> None:
    """executors/_budget's sharing, as the loop uses it: each story's stage pool within the loop's pool."""
    from stepline.executors import Usage
    from stepline.executors._budget import CallBudget, Meters

    loop = CallBudget(tokens=3000, what="the loop's budget", pool="sprint-loop:/p")
    first = CallBudget(tokens=10000, what="the story's budget", pool="run-1/build/1", within=loop)
    second = CallBudget(tokens=10000, what="the story's budget", pool="run-2/build/1", within=loop)
    meters = Meters()
    one, two = object(), object()
    with meters.join(first) as a, meters.join(second) as b:
        assert a is not None and b is not None and a.within is b.within
        a.report(one, Usage(1500, calls=1))
        b.report(two, Usage(1400, calls=1))
        assert not a.crossed.is_set() and not b.crossed.is_set()  # 2,900 of 3,000 together; each far from its own
        b.report(two, Usage(1600, calls=1))  # a running total: 3,100 together
        assert a.crossed.is_set() and b.crossed.is_set()
        assert a.reason == b.reason == "the loop's budget: 3100 tokens > the 3000 left"
        with meters.join(first) as late:  # a call joining a stopped pool is not started
            assert late is a and late.reason is not None
    assert meters._live == {}  # the pools, the loop's too, are gone with their last calls
    with meters.join(second) as fresh:  # a later call: the loop's pool made again with what it is given
        assert fresh is not None and fresh.reason is None and fresh.within is not None
