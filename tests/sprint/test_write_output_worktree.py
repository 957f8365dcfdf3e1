"""write_output under `isolation: worktree`: what a story's agent writes through stepline lands in the story's
worktree (and so in its commit), never in the main checkout the other stories share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sprint_kit import git, make_project

from stepline.interfaces.cli._app import run_cli


def test_write_output_writes_into_the_storys_worktree(
        tmp_path: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1, isolation="worktree", builds=1)
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "reporter"}))
    monkeypatch.setenv("FAKE_MAIN", str(root))
    code = run_cli(["sprint", "run", "--max-stories", "1", "-C", str(root), "--json", "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    [report] = [json.loads(line) for line in agent_env.read_text().splitlines() if '"stage": "report"' in line]
    assert report["here"] and not report["in_main"], report
    assert report["written"]["path"] == ".stepline/sprint/worktrees/1-1-add/REPORT-1-1.md", report
    story_commit = git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert "REPORT-1-1.md" in story_commit, story_commit
    assert (root / "REPORT-1-1.md").read_text(encoding="utf-8") == "report of story 1-1\n"  # merged
