"""A real Ray cluster on loopback for the Ray backend's tests: a head node and a second worker node, started
once for the whole session (``ray start --block``, each in its own process group) and torn down afterwards,
every process they started checked gone. Ray missing: every test here is skipped with one message."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # ray_agents, imported by name here and pickled by value for the workers

try:
    import ray
except ImportError:  # the test module says so, once (pytest.importorskip)
    ray = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ray_cli() -> str:
    found = Path(sys.executable).with_name("ray")
    return str(found) if found.exists() else (shutil.which("ray") or "ray")


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    # The nodes' processes see this checkout's stepline and, as agent CLIs installed on every node, the fake ones
    # of tests/fakes/bin (run by this interpreter). FAKE_LOG: where the sprint tests' fake agent, run on a node,
    # notes each call (the nodes' own file: a test's process never sets it there).
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "FAKE_LOG": str(log.parent / "agents.jsonl"),
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(HERE.parent / "fakes" / "bin"),
                                    os.environ.get("PATH", "")])}
    with log.open("wb") as out:
        return subprocess.Popen([_ray_cli(), "start", "--block", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def _descendants(pids: list[int]) -> list[int]:
    import psutil

    found: list[int] = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return found


def _stop(procs: list[subprocess.Popen[bytes]]) -> list[int]:
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


@pytest.fixture(scope="session")
def ray_cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's temp folder: its logs, and ``agents.jsonl``, the FAKE_LOG of agents run on its nodes."""
    return Path(tmp_path_factory.mktemp("ray"))


@pytest.fixture(scope="session")
def ray_cluster(ray_cluster_dir: Path) -> Iterator[str]:
    """The address of a two-node Ray cluster on 127.0.0.1 that this test process is connected to."""
    import ray_agents

    # A loopback cluster for this session only: no token (Ray 2.60 makes one in ~/.ray when asked to).
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # for the nodes, this process and the CLI processes tests start
    port = _free_port()
    temp = ray_cluster_dir
    (temp / "agents.jsonl").touch()
    common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(80 * 1024 * 1024),
              "--disable-usage-stats"]
    procs = [_start(["--head", "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false",
                     "--temp-dir", str(temp), *common], temp / "head.log")]
    address = f"127.0.0.1:{port}"
    try:
        _wait_for_port(port, procs[0], temp / "head.log")
        # 2 + 3 CPUs: the concurrency chosen from the cluster (5) is not the local default (4).
        procs.append(_start(["--address", address, "--num-cpus", "3", *common], temp / "worker.log"))
        ray.init(address=address, log_to_driver=False, logging_level="warning")
        deadline = time.monotonic() + 60
        while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
            assert time.monotonic() < deadline, "the second Ray node did not join: " + (temp / "worker.log").read_text()
            time.sleep(0.2)
        ray.cloudpickle.register_pickle_by_value(ray_agents)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        left = _stop(procs)
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
    assert not left, f"Ray processes still alive after the cluster was stopped: {left}"


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert proc.poll() is None, "ray start --head failed: " + log.read_text(errors="replace")
        assert time.monotonic() < deadline, "the Ray head did not come up: " + log.read_text(errors="replace")
        time.sleep(0.2)
