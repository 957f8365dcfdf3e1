"""A real Ray cluster on loopback for the Ray backend's tests: a head node and a second worker node, started
once for the whole session (``ray start --block``, each in its own process group) and torn down afterwards,
every process they started checked gone. Ray missing: every test here is skipped with one message."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # ray_agents, imported by name here and pickled by value for the workers

from ray_nodes import free_port, start_node, stop_nodes, wait_for_port  # noqa: E402 - found through the line above

try:
    import ray
except ImportError:  # the test module says so, once (pytest.importorskip)
    ray = None


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
    port = free_port()
    temp = ray_cluster_dir
    (temp / "agents.jsonl").touch()
    common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(80 * 1024 * 1024),
              "--disable-usage-stats"]
    procs = [start_node(["--head", "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false",
                         "--temp-dir", str(temp), *common], temp / "head.log")]
    address = f"127.0.0.1:{port}"
    try:
        wait_for_port(port, procs[0], temp / "head.log")
        # 2 + 3 CPUs: the concurrency chosen from the cluster (5) is not the local default (4).
        procs.append(start_node(["--address", address, "--num-cpus", "3", *common], temp / "worker.log"))
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
        left = stop_nodes(procs)
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
    assert not left, f"Ray processes still alive after the cluster was stopped: {left}"
