"""`stepline sprint watch`: the whole loop live, across stories, ending with the loop and its exit code."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sprint_kit import BMAD, add_config, git, make_project

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

HERE = Path(__file__).resolve().parent


def _stepline(root: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE / "crash_child.py"), "sprint", *args, "-C", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})


def test_watch_follows_every_story_of_the_loop_live_and_ends_with_the_loop_s_exit_code(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path / "calc", layers=1, builds=1)
    add_config(root, "budgets: {run: {cost_usd: 5}}\n", "a loop budget")
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-2": "stubborn"}))
    loop = _stepline(root, "run", "--max-stories", "2", "-q")
    while not (root / ".stepline" / "sprint" / "loop.jsonl").is_file() and loop.poll() is None:
        time.sleep(0.05)
    watcher = _stepline(root, "watch")
    out, err = watcher.communicate(timeout=600)
    loop.communicate(timeout=600)
    assert loop.returncode == 11  # a story deferred
    assert watcher.returncode == 11, err  # the loop's code: a cron job can tell
    assert loop.returncode is not None and "loop ended: deferred" in out
    lines = out.splitlines()
    assert re.match(r"\d\d:\d\d:\d\d loop sprint-\S+ started \(process \d+\): 1-1-add, 1-2-sub$", lines[0]), lines[0]
    text = "\n".join(lines)
    for key in ("1-1-add", "1-2-sub"):
        assert f"── story {key}: run run-" in text
        assert re.search(rf"^\d\d:\d\d:\d\d {key}\s+build\s+WorkflowStepCompleted", text, re.M), key
        assert re.search(rf"^\d\d:\d\d:\d\d {key}\s+build\s+claude#0 out\| ", text, re.M), key  # the agent's output
    assert re.search(r"1-1-add\s+verify\s+check command-1: ok", text)
    assert re.search(r"1-2-sub\s+verify\s+check command-1: FAILED", text)
    ended = [line for line in lines if "── story 1-1-add committed" in line]
    assert ended and "[story: 3400 tokens" in ended[0] and "; loop: 3400 tokens" in ended[0] and " left]" in ended[0]
    assert "── story 1-2-sub deferred" in text
    # The loop's budget as each agent call spends it: what is spent (only growing) and what the limit leaves.
    spent = [line for line in lines if " loop budget: " in line]
    assert all(re.search(r"^\d\d:\d\d:\d\d \S+\s+loop budget: [\d,]+ tokens, \$\d+\.\d{4} spent; \$\d+\.\d{4} of "
                         r"\$5\.0000 left$", line) for line in spent), spent
    tokens = [int(re.search(r"budget: ([\d,]+) tokens", line)[1].replace(",", "")) for line in spent]  # type: ignore[index]
    assert len(spent) >= 3 and tokens == sorted(tokens) and tokens[0] == 1700
    before_end = [line for line in lines[:lines.index(ended[0])] if " loop budget: " in line]
    assert "loop budget: 3,400 tokens" in before_end[-1]  # what the story-ended line says the loop spent
    assert lines[-1].endswith("loop ended: deferred")
    # Watching a loop that has ended shows it whole, with the same code.
    again = subprocess.run([sys.executable, str(HERE / "crash_child.py"), "sprint", "watch", "-C", str(root)],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 11 and sorted(again.stdout.splitlines()) == sorted(lines)  # (live: poll by poll)


def test_watch_of_a_killed_loop_says_it_is_not_running_and_how_to_resume(
        tmp_path: Path, agent_env: Path) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    loop = _stepline(root, "run", "--story", "1-1", "-q", FAKE_KILL="1-1:build",
                     FAKE_KILL_MARKER=str(tmp_path / "k1"))
    loop.communicate(timeout=600)
    assert loop.returncode == -signal.SIGKILL
    watcher = subprocess.run([sys.executable, str(HERE / "crash_child.py"), "sprint", "watch", "-C", str(root)],
                             capture_output=True, text=True, timeout=600)
    assert watcher.returncode == 5
    assert watcher.stderr.strip().splitlines() == [
        "error: the sprint loop is not running: it did not end and no process drives it (killed?) "
        "(`stepline sprint resume` goes on where it stopped)"]
    assert "── story 1-1-add: run run-" in watcher.stdout and "loop ended" not in watcher.stdout
    run_id = re.search(r"── story 1-1-add: run (\S+)", watcher.stdout)[1]
    one = subprocess.run([sys.executable, str(HERE / "crash_child.py"), "logs", run_id, "-f", "-C", str(root)],
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 5 and "(`stepline sprint resume` goes on where it stopped)" in one.stderr


def test_ctrl_c_stops_the_loop_says_how_it_goes_on_and_leaves_no_agent(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fakes.processes import alive

    root = make_project(tmp_path / "calc", layers=1)
    (tmp_path / "once").mkdir()
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_ONCE_DIR", str(tmp_path / "once"))
    monkeypatch.setenv("FAKE_PIDS", str(pids))
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "staller"}))  # its first build hangs
    loop = _stepline(root, "run", "--story", "1-1", "-q")
    while not (pids.is_file() and pids.read_text().endswith("\n")) and loop.poll() is None:
        time.sleep(0.05)  # until the agent has started (and hangs): its pid is written
    assert loop.poll() is None, loop.communicate()[1][-2000:]
    loop.send_signal(signal.SIGINT)
    _, err = loop.communicate(timeout=600)
    assert loop.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted; the loop goes on with `stepline sprint resume`"
    # The loop waits until nothing of the agent's process group runs before it exits.
    assert [pid for pid in map(int, pids.read_text().split()) if alive(pid)] == []
    resumed = _stepline(root, "resume", "-q")
    resumed.communicate(timeout=600)
    assert resumed.returncode == 0
    assert git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)").split() == ["1-1-add"]


def test_cost_of_the_sprint_is_what_the_loop_counted(tmp_path: Path, agent_env: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`stepline cost --sprint` weighs the stories' calls as the loop's budgets do: per story, the tokens and
    dollars the loop's log says each story spent; per stage; the executor named."""
    from stepline.interfaces.cli._app import run_cli

    root = make_project(tmp_path / "calc", layers=1, builds=1)
    assert run_cli(["sprint", "run", "--max-stories", "2", "-q", "-C", str(root)]) == 0
    capsys.readouterr()
    ended = {r["key"]: r["usage"] for r in map(json.loads, (root / ".stepline" / "sprint" / "loop.jsonl")
                                               .read_text().splitlines()) if r.get("event") == "story-ended"}
    assert run_cli(["cost", "--sprint", "--json", "-C", str(root)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["stories"]) == set(ended) == {"1-1-add", "1-2-sub"}
    for key, usage in ended.items():
        story = report["stories"][key]
        assert story["input_tokens"] + story["output_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        assert story["cost_usd"] == pytest.approx(usage["cost_usd"])
    assert list(report["executors"]) == ["cli-agent:claude"] and report["fallback_priced_models"]
    assert {step.split("/")[1] for step in report["steps"]} == {"build", "review"}
