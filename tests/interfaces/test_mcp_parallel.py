"""Issue 29: every request a run waits on is listed by current_step with its own id, and each call names the
request it is for — parallel layers done by one agent in any order, or by several at once.

bmad-build (BMAD v6.11.0) hung at step-04-review over MCP: its review layers run as parallel subagent requests,
the server showed one and then answered "the runtime is busy" forever. Driven here with the official mcp SDK
client over stdio, as an IDE would.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from interfaces.mcp_agent import DryAgent, call, install, stdio_server

BUILD = "_bmad/bmm/ship/bmad-build"

PARALLEL = """\
id: fan
steps:
  - id: plan
    body: Plan the work.
  - id: left
    depends_on: [plan]
    body: Do the left half. MARK-LEFT
  - id: right
    depends_on: [plan]
    body: Do the right half. MARK-RIGHT
  - id: join
    depends_on: [left, right]
    body: Join the halves.
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install("v6.11.0", tmp_path_factory.mktemp("v611") / "project")


def _drive(project: Path, path: str, *, mode: str = "normal", parallel: bool = False) -> tuple[DryAgent, Any]:
    async def main() -> tuple[DryAgent, Any]:
        async with asyncio.timeout(90), Client(stdio_server(project)) as client:
            agent = DryAgent(client, parallel=parallel)
            return agent, await agent.drive(path, mode=mode)

    return asyncio.run(main())


@pytest.mark.corpus
@pytest.mark.parametrize("parallel", [False, True], ids=["one-agent-any-order", "parallel-subagents"])
def test_bmad_build_completes_through_its_parallel_review_layers(installed: Path, tmp_path: Path,
                                                                 parallel: bool) -> None:
    """step-04-review's layers wait together, each with its id and layer; done last-first by one agent or all at
    once, the run completes and the step's continuation gets every layer's result."""
    project = tmp_path / "project"
    shutil.copytree(installed, project)
    agent, final = _drive(project, BUILD, parallel=parallel)
    assert final["status"] == "completed", final
    layers = [r for r in agent.requests if r.get("layer")]
    assert {r["step_id"] for r in layers} == {"step-04-review"}
    assert len(layers) >= 3 and agent.widest == len(layers)  # all of them waited at once
    assert len({r["request_id"] for r in agent.requests}) == len(agent.requests)
    continuation = next(r for r in agent.requests if r["step_id"] == "step-04-review" and not r.get("layer")
                        and "After the subagents" in r["content"])
    for layer in layers:
        assert f"agent: {layer['title']}" in continuation["content"]


def test_parallel_steps_wait_together_and_calls_must_name_their_request(project: Path) -> None:
    """Two steps of one wave both wait; a call without request_id is refused listing both; with ids, done in
    reverse order, the run completes and each write lands in its own step's output."""
    (project / "fan.yaml").write_text(PARALLEL, encoding="utf-8")

    async def main() -> tuple[Any, str, Any]:
        async with asyncio.timeout(60), Client(stdio_server(project)) as client:
            await call(client, "start_run", {"path": "fan.yaml"})
            (plan,) = (await call(client, "current_step"))["requests"]
            await call(client, "finish", {"request_id": plan["request_id"]})
            both = await call(client, "current_step")
            unnamed = await client.call_tool("finish", {"summary": "which one?"})
            for request in reversed(both["requests"]):
                await call(client, "set_var", {"name": f"did_{request['step_id']}", "value": True,
                                               "request_id": request["request_id"]})
                await call(client, "finish", {"summary": request["step_id"], "request_id": request["request_id"]})
            (join,) = (await call(client, "current_step"))["requests"]
            await call(client, "finish", {"request_id": join["request_id"]})
            return both, unnamed.content[0].text, await call(client, "current_step")  # type: ignore[union-attr]

    both, unnamed, final = asyncio.run(main())
    assert both["status"] == "waiting_for_work" and "2 requests are waiting" in both["note"]
    assert sorted(r["step_id"] for r in both["requests"]) == ["left", "right"]
    ids = [r["request_id"] for r in both["requests"]]
    assert len(set(ids)) == 2 and all(r["ends_with"].startswith("finish") for r in both["requests"])
    assert "2 requests are waiting" in unnamed and all(i in unnamed for i in ids) and "request_id" in unnamed
    assert final["status"] == "completed"
    assert [s["status"] for s in final["steps"]] == ["completed"] * 4


def test_while_no_request_waits_current_step_says_what_the_runtime_is_doing(project: Path) -> None:
    """A step whose tool runs for a while: current_step answers 'running', naming the step and the tool and for
    how long, then hands out the step's request once the tool is done."""
    (project / "slow.py").write_text("import time\ntime.sleep(4)\n", encoding="utf-8")
    (project / "slow.yaml").write_text("id: slow\nsteps:\n  - id: build\n    body: Report the build.\n"
                                       "    tools:\n      - name: runScript\n        args: {script: slow.py}\n",
                                       encoding="utf-8")

    async def main() -> tuple[Any, Any]:
        async with asyncio.timeout(60), Client(stdio_server(project)) as client:
            await call(client, "start_run", {"path": "slow.yaml"})
            busy = await call(client, "current_step", {"wait_seconds": 1.5})
            after = await call(client, "current_step", {"wait_seconds": 30})
            await call(client, "finish", {"request_id": after["requests"][0]["request_id"]})
            return busy, after

    busy, after = asyncio.run(main())
    assert busy["status"] == "running" and busy["requests"] == []
    assert "no request waits for you" in busy["note"] and "step 'build' is running the tool 'runScript'" in busy["note"]
    assert after["status"] == "waiting_for_work" and after["requests"][0]["step_id"] == "build"


def test_a_ccw_sessions_parallel_tasks_are_done_by_parallel_subagents(project: Path) -> None:
    """A CCW session whose independent tasks run as one wave: they wait together and, done all at once by
    several callers, complete the session."""
    session = project / ".workflow" / "active" / "WFS-wide"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "ccw_run" / "WFS-wide", session)

    async def main() -> tuple[DryAgent, Any]:
        async with asyncio.timeout(90), Client(stdio_server(project)) as client:
            agent = DryAgent(client, parallel=True)
            return agent, await agent.drive(".workflow/active/WFS-wide")

    agent, final = asyncio.run(main())
    assert final["status"] == "completed", final
    assert agent.widest > 1 and len({r["step_id"] for r in agent.requests}) == 9
