"""`--ray-address` to a cluster that `ray start --head` started with Ray's token auth (Ray 2.60 turns it on when
RAY_AUTH_MODE is unset and a token is found): stepline joins with the token found where Ray's own CLI looks,
and says what to set when it has none or the wrong one, at once and before a run is created."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'stepline[ray]')")

from ray_nodes import free_port, start_node, stop_nodes, wait_for_port  # conftest puts it on the path

pytestmark = pytest.mark.slow
WORKFLOW = "id: tiny\nsteps:\n  - id: a\n    name: A\n    body: Do it.\n"


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any Ray auth setting of its own (the session cluster of conftest.py
    sets RAY_AUTH_MODE=disabled), with a home of its own (no ~/.ray/auth_token from the machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", **extra}


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A one-node cluster on 127.0.0.1 started by `ray start --head` with a token (RAY_AUTH_TOKEN_PATH, auth
    mode unset, as a user starts one): its address and the token file."""
    temp = Path(tmp_path_factory.mktemp("raytoken"))
    token = temp / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n", encoding="utf-8")
    (temp / "home").mkdir()
    port = free_port()
    log = temp / "head.log"
    env = {**_env(temp / "home", RAY_AUTH_TOKEN_PATH=str(token)),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    head = start_node(["--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard", "false",
                       "--node-ip-address", "127.0.0.1", "--object-store-memory", str(80 * 1024 * 1024),
                       "--disable-usage-stats", "--temp-dir", str(temp)], log, env)
    try:
        wait_for_port(port, head, log)
        assert "Token authentication is enabled" in log.read_text(errors="replace")
        yield f"127.0.0.1:{port}", token
    finally:
        left = stop_nodes([head])
    assert not left, f"Ray processes still alive after the cluster was stopped: {left}"


def _run(project: Path, address: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (project / "tiny.yaml").write_text(WORKFLOW, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", "run", "tiny.yaml", "-C", str(project),
                           "--backend", "ray", "--ray-address", address, "-e", "dry-run"],
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_token_ray_finds_joins_a_token_auth_cluster(token_cluster: tuple[str, Path], tmp_path: Path) -> None:
    """With the token where Ray looks (here RAY_AUTH_TOKEN_PATH) and no RAY_AUTH_MODE, the run joins and completes
    (Ray's ray.init(address=…) alone would send no token: InvalidAuthToken, then "cannot connect")."""
    address, token = token_cluster
    done = _run(tmp_path, address, _env(tmp_path, RAY_AUTH_TOKEN_PATH=str(token)))
    assert done.returncode == 0, done.stderr
    assert "ray: 1 node, 1 CPUs" in done.stderr and "completed: 1/1 steps" in done.stdout + done.stderr


@pytest.mark.parametrize(("token", "says"), [
    (None, "uses token auth and this process has no token"),
    ("not-the-heads-token", "refused this process's auth token"),
])
def test_no_token_or_a_wrong_one_says_what_to_set(token_cluster: tuple[str, Path], tmp_path: Path,
                                                    token: str | None, says: str) -> None:
    """No token, or another than the head's: one line naming the cluster and where Ray reads a token from, exit 2,
    no traceback, no run created."""
    address, _ = token_cluster
    extra = {"RAY_AUTH_TOKEN": token} if token else {}
    done = _run(tmp_path, address, _env(tmp_path, **extra))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"error: the Ray cluster at {address} {says}")
    assert "RAY_AUTH_TOKEN_PATH" in lines[0] and "~/.ray/auth_token" in lines[0]
    assert not (tmp_path / ".stepline" / "runs").exists()
