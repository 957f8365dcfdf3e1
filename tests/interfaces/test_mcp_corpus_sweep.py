"""Issue 29: every workflow of both BMAD corpus trees (v6.0.0-alpha.23: legacy and micro-file; v6.11.0: Agent
Skills), as list_workflows lists them once installed, driven over MCP by the official mcp SDK client in normal and
in yolo mode — each request done the way the dry-run executor would (tests/interfaces/mcp_agent.DryAgent). Every
workflow that completes in dry-run completes over MCP; one server per tree and mode drives its runs one after the
other. Run with -s to see the counts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from interfaces.mcp_agent import TREES, DryAgent, call, install, stdio_server
from stepline import Engine
from stepline.errors import SteplineError
from stepline.families import load_workflow

pytestmark = [pytest.mark.corpus,
              pytest.mark.skipif(not all(p.is_dir() for p in TREES.values()), reason="shared/corpus is not available")]


def _dry_run_completes(project: Path, path: str) -> bool:
    try:
        workflow = load_workflow(project / path, project_root=project)
    except SteplineError:
        return False
    run = asyncio.run(Engine(project_root=project, executor="dry-run", mode="yolo").start(workflow))
    return run.status.value == "completed"


def _sweep(project: Path, mode: str) -> dict[str, tuple[str, int, float]]:
    """Each listed workflow's end state over MCP, the agent's tool calls and the wall time."""

    async def main() -> dict[str, tuple[str, int, float]]:
        ends: dict[str, tuple[str, int, float]] = {}
        async with Client(stdio_server(project)) as client:
            for flow in await call(client, "list_workflows"):
                agent, started = DryAgent(client), time.monotonic()
                try:
                    async with asyncio.timeout(90):
                        final: dict[str, Any] = await agent.drive(flow["path"], mode=mode)
                    status = final["status"]
                except AssertionError as exc:  # start_run refused it (the workflow cannot be read)
                    status = f"refused: {exc}"
                ends[flow["path"]] = (status, agent.calls, time.monotonic() - started)
        return ends

    return asyncio.run(main())


@pytest.mark.parametrize("mode", ["yolo", "normal"])
@pytest.mark.parametrize("tree", list(TREES))
def test_every_corpus_workflow_completes_over_mcp(tmp_path: Path, tree: str, mode: str) -> None:
    project = install(tree, tmp_path / "project")
    ends = _sweep(project, mode)
    done = sorted(path for path, (status, _, _) in ends.items() if status == "completed")
    calls = sum(n for _, n, _ in ends.values())
    print(f"\n{tree} {mode}: {len(done)}/{len(ends)} completed over MCP, {calls} tool calls, "
          f"{sum(t for _, _, t in ends.values()):.0f} s")
    assert len(ends) >= (40 if tree.startswith("v6.0") else 45)  # every workflow is listed, not a few
    missed = {path: status for path, (status, _, _) in ends.items() if status != "completed"}
    for path, status in missed.items():
        print(f"  not completed: {path}: {status[:200]}")
    assert not [path for path in missed if _dry_run_completes(project, path)], missed
