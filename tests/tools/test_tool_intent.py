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


#: A command that appends a line, then holds until the test lets it go (the file `go`), then says it ended.
HELD = "echo ran >> out.txt && while [ ! -e go ]; do sleep 0.02; done && echo end >> ended.txt"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def _wait_for(path: Path, lines: int) -> None:
    import time

    deadline = time.monotonic() + 60
    while _lines(path) < lines:
        assert time.monotonic() < deadline, f"{path} never reached {lines} line(s)"
        time.sleep(0.02)


def _kill_while_held(project: Path, argv: list[str], appended: int) -> None:
    """Start ``stepline ARGV``, SIGKILL it once the command has appended its ``appended``-th line (it is held
    running), then let the command end (it runs in a session of its own) and wait until it has."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "stepline.interfaces.cli", *argv, "-q", "-C", str(project)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(project / "out.txt", appended)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    (project / "go").touch()
    _wait_for(project / "ended.txt", appended)


def test_an_approved_rerun_covers_one_run_of_the_command(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Killed mid-command, the resume asks at `rerun:shell:…`; approved, the command runs again; killed again
    during that approved run, the next resume asks again (`…#2`) instead of running it a third time silently."""
    (project / "config").mkdir()
    (project / "config" / "runtime.yaml").write_text("tools: {risk_policy: {high_requires_approval: false}}\n",
                                                     encoding="utf-8")
    (project / "flow.yaml").write_text(
        "id: f\nsteps:\n  - id: s\n    name: S\n    tools:\n      - name: shell\n"
        f"        args: {{command: {json.dumps(HELD)}}}\n", encoding="utf-8")
    base = ["-C", str(project)]
    _kill_while_held(project, ["run", "flow.yaml", "--executor", "dry-run"], 1)
    (project / "go").unlink()
    run_id = next((project / ".stepline" / "runs").glob("run-*")).name

    assert run_cli(["resume", run_id, "--executor", "dry-run", "-q", *base]) == 9
    gate = next(g for g in _gates(run_id, base, capsys) if g.startswith("rerun:shell:s/"))
    assert _lines(project / "out.txt") == 1
    assert run_cli(["approve", run_id, gate, "--by", "ops", *base]) == 0
    _kill_while_held(project, ["resume", run_id, "--executor", "dry-run"], 2)  # the approved run, killed too

    assert run_cli(["resume", run_id, "--executor", "dry-run", "-q", *base]) == 9, capsys.readouterr()
    again = [g for g in _gates(run_id, base, capsys) if g.startswith("rerun:shell:s/")]
    assert again == [f"{gate}#2"], again
    assert _lines(project / "out.txt") == 2  # asked, not run
    assert run_cli(["approve", run_id, again[0], "--by", "ops", *base]) == 0
    assert run_cli(["resume", run_id, "--executor", "dry-run", "-q", *base]) == 0, capsys.readouterr()
    assert _lines(project / "out.txt") == 3


def _gates(run_id: str, base: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert run_cli(["gates", run_id, "--json", *base]) == 0
    return [gate["gate_id"] for gate in json.loads(capsys.readouterr().out) if gate.get("status") == "pending"]
