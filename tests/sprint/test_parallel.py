"""Parallel stories (`stepline sprint run -j N`): stories build at once, each in its own worktree; a story that
depends on an unfinished one waits; merges land one at a time in sprint order, verified again on the merged
result; a change that conflicts with the moved integration branch is built again on it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, git, make_project

from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def _story_commits(root: Path) -> Counter[str]:
    log = git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)", "HEAD")
    return Counter(line.strip() for line in log.splitlines() if line.strip())


def _loop_log(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (root / ".stepline" / "sprint" / "loop.jsonl").read_text().splitlines()]


def test_independent_stories_build_at_once_a_dependent_one_waits_and_each_lands_once(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", isolation="worktree")
    story = root / ARTIFACTS / "1-3-mul.md"
    story.write_text(story.read_text() + "\nDepends on Story 1.1 (it uses add).\n")
    git(root, "commit", "-q", "-am", "1.3 depends on 1.1")
    code = run_cli(["sprint", "run", "-j", "3", "--max-stories", "4", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert sorted(r["outcome"] for r in json.loads(out.out)) == ["committed"] * 4
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1, "1-3-mul": 1, "1-4-div": 1})
    events = _loop_log(root)
    order = [(e["event"], e["key"]) for e in events if e["event"] in ("story-started", "story-ended")]
    # 1-1, 1-2 and 1-4 start before any ends; 1-3 starts only after 1-1 ended (and is done on the board)
    starts = [k for ev, k in order[:3]]
    assert [ev for ev, _ in order[:3]] == ["story-started"] * 3 and starts == ["1-1-add", "1-2-sub", "1-4-div"]
    assert order.index(("story-started", "1-3-mul")) > order.index(("story-ended", "1-1-add"))
    assert any(e["event"] == "story-waiting" and e["key"] == "1-3-mul" and "1-1-add" in str(e["reason"])
               for e in events)
    # The integration branch: one commit per story, in a line, its checks passing.
    assert git(root, "rev-list", "--count", "--merges", "HEAD").strip() == "0"
    assert all((root / f"calc_{name}.py").is_file() for name in ("add", "sub", "mul", "div"))
    assert git(root, "branch", "--list", "sprint/*").strip() == ""
    assert git(root, "status", "--porcelain", "--", ".", f":(exclude){ARTIFACTS}").strip() == ""
    assert run_cli(["sprint", "watch", "-C", str(root)]) == 0  # the loop ended: shown whole
    assert "story 1-3-mul waits: it depends on 1-1-add, not done yet" in capsys.readouterr().out


def test_a_change_that_conflicts_with_an_earlier_merge_is_built_again_on_it_and_lands_once(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Both stories append to NOTES.md (not declared): the second to merge conflicts, is built again on the new
    integration branch (the reason in its record) and lands; NOTES.md holds each story's line once."""
    root = make_project(tmp_path / "calc", isolation="worktree")
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "appender", "1-2": "appender"}))
    code = run_cli(["sprint", "run", "-j", "2", "--max-stories", "2", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})
    notes = (root / "NOTES.md").read_text().splitlines()
    assert sorted(notes) == ["- story 1-1: a change made once", "- story 1-2: a change made once"]
    journals = [(root / ".stepline" / "runs" / r["run_id"] / "journal.jsonl").read_text()
                for r in json.loads(out.out)]
    rebuilt = [j for j in journals if '"choice":"rebuild"' in j]  # the one that merged second
    assert len(rebuilt) == 1 and "conflicts with the integration branch" in rebuilt[0]
    assert '"step_id":"build@2"' in rebuilt[0] and '"step_id":"merge@2"' in rebuilt[0]


def test_a_conflict_sends_a_story_back_to_build_with_its_fixed_findings_and_a_new_base_s_budgets(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Two builds and two review rounds each. 1-2 spends both before its merge conflicts with 1-1's (both add a
    line to NOTES.md): it is not deferred for the conflict but built again on the new base, told the review finding
    it fixed; its rebuild's review sends it back once more (a review round of that build), and it lands."""
    root = make_project(tmp_path / "calc", isolation="worktree", builds=2)
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "noter", "1-2": "noter"}))
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-2:layer-1:review": "patch: sub() needs a docstring",
                                                  "1-2:layer-1:review@3": "patch: sub() needs a doctest"}))
    code = run_cli(["sprint", "run", "-j", "2", "--max-stories", "2", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert {r["key"]: r["outcome"] for r in json.loads(out.out)} == {"1-1-add": "committed", "1-2-sub": "committed"}
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})
    assert sorted((root / "NOTES.md").read_text().splitlines()) == [
        "- story 1-1: a change made once", "- story 1-2: a change made once"]
    builds = {c["step"]: c for c in map(json.loads, agent_env.read_text().splitlines())
              if c["story"] == "1-2-sub" and c["stage"] == "build"}
    assert sorted(builds) == ["build", "build@2", "build@3", "build@4"]
    rebuild = builds["build@3"]["prompt"]  # after the conflict: the conflict to fix, the finding kept fixed
    assert "conflicts with the integration branch" in builds["build@3"]["told"]
    assert "Review findings of earlier rounds (fix them, and keep them fixed)" in rebuild
    assert "- [layer-1] sub() needs a docstring" in rebuild
    assert "sub() needs a doctest" in builds["build@4"]["told"] and "needs a docstring" in builds["build@4"]["prompt"]


def test_a_rebase_a_crash_cut_short_is_put_away_before_the_merge_and_the_story_lands_once(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The story's worktree holds the state of a rebase killed as it began (git can neither go on with it nor
    abort it): the merge puts it away and lands the story, where it took it for a conflict and built the story
    again, forever."""
    root = make_project(tmp_path / "calc", isolation="worktree")
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-2": "stale-rebase-reviewer"}))
    code = run_cli(["sprint", "run", "-j", "2", "--max-stories", "2", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert sorted((r["key"], r["outcome"]) for r in json.loads(out.out)) == [
        ("1-1-add", "committed"), ("1-2-sub", "committed")]
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})
    builds = [c for c in map(json.loads, agent_env.read_text().splitlines()) if c["stage"] == "build"]
    assert len(builds) == 2  # none built again


def test_a_story_that_finishes_first_waits_for_an_earlier_one_still_building_and_lands_after_it(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """-j 2: 1-1 builds slower than 1-2; 1-2 finishes first and waits, so the merges land in sprint order."""
    root = make_project(tmp_path / "calc", isolation="worktree")
    monkeypatch.setenv("FAKE_BUILD_DELAY", json.dumps({"1-1": 3}))
    code = run_cli(["sprint", "run", "-j", "2", "--max-stories", "2", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert [r["outcome"] for r in json.loads(out.out)] == ["committed"] * 2
    assert git(root, "log", "--format=%s", "-2").splitlines() == ["story 1-2-sub: Story 1-2: sub",
                                                                 "story 1-1-add: Story 1-1: add"]
    reviewed = [json.loads(line)["story"] for line in agent_env.read_text().splitlines() if '"review"' in line]
    assert reviewed == ["1-2-sub", "1-1-add"]  # 1-2 was ready to merge first: it waited for 1-1


def test_a_story_that_blocks_on_a_question_does_not_hold_up_a_later_one_s_merge(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """1-1 builds slower, then blocks on a person's answer: it leaves the merge order, 1-2 lands meanwhile; once
    answered, the resume lands 1-1 on top of it."""
    root = make_project(tmp_path / "calc", isolation="worktree")
    monkeypatch.setenv("FAKE_BUILD_DELAY", json.dumps({"1-1": 2}))
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:layer-1": "escalate: should add() accept strings?"}))
    code = run_cli(["sprint", "run", "-j", "2", "--max-stories", "2", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 9, out.err
    results = {r["key"]: r for r in json.loads(out.out)}
    assert {k: r["outcome"] for k, r in results.items()} == {"1-1-add": "blocked", "1-2-sub": "committed"}
    assert _story_commits(root) == Counter({"1-2-sub": 1})
    assert run_cli(["answer", results["1-1-add"]["run_id"], "accept", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    assert git(root, "log", "--format=%s", "-2").splitlines() == ["story 1-1-add: Story 1-1: add",
                                                                 "story 1-2-sub: Story 1-2: sub"]


@pytest.mark.parametrize("fails", [1, 2])
def test_a_failed_git_worktree_add_is_tried_again_once_and_said_with_git_s_error_line(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        fails: int) -> None:
    """git refuses the story's `worktree add` (a lock another story's git holds, as at -j 4) ``fails`` times, after
    its progress line: once, the loop tries again and the story lands; twice, the story fails naming git's error."""
    import os
    import shutil

    root = make_project(tmp_path / "calc", isolation="worktree")
    wrapper, counter = tmp_path / "gitbin" / "git", tmp_path / "worktree-adds"
    wrapper.parent.mkdir()
    wrapper.write_text(f"""#!/bin/sh
case " $* " in *" worktree add "*)
  n=$(cat {counter} 2>/dev/null || echo 0)
  if [ "$n" -lt {fails} ]; then
    echo $((n + 1)) > {counter}
    echo "Preparing worktree (new branch 'sprint/1-1-add')" >&2
    echo "fatal: cannot lock ref 'refs/heads/sprint/1-1-add': File exists." >&2
    exit 128
  fi;;
esac
exec {shutil.which("git")} "$@"
""")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    code = run_cli(["sprint", "run", "-j", "2", "--max-stories", "1", "-C", str(root), "--json", "-q"])
    [result] = json.loads(capsys.readouterr().out)
    journal = (root / ".stepline" / "runs" / result["run_id"] / "journal.jsonl").read_text()
    assert "Preparing worktree" not in journal
    if fails == 1:
        assert (code, result["outcome"]) == (0, "committed")
        assert '"retried":"fatal: cannot lock ref' in journal
        evidence = json.loads((root / ".stepline" / "runs" / result["run_id"] / "evidence.json").read_text())
        assert any(e["claim"].startswith("baseline: the story's worktree was made at the second try; the first "
                                         "failed: fatal: cannot lock ref") for e in evidence)
        assert _story_commits(root) == Counter({"1-1-add": 1})
    else:
        assert (code, result["outcome"]) == (8, "failed")
        assert result["summary"].endswith("cannot make the story's worktree "
                                          f"{root / '.stepline' / 'sprint' / 'worktrees' / '1-1-add'}: fatal: cannot "
                                          "lock ref 'refs/heads/sprint/1-1-add': File exists. (tried twice; first: "
                                          "fatal: cannot lock ref 'refs/heads/sprint/1-1-add': File exists.)"), result


def test_more_than_one_story_at_once_needs_worktrees(tmp_path: Path, agent_env: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc")
    assert run_cli(["sprint", "run", "-j", "2", "-C", str(root)]) == 2
    err = capsys.readouterr().err
    assert "needs isolation: worktree" in err and "Traceback" not in err
    assert not (root / ".stepline" / "runs").exists() or not any((root / ".stepline" / "runs").iterdir())


def _agents_in(root: Path) -> list[int]:
    """Processes working in the project (an agent's cwd is its story's worktree)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(proc.joinpath("cwd").readlink()).startswith(str(root / ".stepline")):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize(("kill", "at"), [("ff", "1"), ("ff", "2"), ("land", "1")])
def test_sigkill_with_four_stories_at_once_mid_merge_then_resume_commits_each_once(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, kill: str, at: str) -> None:
    """-j 4: the loop is SIGKILLed right after the integration branch moved to the ``at``-th story (the journal does
    not know yet) — or once that merge has removed the story's worktree and branch too — while the others build,
    review or wait to merge; the resume lands each story once (a worktree its own merge removed is no
    disagreement), builds no change twice (1-4 appends to NOTES.md), leaves no agent running and an integration
    branch whose checks pass."""
    import os
    import signal
    import subprocess
    import sys
    import time

    here = Path(__file__).resolve().parent
    root = make_project(tmp_path / "calc", isolation="worktree")
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-4": "appender"}))
    child = [sys.executable, str(here / "crash_child.py"), "sprint"]
    killed = subprocess.run([*child, "run", "-j", "4", "--max-stories", "4", "-C", str(root), "-q"],
                            capture_output=True, text=True, timeout=180,
                            env={**os.environ, "SPRINT_KILL": kill, "SPRINT_KILL_AT": at})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert _story_commits(root).total() == int(at)  # the kill came after the branch moved
    resumed = subprocess.run([*child, "resume", "-C", str(root), "-q"], capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    time.sleep(1)
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1, "1-3-mul": 1, "1-4-div": 1})
    assert git(root, "rev-list", "--count", "--merges", "HEAD").strip() == "0"
    assert (root / "NOTES.md").read_text() == "- story 1-4: a change made once\n"
    assert _agents_in(root) == []
    assert git(root, "branch", "--list", "sprint/*").strip() == ""
    checks = subprocess.run([sys.executable, "-m", "unittest", "discover", "-q", "-s", "tests"], cwd=root,
                            capture_output=True, text=True)
    assert checks.returncode == 0, checks.stderr
    assert git(root, "status", "--porcelain", "--", ".", f":(exclude){ARTIFACTS}").strip() == ""


def test_a_story_whose_file_list_names_a_file_a_running_story_declares_waits_for_it(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", isolation="worktree")
    for name in ("1-1-add", "1-2-sub"):
        story = root / ARTIFACTS / f"{name}.md"
        story.write_text(story.read_text() + "\n### File List\n\n- `calc_shared.py`\n- tests/test_shared.py\n")
    git(root, "commit", "-q", "-am", "both stories name calc_shared.py")
    assert run_cli(["sprint", "run", "-j", "3", "--max-stories", "3", "-C", str(root), "--json", "-q"]) == 0
    assert sorted(r["outcome"] for r in json.loads(capsys.readouterr().out)) == ["committed"] * 3
    events = [(e["event"], e["key"]) for e in _loop_log(root) if str(e["event"]).startswith("story-")]
    assert events.index(("story-started", "1-2-sub")) > events.index(("story-ended", "1-1-add"))
    assert events.index(("story-started", "1-3-mul")) < events.index(("story-ended", "1-1-add"))  # not held up
    waited = [e for e in _loop_log(root) if e["event"] == "story-waiting"]
    assert [(e["key"], e["reason"]) for e in waited] == [("1-2-sub", "1-1-add is changing calc_shared.py, "
                                                                     "tests/test_shared.py")]


def test_dependencies_are_read_from_story_files_and_the_epics_document(tmp_path: Path) -> None:
    from stepline.sprint._parallel import story_needs
    from stepline.sprint._project import SprintProject

    artifacts = tmp_path / "_bmad-output" / "implementation-artifacts"
    planning = tmp_path / "_bmad-output" / "planning-artifacts"
    artifacts.mkdir(parents=True)
    planning.mkdir()
    (artifacts / "1-2-b.md").write_text("# Story 1.2\n\nPrerequisites: story 1-1 must be done.\n\n"
                                        "## File List\n\n- src/b.py\n- [x] `src/c.py`\n\n## Change Log\n- v1\n")
    (planning / "epics.md").write_text(
        "# Epics\n\n## Epic 1: Base\n\n### Story 1.1: a\n\nNothing first.\n\n"
        "## Epic 2: Reports\n\nThis epic depends on Epic 1.\n\n### Story 2.1: r\n\nPlain.\n\n"
        "### Story 2.2: s\n\nDepends on Story 2.1.\n")
    project = SprintProject(root=tmp_path, artifacts=artifacts, board_path=artifacts / "sprint-status.yaml",
                            dev=None, story_dirs=(artifacts,))
    keys = ["1-1-a", "1-2-b", "2-1-r", "2-2-s"]
    needs = story_needs(project, keys, keys)
    assert {k: sorted(n.after) for k, n in needs.items()} == {
        "1-1-a": [], "1-2-b": ["1-1-a"], "2-1-r": ["1-1-a", "1-2-b"], "2-2-s": ["1-1-a", "1-2-b", "2-1-r"]}
    assert needs["1-2-b"].files == {"src/b.py", "src/c.py"}


def test_a_merge_waits_for_every_earlier_story_in_flight_and_one_sent_back_to_build_keeps_its_place() -> None:
    import asyncio

    from stepline.sprint._parallel import MergeQueue

    async def scenario() -> list[str]:
        queue, landed = MergeQueue(["1-0", "1-1", "1-2", "1-3"]), []
        for key in ("1-1", "1-2", "1-3"):  # 1-0 is not started (it waits on a file): it holds no one
            queue.started(key)

        async def merge(key: str, lands: bool = True) -> None:
            async with queue.turn(key):
                landed.append(key if lands else f"{key} sent back")
                if lands:
                    await queue.left(key)

        last = asyncio.ensure_future(merge("1-3"))
        second = asyncio.ensure_future(merge("1-2", lands=False))
        await asyncio.sleep(0.05)
        assert landed == []  # both finished first: they wait for 1-1, still building
        await merge("1-1")
        await second
        queue.started("1-0")  # started after them (the file is free now): it holds none of them up
        await asyncio.sleep(0.05)
        assert landed == ["1-1", "1-2 sent back"]  # 1-3 waits for 1-2, built again
        await queue.left("1-2")  # its run ended (deferred, say): 1-3 goes
        await last
        await merge("1-0")
        return landed

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == ["1-1", "1-2 sent back", "1-3", "1-0"]
