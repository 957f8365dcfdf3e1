"""The Ray backend on a real two-node Ray cluster on loopback (see conftest.py): runs complete as they do
locally, a killed worker's task is retried without redoing what it journaled, a killed coordinator's run is
resumed, a step past its timeout is cancelled on the cluster."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
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

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.slow]  # one cluster for the module (conftest)


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


_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?")


def _tree(root: Path) -> dict[str, str]:
    """Every file of a project but its run folders, instants (when a task changed status) blanked out."""
    return {str(p.relative_to(root)): _INSTANT.sub("<instant>", p.read_text(encoding="utf-8"))
            for p in sorted(root.rglob("*")) if p.is_file() and ".stepline" not in p.parts}


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


def _ccw_run(project: Path, executor: Executor, backend: str, **runtime: Any) -> tuple[Path, Run]:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from ccw_gen import generate_session

    from stepline.ccw._driver import execute_session

    session_dir = generate_session(project, 40, seed=3)
    (project / "brief.md").write_text("do the task\n", encoding="utf-8")
    engine = Engine(project_root=project, config=_config(backend, **runtime), executor=executor, concurrency=8)
    return session_dir, asyncio.run(execute_session(engine, session_dir))


def test_a_40_task_ccw_session_on_the_cluster_ends_as_a_local_run_does(tmp_path: Path) -> None:
    """A generated 40-task CCW session executed locally and on Ray: the same files (task JSONs, TODO list,
    summaries, the agents' outputs), the same records per task, every task completed."""
    results = {}
    for backend in ("local", "ray"):
        project = tmp_path / backend
        project.mkdir()
        results[backend] = (project, *_ccw_run(project, ray_agents.FileAgent(), backend))
    (local_root, _, local), (ray_root, ray_session, remote) = results["local"], results["ray"]
    assert local.status.value == remote.status.value == "completed"
    assert len(remote.steps) == 40
    local_files, ray_files = _tree(local_root), _tree(ray_root)
    assert sorted(local_files) == sorted(ray_files)
    differing = [p for p in local_files if local_files[p] != ray_files[p] and not p.endswith("all.log")]
    assert differing == []
    assert _sorted_log(local_root / "out" / "all.log") == _sorted_log(ray_root / "out" / "all.log")
    assert (ray_session / "TODO_LIST.md").read_text(encoding="utf-8").count("- [x]") == 40
    assert _shape(local_root, local.run_id) == _shape(ray_root, remote.run_id)


def test_a_worker_killed_mid_task_is_retried_and_every_effect_happens_once(tmp_path: Path) -> None:
    """SIGKILL the worker process running tasks while they wait between two writes: their attempts fail,
    are retried by the retry policy on the restarted worker, replay what they journaled (the first write, the
    model call) and do the rest, so every task's lines are written exactly once."""
    import os
    import signal

    project = tmp_path / "p"
    project.mkdir()
    trace = project / "trace.txt"
    workflow = _load(_dag(project, 12), project)
    engine = Engine(project_root=project, config=_config("ray", max_retries=2), concurrency=12,
                    executor=ray_agents.FileAgent(trace=str(trace), delay=1.5))
    killed: list[int] = []

    async def kill_a_worker() -> None:
        while not trace.exists() or len(trace.read_text(encoding="utf-8").splitlines()) < 3:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the tasks are past their first write, waiting before the second
        pid = int(trace.read_text(encoding="utf-8").splitlines()[0].split()[1])
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    async def main() -> Run:
        killer = asyncio.create_task(kill_a_worker())
        run = await engine.start(workflow)
        await killer
        return run

    run = asyncio.run(main())
    assert run.status.value == "completed", run.error
    lines = trace.read_text(encoding="utf-8").splitlines()
    on_killed = {line.split()[0] for line in lines if int(line.split()[1]) == killed[0]}
    started = Counter(line.split()[0] for line in lines)
    retried = {step for step, count in started.items() if count > 1}
    assert retried and retried <= on_killed  # the killed worker's tasks were dispatched again, no other
    events = _journal(project, run.run_id)
    failed = [e for e in events if e.type == "WorkflowStepFailed"]
    assert {e.step_id for e in failed} == retried
    assert all("Ray worker" in e.data["error"] for e in failed)
    assert {e.step_id for e in events if e.type == "WorkflowStepStarted" and e.data.get("replays") == 1} == retried
    log = _sorted_log(project / "out" / "all.log")
    assert log == sorted(f"s{i:02d} answer-for-s{i:02d}" for i in range(12))  # once each, though retried
    for i in range(12):
        assert (project / "out" / f"s{i:02d}.txt").read_text(encoding="utf-8") == f"s{i:02d} done\n"
    memos = [e for e in events if e.type == "CallRecorded" and e.data["op"] == "memo:model"]
    assert len(memos) == 12  # the model was asked once per task, not again by the retries


def test_a_step_past_its_timeout_is_cancelled_on_the_cluster(tmp_path: Path) -> None:
    """A step whose remote work outlives its timeout fails as timed out, and its work is cancelled on the
    worker (it says so there), never running to its end."""
    import time

    project = tmp_path / "p"
    project.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    path = project / "slow.yaml"
    # Long enough for a new executor host to start on a busy machine: the work is under way when time is up.
    path.write_text(yaml.safe_dump({"id": "slow", "steps": [{"id": "nap", "timeout_seconds": 6}]}),
                    encoding="utf-8")
    run = _run(project, _load(path, project), ray_agents.Sleeper(str(marks), 30), "ray")
    assert run.status.value == "failed"
    assert "timed out after 6s" in (run.steps["nap"].error or "")
    assert (marks / "nap.started").exists()
    deadline = time.monotonic() + 15
    while not (marks / "nap.cancelled").exists():
        assert time.monotonic() < deadline, "the step's work was not cancelled on the worker"
        time.sleep(0.1)
    time.sleep(1)
    assert not (marks / "nap.finished").exists()


def _cli(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "stepline.interfaces.cli", *args]


def test_a_killed_coordinator_is_resumed_on_the_cluster_and_every_step_happens_once(
        tmp_path: Path, ray_cluster: str) -> None:
    """`stepline run --backend ray` SIGKILLed mid-run; `stepline resume --backend ray` joins the cluster again
    and finishes the run: every step completed once, every step's line in the shared log exactly once."""
    import signal
    import subprocess
    import time

    project = tmp_path / "p"
    project.mkdir()
    steps = 80
    flow = project / "flow.yaml"
    flow.write_text(yaml.safe_dump({"id": "many", "steps": [{"id": f"s{i:03d}", "outputs": ["effects.log"]}
                                                            for i in range(steps)]}), encoding="utf-8")
    script = project / "script.yaml"
    script.write_text(yaml.safe_dump({"default": "error", "steps": {
        f"s{i:03d}": [{"write_output": {"content": f"s{i:03d}\n"}}, {"finish": {"summary": f"did s{i:03d}"}}]
        for i in range(steps)}}), encoding="utf-8")
    backend = ["--backend", "ray", "--ray-address", ray_cluster, "-C", str(project), "-q"]
    child = subprocess.Popen(_cli("run", str(flow), "--script", str(script), *backend),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    runs = project / ".stepline" / "runs"
    deadline = time.monotonic() + 90
    while True:
        journals = list(runs.glob("*/journal.jsonl")) if runs.exists() else []
        done = journals[0].read_bytes().count(b'"WorkflowStepCompleted"') if journals else 0
        if done >= 15:
            break
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the run made no progress on the cluster"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    run_id = journals[0].parent.name
    killed_at = [e for e in _journal(project, run_id) if e.type == "WorkflowStepCompleted"]
    assert len(killed_at) < steps, "the run finished before it was killed"
    resumed = subprocess.run(_cli("resume", run_id, *backend), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    events = _journal(project, run_id)
    assert [e.type for e in events].count("WorkflowCompleted") == 1
    completed = Counter(e.step_id for e in events if e.type == "WorkflowStepCompleted")
    assert sorted(completed) == [f"s{i:03d}" for i in range(steps)] and set(completed.values()) == {1}
    lines = (project / "effects.log").read_text(encoding="utf-8").splitlines()
    assert sorted(lines) == [f"s{i:03d}" for i in range(steps)]  # each step's effect exactly once


def test_a_cli_agent_does_a_ccw_session_from_the_cluster(tmp_path: Path, ray_cluster: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`stepline ccw execute --executor cli-agent --backend ray`: each task's agent CLI (a fake codex installed
    on the nodes) runs on a worker and reports over MCP to the executor there, whose calls come back here; the
    session ends as it does locally (every task completed, ticked, summarised)."""
    import shutil

    from stepline.interfaces.cli._app import run_cli

    tests = Path(__file__).resolve().parents[1]
    project = tmp_path / "project"
    shutil.copytree(tests / "fixtures" / "ccw" / "project-active", project)
    config = project / "config" / "runtime.yaml"
    config.write_text(config.read_text() + "executors:\n  cli-agent: {agent: codex, mode: write}\n")
    code = run_cli(["ccw", "execute", "--resume-session", "payment", "--executor", "cli-agent", "--backend", "ray",
                    "--ray-address", ray_cluster, "-C", str(project), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["status"] == "completed"
    session = project / ".workflow" / "active" / "WFS-payment-module"
    assert (session / "TODO_LIST.md").read_text().count("- [x]") == 3
    for task in sorted((session / ".task").glob("*.json")):
        data = json.loads(task.read_text())
        assert data["status"] == "completed", task.name
        summary = session / ".summaries" / f"{data['id']}-summary.md"
        assert f"codex finished {data['id']}" in summary.read_text()  # the agent's own finish, from the worker
