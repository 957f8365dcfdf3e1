"""Ray nodes for tests, on 127.0.0.1: started with ``ray start --block`` in a process group of their own, and
stopped by process id with every process they started (never ``ray stop``, which would stop anyone's Ray)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ray_cli() -> str:
    found = Path(sys.executable).with_name("ray")
    return str(found) if found.exists() else (shutil.which("ray") or "ray")


def node_env(log_dir: Path) -> dict[str, str]:
    """The environment of a node: this checkout's stepline and, as agent CLIs installed on every node, the fake
    ones of tests/fakes/bin (run by this interpreter). FAKE_LOG: where the sprint tests' fake agent, run on a
    node, notes each call (the nodes' own file: a test's process never sets it there)."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "FAKE_LOG": str(log_dir / "agents.jsonl"),
            "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(HERE.parent / "fakes" / "bin"),
                                     os.environ.get("PATH", "")])}


def start_node(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``ray start --block ARGS`` (``env``: the node's environment; :func:`node_env` by default), output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen([_ray_cli(), "start", "--block", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env if env is not None else node_env(log.parent), start_new_session=True)


def _descendants(pids: list[int]) -> list[int]:
    import psutil

    found: list[int] = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return found


def stop_nodes(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """Stop the nodes we started and every process they started, by id; return the ids still alive after."""
    import psutil

    pids = [p.pid for p in procs]
    every = [psutil.Process(p) for p in [*pids, *_descendants(pids)] if psutil.pid_exists(p)]
    for process in every:  # Ray's daemons run in sessions of their own: each is told, not just the group
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(every, timeout=3)  # some of Ray's daemons do not stop on SIGTERM: no long wait
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    _, alive = psutil.wait_procs(alive, timeout=5)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1)
    return [p.pid for p in alive]


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the head started by ``proc`` listens on ``port`` (its log in the failure when it does not)."""
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert proc.poll() is None, "ray start --head failed: " + log.read_text(errors="replace")
        assert time.monotonic() < deadline, "the Ray head did not come up: " + log.read_text(errors="replace")
        time.sleep(0.2)
