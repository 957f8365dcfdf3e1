"""Fixtures of the sprint loop's tests (the project itself is made by sprint_kit.make_project)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sprint_kit and fake_agent, imported by name


@pytest.fixture
def agent_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake agent's log, and the environment its children (and git) need."""
    log = tmp_path / "agents.jsonl"
    log.touch()
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("CHECKS_LOG", str(tmp_path / "checks.log"))
    for name, value in (("GIT_AUTHOR_NAME", "Agent"), ("GIT_AUTHOR_EMAIL", "agent@example.com"),
                        ("GIT_COMMITTER_NAME", "Agent"), ("GIT_COMMITTER_EMAIL", "agent@example.com")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    return log
