"""What a person running the loop sees and does: a deferred story taken again (`sprint retry`), a story held back by
a deferred dependency, why a budget-stopped loop exits 11, an answer given while the loop runs, a killed loop in
`sprint status`, `sprint watch` across resumes, and `sprint run --help`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, add_config, git, make_project

from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

HERE = Path(__file__).resolve().parent


def _story_commits(root: Path) -> Counter[str]:
    return Counter(git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)").split())


def _loop_log(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (root / ".stepline" / "sprint" / "loop.jsonl").read_text().splitlines()]


def _stepline(root: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE / "crash_child.py"), "sprint", *args, "-C", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})


def test_a_deferred_story_is_taken_again_with_sprint_retry_and_one_that_needs_it_says_so(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", isolation="worktree", builds=1)
    story = root / ARTIFACTS / "1-2-sub.md"
    story.write_text(story.read_text() + "\nDepends on Story 1.1.\n")
    git(root, "commit", "-q", "-am", "1.2 depends on 1.1")
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "stubborn"}))
    assert run_cli(["sprint", "run", "-j", "2", "--max-stories", "2", "-C", str(root), "--json", "-q"]) == 11
    assert [(r["key"], r["outcome"]) for r in json.loads(capsys.readouterr().out)] == [("1-1-add", "deferred")]
    [deferred_run] = [e["run_id"] for e in _loop_log(root) if e["event"] == "story-ended"]
    # sprint status: 1-2 is held back by 1-1, deferred, and says how it goes on.
    assert run_cli(["sprint", "status", "-C", str(root)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^1-2-sub\s+ready-for-dev\s+waits: 1-1-add deferred", out, re.M), out
    assert "story 1-2-sub waits for 1-1-add, which was deferred: `stepline sprint retry 1-1-add` takes it again" in out
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    rows = {row["key"]: row for row in json.loads(capsys.readouterr().out)["entries"]}
    assert rows["1-2-sub"]["waits_for"] == ["1-1-add"] and rows["1-1-add"]["state"] == "deferred"
    # A plain run does not take the deferred story again; `sprint retry` does, from the integration branch as it is.
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root)]) == 5
    assert "`stepline sprint retry 1-1-add`" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_SPRINT", "{}")
    assert run_cli(["sprint", "retry", "1-1", "-C", str(root), "--json", "-q"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert (result["key"], result["outcome"]) == ("1-1-add", "committed") and result["run_id"] != deferred_run
    assert _story_commits(root) == Counter({"1-1-add": 1})
    # The deferred attempt is kept, out of the new run's way.
    assert git(root, "branch", "--list", "--format=%(refname:short)").split() == [
        "main", f"sprint-deferred/1-1-add/{deferred_run}"]
    assert (root / ".stepline" / "sprint" / "deferred" / f"1-1-add-{deferred_run}" / "calc_add.py").is_file()
    retried = [e for e in _loop_log(root) if e["event"] == "story-retried"]
    assert [(e["key"], e["run_id"]) for e in retried] == [("1-1-add", deferred_run)]
    # sprint watch shows the retry's loop: the new run's stages, and what this loop spent (not the deferred run's).
    assert run_cli(["sprint", "watch", "-C", str(root)]) == 0
    watched = capsys.readouterr().out
    assert watched.count("1-1-add    build          WorkflowStepStarted") == 1, watched
    spent = re.findall(r"loop budget: ([\d,]+) tokens", watched)
    assert spent and spent[-1] == f"{result['usage']['input_tokens'] + result['usage']['output_tokens']:,.0f}", watched
    # Only a deferred story is taken again.
    assert run_cli(["sprint", "retry", "1-1", "-C", str(root)]) == 5
    assert "story 1-1-add was not deferred: its latest run" in capsys.readouterr().err
    assert run_cli(["sprint", "retry", "1-3", "-C", str(root)]) == 5
    assert "story 1-3-mul was never taken by the loop" in capsys.readouterr().err


def test_the_resume_of_a_loop_its_budget_stopped_says_why_it_exits_11(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    add_config(root, "budgets: {mode: enforce, run: {tokens: 1000}}\n", "a loop budget")
    assert run_cli(["sprint", "run", "--max-stories", "2", "-C", str(root), "-q"]) == 11
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "-q"]) == 11
    err = capsys.readouterr().err
    assert ("the loop stopped before story 1-2-sub: the loop's budget is spent: 1700 tokens > the limit of 1000; "
            "raise budgets.run in config/sprint.yaml (or set budgets.mode: warn), then `stepline sprint resume` "
            "takes the stories left") in " ".join(err.split()), err


def test_an_answer_given_while_the_loop_runs_clears_the_question_and_status_says_so(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-j 2: 1-1 blocks on a review escalation while 1-2 still builds (it waits for a file); the person answers;
    `sprint status` names no question any more, and the loop's end says the answer is in."""
    root = make_project(tmp_path / "calc", layers=1, isolation="worktree")
    go_on = tmp_path / "go-on"
    loop = _stepline(root, "run", "-j", "2", "--max-stories", "2", "-q",
                     FAKE_REVIEW=json.dumps({"1-1:layer-1": "escalate: should add() accept strings?"}),
                     FAKE_BUILD_WAIT=json.dumps({"1-2": str(go_on)}))
    log = root / ".stepline" / "sprint" / "loop.jsonl"
    while loop.poll() is None and not (log.is_file() and '"outcome": "blocked"' in log.read_text()):
        time.sleep(0.05)
    assert loop.poll() is None, loop.communicate()[1][-2000:]
    [blocked] = [e for e in _loop_log(root) if e["event"] == "story-ended"]
    assert run_cli(["sprint", "status", "-C", str(root)]) == 0
    assert "`stepline answer " in capsys.readouterr().out  # waiting, named
    assert run_cli(["answer", str(blocked["run_id"]), "accept", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["waiting"] == [] and status["loop"] == "running"
    assert {r["key"]: r["state"] for r in status["entries"]}["1-1-add"] == "answered"
    assert run_cli(["sprint", "status", "-C", str(root)]) == 0
    assert "stepline answer" not in capsys.readouterr().out
    go_on.write_text("go on")
    _, err = loop.communicate(timeout=600)
    assert loop.returncode == 9, err[-2000:]
    assert err.strip().splitlines()[-1] == ("every question the loop stopped at is answered: `stepline sprint resume` "
                                            "goes on")
    assert run_cli(["sprint", "resume", "-C", str(root), "-q"]) == 0
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})


def test_status_of_a_killed_loop_says_killed_and_never_cuts_a_key(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    loop = _stepline(root, "run", "--story", "1-1", "-q", FAKE_KILL="1-1:build", FAKE_KILL_MARKER=str(tmp_path / "k"))
    loop.communicate(timeout=600)
    assert loop.returncode == -signal.SIGKILL
    monkeypatch.setenv("COLUMNS", "40")
    assert run_cli(["sprint", "status", "-C", str(root)]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == ("the sprint loop is not running: it did not end and no process drives it (killed?); "
                           "`stepline sprint resume` goes on where it stopped")
    assert re.search(r"^1-1-add\s+ready-for-dev\s+killed\s+build \(running\)", out, re.M), out
    for key in ("epic-1-retrospective", "1-2-sub", "2-1-mod"):  # whole, however narrow the terminal
        assert re.search(rf"^{key}\s", out, re.M), out
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["loop"] == "killed"


def test_watch_shows_the_whole_history_of_a_loop_across_its_resumes(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:layer-1": "escalate: should add() accept strings?"}))
    assert run_cli(["sprint", "run", "--max-stories", "2", "-C", str(root), "--json", "-q"]) == 9
    [blocked] = json.loads(capsys.readouterr().out)
    assert run_cli(["answer", blocked["run_id"], "accept", "-C", str(root)]) == 0
    assert run_cli(["sprint", "resume", "-C", str(root), "-q"]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "watch", "-C", str(root)]) == 0
    out = capsys.readouterr().out
    loops = re.findall(r"^\d\d:\d\d:\d\d loop \S+ (started|resumed) ", out, re.M)
    assert loops == ["started", "resumed"], out
    assert re.search(r"── story 1-1-add blocked: ", out) and "── story 1-1-add committed" in out
    assert re.search(r"1-1-add\s+build\s+WorkflowStepCompleted", out)  # the first loop's build, before the resume
    assert out.rstrip().endswith("loop ended: done")


def test_sprint_run_help_lists_j_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["sprint", "run", "--help"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"(?<![\w-])-j\b", out)) == 1, out
    assert "--jobs" in out and "--concurrency" in out


def test_one_story_at_a_time_a_story_whose_dependency_was_deferred_is_not_taken(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """-j 1: 1-1 is deferred; 1-2 depends on it and is not built (by this loop or the next), as `sprint status`
    says; 1-3 needs nothing and is."""
    root = make_project(tmp_path / "calc", builds=1)
    story = root / ARTIFACTS / "1-2-sub.md"
    story.write_text(story.read_text() + "\nDepends on Story 1.1.\n")
    git(root, "commit", "-q", "-am", "1.2 depends on 1.1")
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "stubborn"}))
    assert run_cli(["sprint", "run", "--max-stories", "3", "-C", str(root), "--json", "-q"]) == 11
    out = capsys.readouterr()
    assert [(r["key"], r["outcome"]) for r in json.loads(out.out)] == [
        ("1-1-add", "deferred"), ("1-3-mul", "committed")]
    assert "story 1-2-sub is not taken: a story it depends on was not committed" in out.err
    waiting = [e for e in _loop_log(root) if e["event"] == "story-waiting"]
    assert [(e["key"], e["reason"]) for e in waiting] == [("1-2-sub", "a story it depends on was not committed")]
    assert run_cli(["sprint", "run", "-C", str(root), "--json", "-q"]) == 0  # the next loop leaves it too
    out = capsys.readouterr()
    assert [r["key"] for r in json.loads(out.out)] == ["1-4-div"]
    assert "story 1-2-sub is not taken: it depends on 1-1-add, not done yet" in out.err
    waiting = [e for e in _loop_log(root) if e["event"] == "story-waiting"]
    assert (waiting[-1]["key"], waiting[-1]["reason"]) == ("1-2-sub", "it depends on 1-1-add, not done yet")
    assert [c["story"] for c in map(json.loads, agent_env.read_text().splitlines()) if c["stage"] == "build"] == [
        "1-1-add", "1-3-mul", "1-4-div"]
    assert run_cli(["sprint", "status", "-C", str(root)]) == 0
    assert re.search(r"^1-2-sub\s+ready-for-dev\s+waits: 1-1-add deferred", capsys.readouterr().out, re.M)
