"""A tool call's intent is journaled before it starts; one that waited at its approval gate did not start, so
once approved it runs (once), without the `rerun:` question a call a crash interrupted gets (issue 28 item 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli


def test_an_approved_shell_call_runs_once_on_resume_without_a_rerun_question(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "flow.yaml").write_text("id: f\nsteps:\n  - id: s\n    name: S\n", encoding="utf-8")
    (project / "script.yaml").write_text(
        "steps:\n  s:\n    - call_tool: {name: shell, args: {command: 'echo ran >> out.txt'}}\n"
        "    - finish: {summary: ok}\n", encoding="utf-8")
    base = ["-C", str(project)]
    assert run_cli(["run", "flow.yaml", "--script", "script.yaml", "--non-interactive", "--json", *base]) == 9
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    assert not (project / "out.txt").exists()
    assert run_cli(["approve", run_id, "tool:shell:s", "--by", "ops", *base]) == 0
    assert run_cli(["resume", run_id, "--script", "script.yaml", "-q", *base]) == 0, capsys.readouterr()
    assert (project / "out.txt").read_text(encoding="utf-8") == "ran\n"
