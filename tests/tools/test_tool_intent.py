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


def test_a_declared_step_tool_killed_mid_run_is_not_run_again_silently(project: Path) -> None:
    """A native step's own `tools:` call journals its intent too: SIGKILLed while its command runs, the resume
    asks at `rerun:shell:…` instead of appending a second time (it ran again blindly before)."""
    import signal
    import subprocess
    import sys
    import time

    (project / "config").mkdir()
    (project / "config" / "runtime.yaml").write_text("tools: {risk_policy: {high_requires_approval: false}}\n",
                                                     encoding="utf-8")
    (project / "flow.yaml").write_text(
        "id: f\nsteps:\n  - id: s\n    name: S\n    tools:\n      - name: shell\n"
        "        args: {command: 'echo ran >> out.txt && sleep 3'}\n", encoding="utf-8")
    command = [sys.executable, "-m", "stepline.interfaces.cli", "run", "flow.yaml", "--executor", "dry-run", "-q",
               "-C", str(project)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (project / "out.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(3.5)  # the command, in a session of its own, ends by itself
    run_id = next((project / ".stepline" / "runs").glob("run-*")).name
    resumed = subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", "resume", run_id, "--executor",
                              "dry-run", "-q", "-C", str(project)], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 9, (resumed.stdout, resumed.stderr)
    assert "rerun:shell:s/" in resumed.stdout + resumed.stderr
    assert (project / "out.txt").read_text(encoding="utf-8") == "ran\n"
