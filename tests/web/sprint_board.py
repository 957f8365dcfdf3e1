"""A sprint loop that really ran, for the dashboard's sprint board: BMAD v6.11 installed in a git project (the
sprint tests' kit), the fake coding agent, and `stepline sprint run` over three stories — one committed, one
deferred (its code never passes its test), one blocked on a reviewer's question."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from web.dashboard_project import stepline_command

SPRINT_TESTS = Path(__file__).resolve().parents[1] / "sprint"
sys.path.insert(0, str(SPRINT_TESTS))  # sprint_kit, the sprint tests' project maker

QUESTION = "should mul() accept floats?"


def sprint_env(log_dir: Path) -> dict[str, str]:
    """The environment the fake agent (and git, run by it) needs."""
    return {**os.environ, "FAKE_LOG": str(log_dir / "agents.jsonl"), "CHECKS_LOG": str(log_dir / "checks.log"),
            "FAKE_SPRINT": json.dumps({"1-2": "stubborn"}),
            "FAKE_REVIEW": json.dumps({"1-3:layer-1": f"escalate: {QUESTION}"}),
            "GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.com",
            "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.com",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def build_sprint_project(root: Path) -> dict[str, str]:
    """The project after `stepline sprint run --max-stories 3`; the run id of each story, by its key."""
    import sprint_kit

    if not sprint_kit.BMAD.is_dir():
        pytest.skip(f"the sprint board needs the BMAD corpus at {sprint_kit.BMAD}")
    sprint_kit.make_project(root, layers=1, builds=2)
    config = root / "config" / "sprint.yaml"
    config.write_text(config.read_text() + "budgets: {mode: warn, story: {tokens: 6000}, run: {cost_usd: 5}}\n")
    sprint_kit.git(root, "commit", "-q", "-am", "budgets")
    env = sprint_env(root.parent)
    (root.parent / "agents.jsonl").touch()
    ran = subprocess.run(stepline_command(root, "sprint", "run", "--max-stories", "3", "--json", "-q"), env=env,
                         capture_output=True, text=True, timeout=300)
    results = json.loads(ran.stdout) if ran.stdout.strip() else []
    outcomes = {r["key"]: r["outcome"] for r in results}
    assert outcomes == {"1-1-add": "committed", "1-2-sub": "deferred", "1-3-mul": "blocked"}, ran.stderr
    return {r["key"]: r["run_id"] for r in results}
