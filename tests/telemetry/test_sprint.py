"""A sprint story's run as spans: `stepline sprint run --story 1-1` on a real BMAD v6.11 project with the sprint
tests' fake claude; every span carries the story's key, each agent call is invoke_agent with the CLI's session,
and the review's verdict is a gen_ai.evaluation.result event."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli

from .conftest import Spans

SPRINT = Path(__file__).resolve().parents[1] / "sprint"
sys.path.insert(0, str(SPRINT))
from sprint_kit import BMAD, make_project  # noqa: E402 - beside the sprint tests

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def test_a_story_run_carries_its_key_its_agent_sessions_and_its_review_verdict(
        tmp_path: Path, spans: Spans, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name, value in (("FAKE_LOG", str(tmp_path / "agents.jsonl")), ("CHECKS_LOG", str(tmp_path / "checks.log")),
                        ("GIT_AUTHOR_NAME", "Agent"), ("GIT_AUTHOR_EMAIL", "agent@example.com"),
                        ("GIT_COMMITTER_NAME", "Agent"), ("GIT_COMMITTER_EMAIL", "agent@example.com"),
                        ("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FAKE_REVIEW", json.dumps({"1-1:layer-1": "defer: add() ignores non-numbers\n"}))
    root = make_project(tmp_path / "calc", layers=1)
    assert run_cli(["sprint", "run", "--story", "1-1", "-C", str(root), "--json", "-q"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "committed"

    [run] = spans.named("invoke_workflow sprint-story:1-1-add")
    assert all(dict(s.attributes or {})["stepline.story.key"] == "1-1-add" for s in spans.all())
    assert all(dict(s.attributes or {})["stepline.workflow.family"] == "sprint" for s in spans.all())
    agents = spans.named("invoke_agent claude")
    assert {dict(a.attributes or {})["stepline.step.id"] for a in agents} == {"build", "review"}
    for agent in agents:
        step = dict(agent.attributes or {})["stepline.step.id"]
        assert dict(agent.attributes or {})["gen_ai.conversation.id"] == f"fake-{step}"
    [review] = spans.named("step review")
    assert review.parent is not None and run.context is not None and review.parent.span_id == run.context.span_id
    assert [(e.name, dict(e.attributes or {})) for e in review.events] == [("gen_ai.evaluation.result", {
        "gen_ai.evaluation.name": "code_review", "gen_ai.evaluation.score.label": "clean",
        "gen_ai.evaluation.explanation": "1 layer(s): 0 to fix, 1 deferred, 0 escalated"})]
