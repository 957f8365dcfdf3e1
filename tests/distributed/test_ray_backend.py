"""The Ray backend on a real two-node Ray cluster on loopback (see conftest.py): runs complete as they do
locally, a killed worker's task is retried without redoing what it journaled, a killed coordinator's run is
resumed, a step past its timeout is cancelled on the cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'stepline[ray]'): the Ray backend's "
                                        "tests need a local Ray cluster")

import ray_agents  # noqa: E402 - after the skip: conftest puts it on the path

from stepline import Engine  # noqa: E402
from stepline.engine import RuntimeConfig  # noqa: E402
from stepline.executors import Executor  # noqa: E402
from stepline.model import Run  # noqa: E402
from stepline.store import read_journal  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _config(backend: str, **runtime: Any) -> RuntimeConfig:
    return RuntimeConfig.model_validate({"runtime": {"backend": backend, **runtime}})


def _dag(project: Path, n: int) -> Path:
    """A native workflow of ``n`` steps, each depending on up to two earlier ones."""
    steps = [{"id": f"s{i:02d}", "depends_on": [f"s{j:02d}" for j in (i - 1, i - 3) if j >= 0 and i % 2 == 0]}
             for i in range(n)]
    path = project / "dag.yaml"
    path.write_text(yaml.safe_dump({"id": "dag", "steps": steps}), encoding="utf-8")
    (project / "brief.md").write_text("do the step\n", encoding="utf-8")
    return path


def _load(path: Path, project: Path) -> Any:
    from stepline.families import load_workflow

    return load_workflow(path, project_root=project)


def _run(project: Path, workflow: Any, executor: Executor, backend: str, **runtime: Any) -> Run:
    engine = Engine(project_root=project, config=_config(backend, **runtime), executor=executor, concurrency=4)
    return asyncio.run(engine.start(workflow))


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*"))
            if p.is_file() and ".stepline" not in p.parts}


def _journal(project: Path, run_id: str) -> list[Any]:
    return read_journal(project / ".stepline" / "runs" / run_id / "journal.jsonl")


def _shape(project: Path, run_id: str) -> dict[str | None, list[str]]:
    """Each step's records in order, as kinds (calls by their operation): what a run did, not when."""
    shape: dict[str | None, list[str]] = {}
    for event in _journal(project, run_id):
        kind = event.type + (":" + event.data["op"] if "op" in event.data else "")
        shape.setdefault(event.step_id, []).append(kind)
    return shape


def _sorted_log(path: Path) -> list[str]:
    return sorted(path.read_text(encoding="utf-8").splitlines())


def test_a_native_dag_on_the_cluster_writes_what_a_local_run_writes(tmp_path: Path) -> None:
    """The same DAG run locally and on Ray: the same files, the same records per step, every step completed."""
    runs = {}
    for backend in ("local", "ray"):
        project = tmp_path / backend
        project.mkdir()
        runs[backend] = (project, _run(project, _load(_dag(project, 12), project), ray_agents.FileAgent(), backend))
    (local_root, local), (ray_root, remote) = runs["local"], runs["ray"]
    assert local.status.value == remote.status.value == "completed"
    assert sorted(_tree(local_root)) == sorted(_tree(ray_root))
    assert _sorted_log(local_root / "out" / "all.log") == _sorted_log(ray_root / "out" / "all.log")
    assert _shape(local_root, local.run_id) == _shape(ray_root, remote.run_id)
