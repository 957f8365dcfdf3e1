"""The tools a native step declares: a step none of whose declared tools worked did none of its declared work,
so the run does not say completed; one tool of several failing (not required) is noted and the step goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli

FLOW = """id: t
steps:
  - id: check
    name: Check
    tools:
      - name: shell
        args: {{command: "{first}"}}
      - name: readFile
        args: {{path: {second}}}
  - id: two
    name: Two
"""


def _run(project: Path, capsys: pytest.CaptureFixture[str], first: str, second: str) -> tuple[int, dict[str, object]]:
    (project / "config").mkdir(exist_ok=True)
    (project / "config" / "runtime.yaml").write_text("tools: {risk_policy: {high_requires_approval: false}}\n",
                                                     encoding="utf-8")
    (project / "flow.yaml").write_text(FLOW.format(first=first, second=second), encoding="utf-8")
    (project / "present.txt").write_text("here\n", encoding="utf-8")
    code = run_cli(["run", "flow.yaml", "--executor", "dry-run", "--json", "-C", str(project)])
    return code, json.loads(capsys.readouterr().out)


def test_a_run_whose_declared_tools_all_failed_does_not_say_completed(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, run = _run(project, capsys, "exit 3", "missing.txt")
    assert code == 8 and run["status"] == "failed", run
    error = str(run["error"])
    assert "every tool step 'check' declares failed" in error
    assert "shell error: command exited with code 3" in error and "no such file: 'missing.txt'" in error


def test_one_failed_tool_of_two_is_noted_and_the_step_goes_on(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, run = _run(project, capsys, "exit 3", "present.txt")
    assert code == 0 and run["status"] == "completed", run
    results = json.loads(next((project / ".stepline" / "runs").glob("run-*/tool_results.json")).read_text())
    assert [(r["name"], r["status"]) for r in results] == [("shell", "error"), ("readFile", "ok")]
