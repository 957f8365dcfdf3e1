"""A CCW session executed by the cli-agent executor with a fake `codex` on PATH (issue 7)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli

TESTS = Path(__file__).resolve().parents[1]


def test_codex_does_every_task_of_a_session_through_stepline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`stepline ccw execute --executor cli-agent` runs `codex exec` once per task; each reports back over MCP,
    and the runtime ticks TODO_LIST.md, updates the task JSON and writes the summary."""
    project = tmp_path / "project"
    shutil.copytree(TESTS / "fixtures" / "ccw" / "project-active", project)
    config = project / "config" / "runtime.yaml"  # the fixture's allows the plan's commands; add the agent
    config.write_text(config.read_text() + "executors:\n  cli-agent: {agent: codex, mode: write}\n")
    log = tmp_path / "agents.jsonl"
    monkeypatch.setenv("PATH", os.pathsep.join([str(TESTS / "fakes" / "bin"), str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    monkeypatch.setenv("FAKE_AGENT_LOG", str(log))

    code = run_cli(["ccw", "execute", "--resume-session", "payment", "--executor", "cli-agent", "-C", str(project),
                    "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["status"] == "completed"

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3 and all(c["agent"] == "codex" and c["argv"][0] == "exec" for c in calls)
    session = project / ".workflow" / "active" / "WFS-payment-module"
    todo = (session / "TODO_LIST.md").read_text()
    assert todo.count("- [x]") == 3 and "- [ ]" not in todo
    for task in sorted((session / ".task").glob("*.json")):
        data = json.loads(task.read_text())
        assert data["status"] == "completed", task.name
        assert (session / ".summaries" / f"{data['id']}-summary.md").is_file()
        prompts = [c["prompt"] for c in calls if data["id"] in c["prompt"]]
        assert prompts and data["title"] in prompts[0]  # the agent got its own task's prompt
