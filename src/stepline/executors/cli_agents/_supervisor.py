"""The agent's supervisor: a small process between the driver and the agent CLI, so the agent never outlives its
driver, however the driver ends (SIGKILL included).

Run as a script (it imports nothing of stepline, to start in milliseconds): ``python _supervisor.py GRACE ARGV…``,
in a new session, so its pid is the process group of the agent and of everything the agent starts. It waits for
one line ``go`` on stdin (the driver journals this process first: see :mod:`._process`), then starts the agent in
its own group with the rest of stdin (the prompt) and its stdout/stderr. When its parent goes away (it is
re-parented: the driver died) or it is told to stop (SIGTERM, SIGINT, SIGHUP), it stops the whole group: SIGTERM,
then SIGKILL after GRACE seconds. Otherwise it exits with the agent's status once the agent exits.

Some agents start their commands in a session of their own (gemini's shell tool does): such a command is not in
the group. The supervisor is therefore the agents' child subreaper (Linux), so a command whose parent exited is
re-parented to it rather than to init: it reaps those as they end, a stop signals every descendant as well as the
group, and when the agent exits whatever it left running is stopped too (the step is over).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

#: How often the parent and the agent are looked at.
_TICK = 0.1


def _wait_for_go(parent: int) -> bool:
    """Read the driver's one line; False when the driver went away (or said something else) first."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk or os.getppid() != parent:
            return False
        line += chunk
    return line == b"go\n"


#: prctl's PR_SET_CHILD_SUBREAPER.
_SET_CHILD_SUBREAPER = 36


def _descendants() -> list[int]:
    """Every process below this one (read from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # the name may hold spaces and ')'
                    children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(sig: int) -> None:
    for pid in _descendants():
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _stop_group(agent: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the group and every descendant (the agent and what it started, in its group or not), SIGKILL to
    what is left after ``grace`` (us too)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    _signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while agent.poll() is None and time.monotonic() < deadline:
        time.sleep(_TICK / 2)
    _signal_all(signal.SIGKILL)
    os.killpg(0, signal.SIGKILL)


def _reap_orphans(agent: int) -> None:
    """Reap the commands re-parented here that have ended, leaving the agent's own status to its Popen."""
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if ended is None or ended.si_pid == agent:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(ended.si_pid, 0)


def _stop_leftovers(grace: float) -> None:
    """After the agent exited: SIGTERM what it left running, SIGKILL what is left after ``grace``."""
    if not _descendants():
        return
    _signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if not _descendants():
            return
        time.sleep(_TICK / 2)
    _signal_all(signal.SIGKILL)


def main() -> int:
    """Supervise one agent run (see the module's doc)."""
    parent = os.getppid()
    grace, argv = float(sys.argv[1]), sys.argv[2:]
    with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere the group is what is stopped
        ctypes.CDLL(None, use_errno=True).prctl(_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if not _wait_for_go(parent):
        return 125
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        agent = subprocess.Popen(argv)
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    while agent.poll() is None:
        if stopping or os.getppid() != parent:
            _stop_group(agent, grace)
        _reap_orphans(agent.pid)
        time.sleep(_TICK)
    _stop_leftovers(grace)
    return agent.returncode if agent.returncode >= 0 else 128 - agent.returncode


if __name__ == "__main__":
    sys.exit(main())
