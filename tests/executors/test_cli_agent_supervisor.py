"""The agent's supervisor owns everything its agent starts, for as long as the step runs and no longer: commands
an agent starts in a session of their own (gemini's shell tool does) are re-parented to it when their parent
exits; it reaps them as they end (no zombies pile up during a long agent run), and when the agent exits, whatever
it left running is stopped (a step's agent leaves no process behind, however it started it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from stepline.executors.cli_agents import _supervisor

SUPERVISOR = [sys.executable, _supervisor.__file__, "1"]


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                found.append((int(entry), fields[0].decode()))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _supervise(script: str) -> subprocess.Popen[bytes]:
    supervisor = subprocess.Popen([*SUPERVISOR, "sh", "-c", script], stdin=subprocess.PIPE, start_new_session=True)
    assert supervisor.stdin is not None
    supervisor.stdin.write(b"go\n")
    supervisor.stdin.close()
    return supervisor


def test_a_detached_command_the_agent_leaves_running_is_stopped_when_the_agent_exits(tmp_path: Path) -> None:
    pid_file = tmp_path / "detached.pid"
    supervisor = _supervise(f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & "
                            f"while [ ! -s {pid_file} ]; do sleep 0.05; done; exit 3")
    try:
        assert supervisor.wait(timeout=30) == 3  # the agent's own status
        detached = int(pid_file.read_text())
        deadline = time.monotonic() + 10
        while _alive(detached) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(detached), "the agent's detached command outlived its step"
    finally:
        if pid_file.exists() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_orphans_the_agent_leaves_are_reaped_while_it_runs(tmp_path: Path) -> None:
    started = tmp_path / "started"
    # each `sh` exits at once, so its `sleep` is re-parented to the supervisor and ends there
    supervisor = _supervise(f"for i in 1 2 3 4 5 6 7 8 9 10; do sh -c 'sleep 0.2 &'; done; sleep 0.5; "
                            f"touch {started}; sleep 30")
    try:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists()
        time.sleep(0.5)  # a few of the supervisor's ticks
        zombies = [pid for pid, state in _children(supervisor.pid) if state == "Z"]
        assert zombies == [], f"{len(zombies)} ended commands left unreaped under the supervisor"
    finally:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=30)
