"""Reconciliation on resume: git, the board and the journal compared before a story goes on; committed work is
never redone or reset; what cannot be settled is a question."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, add_config, git, make_project

from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def _story_commits(root: Path) -> list[str]:
    return git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)").split()


def _records(root: Path, run_id: str) -> list[dict[str, object]]:
    raw = (root / ".stepline" / "runs" / run_id / "journal.jsonl").read_bytes().rstrip(b"\0").decode()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def test_a_story_committed_before_is_not_built_again_without_a_person_saying_so(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "-q"]) == 0
    sha = git(root, "rev-parse", "HEAD").strip()
    # The loop's state is lost and the board goes back (a person, a bad merge): the commit is still there.
    shutil.rmtree(root / ".stepline")
    board = root / ARTIFACTS / "sprint-status.yaml"
    board.write_text(board.read_text().replace("1-1-add: done", "1-1-add: ready-for-dev"))
    capsys.readouterr()
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 9
    [blocked] = json.loads(capsys.readouterr().out)
    assert f"Story 1-1-add is already committed ({sha[:12]} story 1-1-add: Story 1-1: add), but the board says " \
           "ready-for-dev" in blocked["summary"]
    assert run_cli(["answer", blocked["run_id"], "done", "-C", str(root)]) == 0
    assert "ask:reconcile:1-1-add:1" in capsys.readouterr().out
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    assert _story_commits(root) == ["1-1-add"] and git(root, "rev-parse", "HEAD").strip() == sha
    assert "1-1-add: done" in board.read_text()
    assert len(agent_env.read_text().splitlines()) == 2  # the first loop's build and review only


def test_a_resumed_story_whose_history_was_rewritten_asks_and_deferring_it_resets_nothing(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    add_config(root, "checkpoints: {before_build: true}\n", "checkpoints")
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 9
    [blocked] = json.loads(capsys.readouterr().out)
    base = git(root, "rev-parse", "HEAD").strip()
    git(root, "commit", "-q", "--amend", "-m", "checkpoints, reworded")  # the baseline leaves the history
    rewritten = git(root, "rev-parse", "HEAD").strip()
    assert run_cli(["approve", blocked["run_id"], "--by", "lead", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 9
    [asked] = json.loads(capsys.readouterr().out)
    assert (f"HEAD {rewritten[:12]} does not descend from the story's baseline {base[:12]} (the history was "
            "rewritten while the loop was stopped)") in asked["summary"]
    assert agent_env.read_text() == ""  # nothing was built on a history the journal does not know
    assert run_cli(["answer", asked["run_id"], "defer", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 11
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "deferred" and "a person deferred it at the resume" in result["summary"]
    assert git(root, "rev-parse", "HEAD").strip() == rewritten  # the person's commit is not reset


def test_a_worktree_gone_while_its_branch_is_kept_is_made_again_and_the_story_goes_on(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1, isolation="worktree")
    add_config(root, "checkpoints: {before_build: true}\n", "checkpoints")
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 9
    [blocked] = json.loads(capsys.readouterr().out)
    worktree = root / ".stepline" / "sprint" / "worktrees" / "1-1-add"
    shutil.rmtree(worktree)
    assert run_cli(["approve", blocked["run_id"], "--by", "lead", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    assert _story_commits(root) == ["1-1-add"] and (root / "calc_add.py").is_file()
    [reconciled] = [e["data"]["result"] for e in _records(root, blocked["run_id"])
                    if e["type"] == "CallRecorded" and e["data"]["op"] == "sprint:reconcile"]
    assert reconciled == {"settled": [f"its worktree {worktree} was gone: made again from branch sprint/1-1-add"],
                          "disagreements": []}
