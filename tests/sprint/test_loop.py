"""The sprint loop end to end: a real git repository, BMAD v6.11 installed, four stories, fake agent CLIs that
edit files and commit — one honest, one that claims success with no diff, one that breaks the tests, one that
never converges; SIGKILLs at several points then `sprint resume`; a worktree-isolated run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, git, make_project

from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

HERE = Path(__file__).resolve().parent
BEHAVIOURS = {"1-2": "liar", "1-3": "breaker", "1-4": "stubborn"}
FINAL_BOARD = {"epic-1": "in-progress", "1-1-add": "done", "1-2-sub": "done", "1-3-mul": "done",
               "1-4-div": "review", "epic-1-retrospective": "optional", "epic-2": "backlog", "2-1-mod": "backlog",
               "epic-2-retrospective": "optional"}


def _board(root: Path) -> dict[str, str]:
    from stepline.sprint import read_board

    return read_board(root / ARTIFACTS / "sprint-status.yaml").statuses()


def _story_commits(root: Path, rev: str = "HEAD") -> Counter[str]:
    log = git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)", rev)
    return Counter(line.strip() for line in log.splitlines() if line.strip())


def _calls(log: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _journals(root: Path) -> list[list[dict[str, object]]]:
    return [[json.loads(line) for line in (run / "journal.jsonl").read_bytes().rstrip(b"\0").decode().splitlines()
             if line.strip()] for run in sorted((root / ".stepline" / "runs").iterdir())]


def test_the_loop_commits_the_honest_story_catches_the_liar_and_the_breaker_and_defers_the_stubborn(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Review layers come from bmad-build-auto's customize.toml; every verdict is checked on disk."""
    root = make_project(tmp_path / "calc", layers=None)
    (root / "_bmad" / "custom" / "bmad-build-auto.toml").write_text(  # the team turns two layers off
        "[[workflow.review_layers]]\nid = 'verification-gap'\ninstruction = ''\n\n"
        "[[workflow.review_layers]]\nid = 'intent-alignment'\ninstruction = ''\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "review layers")
    monkeypatch.setenv("FAKE_SPRINT", json.dumps(BEHAVIOURS))
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:edge-case-hunter": "defer: add() ignores non-numbers\n"
                                                  "a remark that is not a finding"}))
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    code = run_cli(["sprint", "run", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 11, out.err
    results = {r["key"]: r for r in json.loads(out.out)}
    assert {k: r["outcome"] for k, r in results.items()} == {
        "1-1-add": "committed", "1-2-sub": "committed", "1-3-mul": "committed", "1-4-div": "deferred"}

    # One commit per committed story, on top of the plan's commit, each with the story's title and trailers.
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1, "1-3-mul": 1})
    subjects = git(root, "log", "--format=%s").splitlines()
    assert subjects == ["story 1-3-mul: Story 1-3: mul", "story 1-2-sub: Story 1-2: sub",
                        "story 1-1-add: Story 1-1: add", "review layers", "sprint planned"]
    assert git(root, "show", "--format=", "--name-only", "HEAD~2").split() == [
        f"{ARTIFACTS}/1-1-add.md", "calc_add.py", "tests/test_add.py"]  # the board is not in a story's commit
    assert "status: done" in (root / ARTIFACTS / "1-1-add.md").read_text()
    assert _board(root) == FINAL_BOARD
    # The deferred story's attempt is kept as a patch, and the checkout is back at the last good commit.
    assert git(root, "status", "--porcelain", "--", ".", f":(exclude){ARTIFACTS}") == ""
    assert not (root / "calc_div.py").exists()
    deferred = (root / ARTIFACTS / "deferred-work.md").read_text()
    assert "## 1-4-div" in deferred and "exited 1" in deferred and ".patch" in deferred
    assert "add() ignores non-numbers" in deferred  # the review's deferred finding
    patch = next((root / ".stepline" / "sprint" / "deferred").glob("1-4-div-*.patch")).read_text()
    assert "calc_div.py" in patch
    # Each agent had a private folder of its run and step (its MCP config there); none is left after its step.
    for call in _calls(agent_env):
        folder = Path(call["config"]).parent
        assert folder.parent == private and folder.name.startswith(f"stepline-agent-{call['run']}-{call['step']}-")
    assert list(private.iterdir()) == []

    # What the verifications caught: the liar's empty claim, the breaker's broken test, the stubborn three times.
    status = {}
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    status = {row["key"]: row for row in json.loads(capsys.readouterr().out)["entries"]}
    assert [status[k]["attempts"] for k in ("1-1-add", "1-2-sub", "1-3-mul", "1-4-div")] == [1, 2, 2, 3]
    assert status["1-4-div"]["state"] == "deferred" and status["1-1-add"]["state"] == "completed"
    assert (status["1-1-add"]["stage"], status["1-4-div"]["stage"]) == ("advance (completed)", "defer (completed)")
    assert status["1-1-add"]["tokens"] == 3 * 1700  # a build and two review layers: input, output, cache reads
    runs = {r["key"]: r["run_id"] for r in results.values()}
    from stepline import Engine
    from stepline.store import RunStore

    store, loader = RunStore(root / ".stepline" / "runs"), Engine(project_root=root)
    liar = loader.load(store.open(runs["1-2-sub"]))
    assert "no change besides the story file" in str(liar.steps["verify"].summary)
    breaker = loader.load(store.open(runs["1-3-mul"]))
    assert "command-1" in str(breaker.steps["verify"].summary) and breaker.steps["verify@2"].choice == "pass"
    calls = _calls(agent_env)
    assert "Use the BMAD dev skill `bmad-build-auto`" in calls[0]["prompt"]  # found on disk
    assert "What failed last time" not in calls[0]["prompt"]
    retry = next(c for c in calls if c["story"] == "1-2-sub" and c["step"] == "build@2")
    assert "no change besides the story file" in retry["told"]  # the liar is told what was caught
    reviews = [c for c in calls if c["stage"] == "review" and c["story"] == "1-1-add"]
    assert all("calc_add.py" in c["prompt"] and "Story 1-1: add" in c["prompt"] for c in reviews)  # diff + spec
    assert sorted(c["layer"] for c in reviews) == ["blind-hunter", "edge-case-hunter"]  # in parallel, each alone
    assert not [c for c in calls if c["story"] == "1-4-div" and c["stage"] == "review"]  # never reviewed
    # The liar's timeline, as `stepline logs` prints it (-f returns once the run has ended).
    assert run_cli(["logs", runs["1-2-sub"], "-f", "-C", str(root)]) == 0
    timeline = capsys.readouterr().out
    assert "check diff: FAILED no change besides the story file" in timeline
    assert "cli-agent:claude: Implemented the story and all its tests pass." in timeline
    assert "check command-1: ok" in timeline and timeline.rstrip().endswith("WorkflowCompleted")
    # A second loop finds nothing to do: committed and deferred stories are settled.
    assert run_cli(["sprint", "run", "-C", str(root), "-q"]) == 0
    assert "no story is ready-for-dev" in capsys.readouterr().out


def _child(root: Path, command: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HERE / "crash_child.py"), "sprint", command, *args, "-C", str(root),
                           "-q"], capture_output=True, text=True, timeout=300, env={**os.environ, **env})


@pytest.mark.slow
def test_sigkill_mid_build_mid_verify_mid_review_after_git_commit_and_before_the_board_then_resume(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each story committed exactly once, no finished stage or agent call repeated, the board exactly right."""
    root = make_project(tmp_path / "calc", layers=2, builds=2)
    monkeypatch.setenv("FAKE_SPRINT", json.dumps(BEHAVIOURS))
    checks_log = Path(os.environ["CHECKS_LOG"])
    kills = [("run", {"FAKE_KILL": "1-1:build", "FAKE_KILL_MARKER": str(tmp_path / "k1")}),
             ("resume", {"CHECKS_KILL_MARKER": str(tmp_path / "k2")}),
             # mid review: the second layer's agent kills the loop once the first layer's call is journaled
             ("resume", {"FAKE_KILL": "1-2:review:layer-2", "FAKE_KILL_MARKER": str(tmp_path / "k3"),
                         "FAKE_KILL_AFTER": 'review/1/0/1","op":"memo:'}),
             ("resume", {"SPRINT_KILL": "commit"}),
             ("resume", {"SPRINT_KILL": "advance"})]
    for command, env in kills:
        done = _child(root, command, **env)
        assert done.returncode == -signal.SIGKILL, (command, env, done.returncode, done.stderr[-2000:])
    final = _child(root, "resume")
    assert final.returncode == 11, final.stderr[-2000:]

    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1, "1-3-mul": 1})
    assert _board(root) == FINAL_BOARD
    journals = _journals(root)
    assert len(journals) == 4  # one run per story, each resumed, none started twice
    for journal in journals:
        completed = Counter(str(e["step_id"]) for e in journal if e["type"] == "WorkflowStepCompleted")
        assert all(n == 1 for n in completed.values()), completed
        assert journal[-1]["type"] == "WorkflowCompleted"
    # Agent calls: each (run, stage, layer) once, but the two killed halfway (they never finished) once more;
    # the review layer that had finished when its sibling was killed is not asked again.
    calls = Counter((c["run"], c["step"], c["layer"]) for c in _calls(agent_env))
    repeated = sorted((step, layer, n) for (_, step, layer), n in calls.items() if n > 1)
    assert repeated == [("build", None, 2), ("review", "layer-2", 2)], repeated
    assert sum(1 for (_, step, layer), n in calls.items() if step == "review" and layer == "layer-1") == 3
    # Checks: one run per verify stage, but the one killed halfway once more.
    verifies = sum(1 for j in journals for e in j if e["type"] == "WorkflowStepCompleted"
                   and str(e["step_id"]).startswith("verify"))
    assert len(checks_log.read_text().splitlines()) == verifies + 1
    deferred = (root / ARTIFACTS / "deferred-work.md").read_text()
    assert deferred.count("## 1-4-div") == 1


def test_a_worktree_run_leaves_the_main_checkout_clean_until_the_merge(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each story builds in its own worktree and branch; the honest one is merged, the stubborn one's branch kept."""
    root = make_project(tmp_path / "calc", layers=1, isolation="worktree", builds=1)
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-3": "stubborn"}))
    monkeypatch.setenv("FAKE_MAIN", str(root))
    start = git(root, "rev-parse", "HEAD").strip()
    code = run_cli(["sprint", "run", "--max-stories", "3", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 11, out.err
    assert [r["outcome"] for r in json.loads(out.out)] == ["committed", "committed", "deferred"]
    calls = _calls(agent_env)
    assert calls and all(c["cwd"].startswith(str(root / ".stepline" / "sprint" / "worktrees")) for c in calls)
    # What the agents saw of the main checkout while they worked: clean for the first story; for the second,
    # only the board, which the loop advanced after the first story's merge (the board is never committed).
    seen = {c["story"]: c["main_status"] for c in calls}
    assert seen["1-1-add"] == "" and seen["1-2-sub"] == seen["1-3-mul"] == f" M {ARTIFACTS}/sprint-status.yaml\n"
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})
    assert git(root, "rev-parse", "HEAD~2").strip() == start  # the stories' commits, merged on top
    assert (root / "calc_sub.py").is_file() and not (root / "calc_mul.py").exists()
    assert not (root / ".stepline" / "sprint" / "worktrees" / "1-1-add").exists()  # merged: worktree removed
    assert (root / ".stepline" / "sprint" / "worktrees" / "1-3-mul" / "calc_mul.py").is_file()  # kept
    assert git(root, "branch", "--list", "--format=%(refname:short)", "sprint/*").split() == ["sprint/1-3-mul"]
    board = _board(root)
    assert (board["1-1-add"], board["1-2-sub"], board["1-3-mul"]) == ("done", "done", "ready-for-dev")
    assert git(root, "status", "--porcelain", "--", ".", f":(exclude){ARTIFACTS}") == ""


@pytest.mark.parametrize("isolation", ["none", "worktree"])
def test_sigkill_mid_build_resume_puts_the_workspace_back_and_commits_each_change_once(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, isolation: str) -> None:
    """The agent has half done its work (a line appended to NOTES.md) when the loop is SIGKILLed; it would go on
    editing a second later. The resume puts the workspace back to where the build started (the interrupted attempt
    kept on a preserve ref) and builds again: the story's commit has the line once, and no agent is left."""
    from fakes.processes import alive

    root = make_project(tmp_path / "calc", layers=1, isolation=isolation)
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "appender"}))
    monkeypatch.setenv("FAKE_PIDS", str(pids))
    killed = subprocess.run([sys.executable, str(HERE / "crash_child.py"), "sprint", "run", "--story", "1-1", "-C",
                             str(root), "-q"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "FAKE_KILL": "1-1:build", "FAKE_KILL_MARKER": str(tmp_path / "k1")})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = _child(root, "resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    time.sleep(2)  # past the moment the killed attempt's agent would have made its late edit

    assert _story_commits(root) == Counter({"1-1-add": 1})
    notes = git(root, "show", "HEAD:NOTES.md")
    assert notes == "- story 1-1: a change made once\n"
    assert "calc_add.py" in git(root, "show", "--format=", "--name-only", "HEAD").split()
    assert git(root, "status", "--porcelain", "--", ".", f":(exclude){ARTIFACTS}") == ""
    # The interrupted attempt is kept: its files on a preserve ref, the note in it once.
    kept = git(root, "for-each-ref", "--format=%(refname)", "refs/stepline/preserve/").split()
    assert kept == ["refs/stepline/preserve/1-1-add/build/1"]
    assert git(root, "show", f"{kept[0]}:NOTES.md").count("a change made once") == 1
    # No agent is left running, and the late edit never happened anywhere.
    assert [pid for pid in map(int, pids.read_text().split()) if alive(pid)] == []
    assert "after its driver died" not in (root / "NOTES.md").read_text()
    assert [c["step"] for c in _calls(agent_env)] == ["build", "build", "review"]  # the killed build, once more


@pytest.mark.parametrize("isolation", ["none", "worktree"])
def test_an_agent_left_running_with_its_supervisor_killed_is_stopped_before_the_resume_puts_anything_back(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, isolation: str) -> None:
    """The agent kills its supervisor and the loop mid-build (both SIGKILLed: nothing is left to stop it), then
    waits until the checkout is put back and appends its line again. The resume finds it by its journaled pid,
    start time and boot id, stops its process group and waits for it before it puts anything back: the story's
    commit holds the line once, and the agent's private folder is gone."""
    from fakes.processes import alive

    root = make_project(tmp_path / "calc", layers=1, isolation=isolation)
    pids, private = tmp_path / "pids", tmp_path / "tmp"
    private.mkdir()
    for name, value in (("FAKE_SPRINT", json.dumps({"1-1": "appender"})), ("FAKE_PIDS", str(pids)),
                        ("FAKE_ORPHAN", "1"), ("FAKE_MAIN", str(root)), ("TMPDIR", str(private))):
        monkeypatch.setenv(name, value)
    killed = _child(root, "run", "--story", "1-1", FAKE_KILL="1-1:build", FAKE_KILL_MARKER=str(tmp_path / "k1"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    [orphan] = map(int, pids.read_text().split())
    assert alive(orphan)  # its supervisor died with the loop: nothing stopped it
    [run_dir] = (root / ".stepline" / "runs").iterdir()
    (private / f"stepline-agent-{run_dir.name}-build-unjournaled").mkdir()  # a driver killed before it journaled
    resumed = _child(root, "resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not alive(orphan)
    assert _story_commits(root) == Counter({"1-1-add": 1})
    assert git(root, "show", "HEAD:NOTES.md") == "- story 1-1: a change made once\n"
    [journal] = _journals(root)
    [stopped] = [e["data"]["result"]["stopped"] for e in journal if e["type"] == "CallRecorded"
                 and e["data"]["op"] == "sprint:left-agent/1"]
    assert "stopped the agent a previous driver left running" in stopped
    put_back = [e["seq"] for e in journal if e["type"] == "CallStarted" and e["data"]["op"] == "sprint:put-back/1"]
    assert put_back and put_back[0] > next(e["seq"] for e in journal if e["type"] == "CallRecorded"
                                           and e["data"]["op"] == "sprint:left-agent/1")
    assert list(private.glob("stepline-agent-*")) == []  # the killed attempt's private folder too
