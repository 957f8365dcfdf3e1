"""``--concurrency`` on Ray: unless given (the option, or runtime.concurrency in config), a command joins the
cluster before its run and takes one step per CPU of the cluster's live nodes, said once in one line; the
engine then runs that many steps at once. The loopback cluster of conftest.py: 2 + 3 CPUs."""

from __future__ import annotations

import asyncio
import shutil
from datetime import datetime
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'stepline[ray]'): the Ray backend's "
                                        "tests need a local Ray cluster")

import ray_agents  # noqa: E402 - after the skip: conftest puts it on the path

from stepline import Engine  # noqa: E402
from stepline.engine import RuntimeConfig  # noqa: E402
from stepline.interfaces.cli._app import run_cli  # noqa: E402
from stepline.interfaces.cli._driving import use_backend  # noqa: E402
from stepline.store import read_journal  # noqa: E402

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.slow]

CHOSEN = "ray: 2 nodes, 5 CPUs → concurrency 5"
TESTS = Path(__file__).resolve().parents[1]


def _flow(project: Path, steps: int) -> tuple[Path, Path]:
    """``steps`` independent steps, each writing its line through the protocol (a scripted executor)."""
    flow = project / "flow.yaml"
    flow.write_text(yaml.safe_dump({"id": "wide", "steps": [{"id": f"s{i}", "outputs": ["out.log"]}
                                                            for i in range(steps)]}), encoding="utf-8")
    script = project / "script.yaml"
    script.write_text(yaml.safe_dump({"default": "error", "steps": {
        f"s{i}": [{"write_output": {"content": f"s{i}\n"}}, {"finish": {"summary": f"did s{i}"}}]
        for i in range(steps)}}), encoding="utf-8")
    return flow, script


def _ray_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("ray:")]


@pytest.mark.parametrize("command", ["run", "ccw"])
def test_a_command_on_ray_takes_the_clusters_cpus_as_its_concurrency_and_says_so_once(
        tmp_path: Path, ray_cluster: str, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """`stepline run` and `stepline ccw execute` with --backend ray and no --concurrency: one line naming the
    nodes, the CPUs and the concurrency chosen, before the run; the run completes."""
    project = tmp_path / "p"
    if command == "run":
        project.mkdir()
        flow, script = _flow(project, 6)
        args = ["run", str(flow), "--script", str(script)]
    else:
        shutil.copytree(TESTS / "fixtures" / "ccw" / "project-active", project)
        args = ["ccw", "execute", "--resume-session", "payment", "--executor", "dry-run"]
    code = run_cli([*args, "--backend", "ray", "--ray-address", ray_cluster, "-C", str(project)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert _ray_lines(err) == [CHOSEN]


@pytest.mark.parametrize("given", ["option", "config"])
def test_a_concurrency_given_is_kept_and_the_cluster_is_not_asked(
        tmp_path: Path, ray_cluster: str, capsys: pytest.CaptureFixture[str], given: str) -> None:
    """-j 2, or runtime.concurrency in config/runtime.yaml: that figure stands, and no capacity line is printed."""
    project = tmp_path / "p"
    project.mkdir()
    flow, script = _flow(project, 3)
    extra = ["-j", "2"] if given == "option" else []
    if given == "config":
        (project / "config").mkdir()
        (project / "config" / "runtime.yaml").write_text("runtime:\n  concurrency: 3\n", encoding="utf-8")
    code = run_cli(["run", str(flow), "--script", str(script), "--backend", "ray", "--ray-address", ray_cluster,
                    "-C", str(project), *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    assert _ray_lines(err) == []


def _most_at_once(project: Path, run_id: str) -> int:
    """The most steps that were running at the same instant, from the journal's start and end records."""
    edges: list[tuple[datetime, int]] = []
    for event in read_journal(project / ".stepline" / "runs" / run_id / "journal.jsonl"):
        if event.type == "WorkflowStepStarted":
            edges.append((datetime.fromisoformat(event.time), 1))
        elif event.type in ("WorkflowStepCompleted", "WorkflowStepFailed"):
            edges.append((datetime.fromisoformat(event.time), -1))
    running = most = 0
    for _, change in sorted(edges):  # an end before a start at the same instant: -1 sorts first
        running += change
        most = max(most, running)
    return most


def test_the_chosen_concurrency_is_what_the_run_uses(tmp_path: Path, ray_cluster: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Ten one-second steps that may all run at once, on the cluster with the concurrency chosen from it: five
    run at once (not the local default, four), never six (the engine is set up as the CLI sets it up)."""
    project = tmp_path / "p"
    project.mkdir()
    (project / "brief.md").write_text("do the step\n", encoding="utf-8")
    path = project / "flat.yaml"
    steps = [{"id": "s0"}, *({"id": f"s{i}", "depends_on": ["s0"]} for i in range(1, 11))]  # a DAG: ten at once
    path.write_text(yaml.safe_dump({"id": "flat", "steps": steps}), encoding="utf-8")
    from stepline.families import load_workflow

    config = RuntimeConfig.model_validate({"runtime": {"backend": "ray"}})
    engine = Engine(project_root=project, config=config, executor=ray_agents.FileAgent(delay=1.0))
    use_backend(engine, None, ray_cluster)
    assert capsys.readouterr().err.strip() == CHOSEN
    assert engine.concurrency == 5
    run = asyncio.run(engine.start(load_workflow(path, project_root=project)))
    assert run.status.value == "completed", run.error
    assert _most_at_once(project, run.run_id) == 5
