"""An escalated review finding blocks the story on a question a person answers; an enforced budget defers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, add_config, git, make_project

from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def test_an_escalation_waits_for_a_person_and_the_answer_lets_the_story_go_on(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:layer-1": "escalate: should add() accept strings?"}))
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 9
    out = capsys.readouterr()
    [blocked] = json.loads(out.out)
    assert blocked["outcome"] == "blocked" and "should add() accept strings?" in blocked["summary"]
    assert "stepline answer" in out.err
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["entries"] if r["key"] == "1-1-add")
    assert (row["state"], row["stage"]) == ("blocked", "review (blocked)")
    assert git(root, "log", "--format=%(trailers:key=Stepline-Story)").strip() == ""  # the loop committed nothing
    assert run_cli(["answer", blocked["run_id"], "accept", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    assert git(root, "log", "--format=%s", "-1").strip() == "story 1-1-add: Story 1-1: add"
    reviews = [json.loads(line) for line in agent_env.read_text().splitlines() if '"review"' in line]
    assert len(reviews) == 1  # the review was not asked again after the answer


def test_a_story_waiting_on_a_person_after_a_reviewer_crash_stays_waiting_until_answered(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The reviewer crashes once: the review escalates to a person. A plain `sprint resume` without an answer asks
    no reviewer again and commits nothing: the story still waits on the same question, which the loop names and
    which stays answerable; answered, the story goes on."""
    root = make_project(tmp_path / "calc", layers=1)
    (tmp_path / "once").mkdir()
    monkeypatch.setenv("FAKE_ONCE_DIR", str(tmp_path / "once"))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "crash-reviewer"}))
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 9
    out = capsys.readouterr()
    [blocked] = json.loads(out.out)
    command = f"`stepline answer {blocked['run_id']} ANSWER --gate ask:review-escalation:1-1-add:1`"
    assert "the Layer 1 reviewer failed" in blocked["summary"] and "Segmentation fault" in blocked["summary"]
    assert command in out.err
    for _ in range(2):  # resumed without an answer: still waiting, nothing asked again, nothing committed
        assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 9
        out = capsys.readouterr()
        assert [r["outcome"] for r in json.loads(out.out)] == ["blocked"] and command in out.err
    assert git(root, "log", "--format=%(trailers:key=Stepline-Story)").strip() == ""
    assert len([line for line in agent_env.read_text().splitlines() if '"review"' in line]) == 1
    assert run_cli(["answer", blocked["run_id"], "accept", "-C", str(root)]) == 0
    assert "ask:review-escalation:1-1-add:1" in capsys.readouterr().out
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    assert len([line for line in agent_env.read_text().splitlines() if '"review"' in line]) == 1


def test_an_enforced_story_budget_defers_the_story_before_its_next_call(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    add_config(root, "budgets: {mode: enforce, story: {tokens: 1000}}\n", "a budget")
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 11
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "deferred"
    assert "the story's budget: 1700 tokens > the limit of 1000" in result["summary"]  # cache reads count
    assert result["usage"]["input_tokens"] == 1500 and result["usage"]["output_tokens"] == 200  # cached part in
    assert "## 1-1-add" in (root / ARTIFACTS / "deferred-work.md").read_text()
    assert not [line for line in agent_env.read_text().splitlines() if '"review"' in line]  # no call past the limit


def test_checkpoints_wait_before_the_build_and_after_the_commit_and_a_rejection_defers(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    add_config(root, "checkpoints: {before_build: true, after_commit: true}\n", "checkpoints")
    start = git(root, "rev-parse", "HEAD").strip()
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 9
    out = capsys.readouterr()
    [blocked] = json.loads(out.out)
    assert "step:checkpoint-plan" in blocked["summary"] and agent_env.read_text() == ""  # no code before approval
    assert f"`stepline approve {blocked['run_id']} step:checkpoint-plan --by NAME (or reject)`" in out.err
    assert run_cli(["approve", blocked["run_id"], "--by", "lead", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 9
    [blocked] = json.loads(capsys.readouterr().out)
    assert "step:checkpoint-commit" in blocked["summary"]
    assert git(root, "log", "--format=%s", "-1").strip() == "story 1-1-add: Story 1-1: add"
    assert run_cli(["reject", blocked["run_id"], "--by", "lead", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 11
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "deferred" and "rejected the checkpoint-commit" in result["summary"]
    assert git(root, "rev-parse", "HEAD").strip() == start  # the rejected commit is undone, kept as a patch
    assert "calc_add.py" in next((root / ".stepline" / "sprint" / "deferred").glob("1-1-add-*.patch")).read_text()


def test_a_loop_without_an_executor_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    config = root / "config" / "sprint.yaml"
    config.write_text(config.read_text().replace("executor: cli-agent\n", ""))
    assert run_cli(["sprint", "run", "-C", str(root)]) == 2
    assert "error: the sprint loop needs an executor that builds (pass --executor NAME" in capsys.readouterr().err
    assert not (root / ".stepline" / "runs").exists()


def test_a_review_finding_to_patch_goes_back_to_the_builder_then_is_reviewed_again(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:layer-1:review": "patch: add() needs a docstring"}))
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    calls = [json.loads(line) for line in agent_env.read_text().splitlines()]
    assert [c["step"] for c in calls] == ["build", "review", "build@2", "review@2"]
    assert calls[2]["told"] == "- [layer-1] add() needs a docstring"  # the builder was told what to fix


def test_an_old_era_project_runs_with_its_dev_story_workflow(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """BMAD v6.0.0-alpha.23: the dev-story workflow found on disk, a story file with a `Status:` line."""
    root = make_project(tmp_path / "calc", layers=1, old_era=True)
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 0
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["committed"]
    story = (root / ARTIFACTS / "1-1-add.md").read_text()
    assert "Status: done" in story
    assert git(root, "log", "--format=%s", "-1").strip() == "story 1-1-add: Story 1-1: add"
    assert "## Story" in git(root, "show", "HEAD:" + ARTIFACTS + "/1-1-add.md")
    calls = [json.loads(line) for line in agent_env.read_text().splitlines()]
    assert [c["step"] for c in calls] == ["build", "review"]
    assert "Follow the BMAD dev-story workflow" in calls[0]["prompt"]
    assert "4-implementation/dev-story/workflow.yaml" in calls[0]["prompt"]


def test_a_loop_outside_a_git_repository_is_refused_in_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    root = make_project(tmp_path / "calc", layers=1)
    shutil.rmtree(root / ".git")
    assert run_cli(["sprint", "run", "-C", str(root)]) == 5
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is not a git repository with a commit (the loop commits" in err
    assert len(err.strip().splitlines()) == 1 and not (root / ".stepline" / "runs").exists()


def test_a_dirty_shared_checkout_fails_the_story_before_any_agent_runs(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    (root / "notes.txt").write_text("mine, not committed\n")
    gitignore = (root / ".gitignore").read_text()
    (root / ".gitignore").write_text(gitignore + "*.tmp\n")
    assert run_cli(["sprint", "run", "--max-stories", "1", "-C", str(root), "--json", "-q"]) == 8
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "failed"
    assert "the working tree has uncommitted changes (.gitignore, notes.txt); commit or stash" in result["summary"]
    assert agent_env.read_text() == "" and (root / "notes.txt").is_file()  # nothing ran, nothing was touched
    (root / ".gitignore").write_text(gitignore)
    (root / "notes.txt").unlink()  # the user cleans up; the failed story's run is resumed and checks again
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q", "--sprint-config",
                    str(root / "config" / "sprint.yaml")]) == 0
    assert {r["outcome"] for r in json.loads(capsys.readouterr().out)} == {"committed"}


def test_a_story_that_fails_before_any_agent_call_is_reported_with_no_cost(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    (root / "notes.txt").write_text("mine, not committed\n")
    assert run_cli(["sprint", "run", "--max-stories", "1", "-C", str(root)]) == 8  # its usage has no cost at all
    out = capsys.readouterr().out
    assert re.search(r"^failed 1-1-add \(run run-\S+, 0 tokens, \$0\.0000\)$", out, re.M), out


def test_a_check_that_cannot_run_fails_verification_and_says_why(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1, builds=1)
    config = root / "config" / "sprint.yaml"
    config.write_text(config.read_text().replace("commands: [", "commands: ['no-such-checker --all', "))
    git(root, "commit", "-q", "-am", "a second check")
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root)]) == 11  # a story deferred
    out = capsys.readouterr()
    assert "deferred 1-1-add" in out.out
    assert "`no-such-checker --all` did not run to its end: cannot run it:" in out.out
    # Progress: ✓ only for the stages that did what they are for; the failed verify is ✗ with what it chose.
    marks = [line.split()[:2] for line in out.err.splitlines() if line[:1] in "✓✗"]
    assert marks == [["✓", "baseline"], ["✓", "build"], ["✗", "verify"], ["✗", "defer"]], out.err
    assert "✗ verify fail: command-1:" in out.err


def _journal(root: Path, run_id: str) -> list[dict[str, object]]:
    raw = (root / ".stepline" / "runs" / run_id / "journal.jsonl").read_bytes().rstrip(b"\0").decode()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def test_one_answer_settles_one_story_s_escalation_and_the_next_story_asks_again(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Two stories escalate; the answer to the first is not the second's: it blocks on its own question."""
    root = make_project(tmp_path / "calc", layers=1)
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:layer-1": "escalate: should add() accept strings?",
                                                  "1-2:layer-1": "escalate: should sub() go below zero?"}))
    assert run_cli(["sprint", "run", "--max-stories", "2", "-C", str(root), "--json", "-q"]) == 9
    [first] = json.loads(capsys.readouterr().out)
    assert run_cli(["answer", first["run_id"], "accept", "-C", str(root)]) == 0
    said = capsys.readouterr().out
    assert "ask:review-escalation:1-1-add:1" in said and "stepline sprint resume" in said
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 9
    results = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["outcome"]) for r in results] == [("1-1-add", "committed"), ("1-2-sub", "blocked")]
    assert "should sub() go below zero?" in results[1]["summary"]
    second = _journal(root, results[1]["run_id"])
    assert not [e for e in second if e["type"] == "AnswerGiven"]
    gates = json.loads((root / ".stepline" / "runs" / results[1]["run_id"] / "gates.json").read_text())
    assert [(g["gate_id"], g["status"]) for g in gates] == [("ask:review-escalation:1-2-sub:1", "pending")]
    assert git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)").split() == ["1-1-add"]
    # Its own answer lets it go on.
    assert run_cli(["answer", results[1]["run_id"], "defer", "-C", str(root)]) == 0
    capsys.readouterr()
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 11
    assert [r["outcome"] for r in json.loads(capsys.readouterr().out)] == ["deferred"]


def test_an_approved_checkpoint_of_one_story_does_not_approve_the_next_story_s(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    add_config(root, "checkpoints: {before_build: true}\n", "checkpoints")
    assert run_cli(["sprint", "run", "--max-stories", "2", "-C", str(root), "--json", "-q"]) == 9
    [first] = json.loads(capsys.readouterr().out)
    assert run_cli(["approve", first["run_id"], "--by", "lead", "-C", str(root)]) == 0
    assert "stepline sprint resume" in capsys.readouterr().out
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 9
    results = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["outcome"]) for r in results] == [("1-1-add", "committed"), ("1-2-sub", "blocked")]
    assert "step:checkpoint-plan" in results[1]["summary"]
    assert [json.loads(line)["story"] for line in agent_env.read_text().splitlines()] == ["1-1-add", "1-1-add"]
