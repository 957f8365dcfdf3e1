"""An agent skill's menu (its customization's ``[[agent.menu]]``): its activation ends with "Stop and wait for
input", so the runtime presents the items and blocks for the person's choice, through the step-chain menu
mechanism (exit 9, `stepline answer`, `stepline resume`); an item's ``prompt`` is one request, an item's ``skill``
runs next within the same run (its steps loaded with the agent's, under its name, its own customization); in #yolo
the executor chooses (journaled)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from stepline import Engine
from stepline.engine._human import HumanChannel
from stepline.families import register_drivers

from .conftest import Recorder

register_drivers()
PM = "_bmad/bmm/agents/bmad-agent-pm"

_AGENT = """---
name: my-agent
description: A hand-written agent persona.
---

# My Agent

## On Activation

### Step 1: Greet

Greet the user as {agent.name}.

### Step 2: Present the Menu

Render `{agent.menu}` as a numbered table. **Stop and wait for input.** Dispatch on a clear match.
"""
_CUSTOMIZE = """[agent]
name = "Ada"

[[agent.menu]]
code = "WF"
description = "Run my workflow"
skill = "my-workflow"

[[agent.menu]]
code = "EX"
description = "Explain the project"
prompt = "Explain the project in three sentences."
"""
_WORKFLOW = """---
name: my-workflow
description: A one-section workflow.
---

# My Workflow

## On Activation

Nothing to set up.

## Work

Write the notes.
"""


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env, check=False)


def _agent(tmp_path: Path) -> tuple[Path, Path]:
    """A project and a hand-written agent skill beside the workflow skill its menu names."""
    for folder, files in {"agents/my-agent": {"SKILL.md": _AGENT, "customize.toml": _CUSTOMIZE},
                          "workflows/my-workflow": {"SKILL.md": _WORKFLOW}}.items():
        (tmp_path / "src" / folder).mkdir(parents=True)
        for name, text in files.items():
            (tmp_path / "src" / folder / name).write_text(text, encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
    return project, tmp_path / "src" / "agents" / "my-agent"


def _run_id(project: Path) -> str:
    (run_dir,) = (project / ".stepline" / "runs").iterdir()
    return run_dir.name


def test_nobody_at_the_terminal_blocks_at_the_agent_menu_and_a_skill_item_runs_within_the_run(tmp_path: Path) -> None:
    project, agent = _agent(tmp_path)
    first = _cli(project, "run", str(agent), "--executor", "dry-run")
    assert first.returncode == 9, first.stdout + first.stderr
    assert "[WF] Run my workflow" in first.stdout and "[EX] Explain the project" in first.stdout
    run_id = _run_id(project)
    assert _cli(project, "answer", run_id, "WF").returncode == 0
    recorder = Recorder()
    run = asyncio.run(Engine(project_root=project, executor=recorder,
                             human=HumanChannel(interactive=False)).resume(run_id))
    assert run.status.value == "completed", run.error
    assert [r.step_id for r in recorder.work()][-1] == "my-workflow:section-work"
    assert "Write the notes." in recorder.work()[-1].content
    events = Engine(project_root=project).store.open(run_id).events()
    (menu,) = [e.data for e in events if e.type == "CallRecorded" and e.data.get("op") == "agent-menu"]
    assert menu["result"] == {"choice": "WF", "skill": "my-workflow", "step": "my-workflow:activate", "by": "person"}


def test_a_prompt_item_is_one_request_with_its_prompt(tmp_path: Path) -> None:
    project, agent = _agent(tmp_path)
    first = _cli(project, "run", str(agent), "--executor", "dry-run")
    assert first.returncode == 9, first.stdout + first.stderr
    run_id = _run_id(project)
    assert _cli(project, "answer", run_id, "ex").returncode == 0
    recorder = Recorder()
    run = asyncio.run(Engine(project_root=project, executor=recorder,
                             human=HumanChannel(interactive=False)).resume(run_id))
    assert run.status.value == "completed", run.error
    assert [r.content for r in recorder.work() if r.step_id == "agent-menu"] == [
        "Explain the project in three sentences."]


def test_yolo_the_executor_chooses_at_the_agent_menu(tmp_path: Path) -> None:
    project, agent = _agent(tmp_path)
    done = _cli(project, "run", str(agent), "--executor", "dry-run", "--yolo")
    assert done.returncode == 0, done.stdout + done.stderr
    events = Engine(project_root=project).store.open(_run_id(project)).events()
    (menu,) = [e.data for e in events if e.type == "CallRecorded" and e.data.get("op") == "agent-menu"]
    assert menu["result"]["by"] == "executor" and menu["result"]["choice"] in ("WF", "EX")


def test_the_pm_agent_blocks_at_its_menu_with_its_merged_items(v611: Path) -> None:
    """v6.11.0's bmad-agent-pm: its customize.toml's four items, PRD's skill dispatched by answer and resume."""
    first = _cli(v611, "run", PM, "--executor", "dry-run")
    assert first.returncode == 9, first.stdout + first.stderr
    for item in ("[PRD] Create, update, or validate a PRD", "[CE] Create the Epics", "[IR] Check implementation",
                 "[CC] Determine how to proceed"):
        assert item in first.stdout
    run_id = _run_id(v611)
    assert _cli(v611, "answer", run_id, "PRD").returncode == 0
    done = _cli(v611, "resume", run_id, "--executor", "dry-run")
    assert done.returncode == 9, done.stdout + done.stderr  # bmad-prd runs on, to its first question
    assert "bmad-prd:section-discovery" in done.stdout + done.stderr


def test_over_mcp_the_agent_menu_comes_back_as_a_question_with_its_items(v611: Path) -> None:
    """Through the MCP server (stdio, the mcp SDK client): after the activation's work, the PM agent's menu is
    waiting_for_answer with its items' codes; the answer runs the item's skill on, to its first question."""
    from mcp import Client

    from interfaces.mcp_agent import call, stdio_server

    async def main() -> tuple[list[dict[str, Any]], str]:
        asked: list[dict[str, Any]] = []
        async with asyncio.timeout(90), Client(stdio_server(v611)) as client:
            run_id = (await call(client, "start_run", {"path": PM, "mode": "normal"}))["run_id"]
            while True:
                current = await call(client, "current_step", {"wait_seconds": 30})
                if current["status"] not in ("waiting_for_work", "waiting_for_answer", "running"):
                    return asked, str(current["status"])
                for request in current.get("requests") or []:
                    rid = request["request_id"]
                    if request["waiting_for"] == "answer":
                        asked.append({**request, "status": current["status"]})
                        if len(asked) > 1:
                            return asked, str(current["status"])
                        await call(client, "answer", {"run_id": run_id, "request_id": rid, "answer": "CE"})
                    else:
                        await call(client, "finish", {"request_id": rid, "summary": "done"})

    asked, _ = asyncio.run(main())
    assert [(q["status"], q["step_id"], q["choices"]) for q in asked[:1]] == [
        ("waiting_for_answer", "agent-menu", ["PRD", "CE", "IR", "CC"])]
    assert asked[1]["step_id"].startswith("bmad-create-epics-and-stories:"), asked[1]
