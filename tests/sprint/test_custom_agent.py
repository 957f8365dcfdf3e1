"""The sprint guide's sample agent (examples/sprint/agent.py), written from the guide's contract alone with Python's
standard library, builds and reviews."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, HERE, git, make_project

from stepline.interfaces.cli._app import run_cli

SAMPLE_AGENT = HERE.parents[1] / "examples" / "sprint" / "agent.py"
pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def test_the_sample_agent_builds_reviews_and_its_stories_are_committed(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "calc", layers=1)
    (root / "config" / "runtime.yaml").write_text(
        f"executors:\n  cli-agent: {{command: {SAMPLE_AGENT}, exit_grace_seconds: 10}}\n")
    git(root, "commit", "-q", "-am", "our own agent")
    assert run_cli(["sprint", "run", "--max-stories", "2", "-C", str(root), "--json", "-q"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["outcome"]) for r in results] == [("1-1-add", "committed"), ("1-2-sub", "committed")]
    assert git(root, "show", "--format=%s", "--name-only", "HEAD").splitlines() == [
        "story 1-2-sub: Story 1-2: sub", "", f"{ARTIFACTS}/1-2-sub.md", "calc_sub.py", "tests/test_sub.py"]
    assert (root / "calc_add.py").read_text() == "def add(a, b):\n    return a + b\n"
    # Its usage line was read: a build and a review layer, 350 tokens each, its own cost.
    assert results[0]["usage"]["input_tokens"] == 600 and results[0]["usage"]["output_tokens"] == 100
    assert results[0]["usage"]["cost_usd"] == pytest.approx(0.002)
