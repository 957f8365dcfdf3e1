"""An IDE agent drives a BMAD micro-file workflow to completion over a real MCP stdio session (issue 7)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from mcp import Client

from interfaces.mcp_agent import call as _call
from interfaces.mcp_agent import stdio_server

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "project"
WORKFLOW = "_bmad/demo/workflows/menus"
UNIQUE = {"step-01-start": "UNIQUE-TEXT-OF-STEP-ONE", "step-02-draft": "UNIQUE-TEXT-OF-STEP-TWO",
          "step-03-done": "UNIQUE-TEXT-OF-STEP-THREE"}


def test_agent_completes_a_micro_file_workflow_one_just_in_time_step_at_a_time(tmp_path: Path) -> None:
    """The agent sees each step file only when it is current, answers the menus with C, and the runtime
    builds the document and its stepsCompleted frontmatter."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    texts = {sid: next(p for p in (project / WORKFLOW / "steps").glob(f"{sid}.md")).read_text() for sid in UNIQUE}
    assert all(marker in texts[sid] for sid, marker in UNIQUE.items())
    server = stdio_server(project)

    async def drive() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        async with asyncio.timeout(90), Client(server) as client:
            started = await _call(client, "start_run", {"path": WORKFLOW, "mode": "yolo"})
            while True:
                current = await _call(client, "current_step", {"wait_seconds": 20})
                if current["status"] != "waiting_for_work":
                    break
                (step,) = current["requests"]
                seen.append(step)
                sid, rid = step["step_id"], step["request_id"]
                if step["kind"] == "decide":
                    await _call(client, "decide", {"value": True, "reason": "agent agrees", "request_id": rid})
                    continue
                if step["kind"] == "work" and sid in UNIQUE:
                    await _call(client, "write_output", {"content": f"\n## {sid}\nwritten by the agent\n",
                                                         "request_id": rid})
                keys = [option["key"] for option in step.get("menu") or []]
                choice = "C" if "C" in keys else (keys[0] if keys else (step.get("choices") or [None])[0])
                await _call(client, "finish", {"choice": choice, "summary": f"did {sid}", "request_id": rid})
            return seen, await _call(client, "run_status", {"run_id": started["run_id"]})

    seen, status = asyncio.run(drive())
    assert status["status"] == "completed", status
    work = [s for s in seen if s["kind"] == "work" and s["step_id"] in UNIQUE]
    assert [s["step_id"] for s in work] == list(UNIQUE)
    order = list(UNIQUE)
    for index, step in enumerate(work):  # just-in-time: no text of any later step reached the agent
        payload = json.dumps(step)
        assert UNIQUE[order[index]] in payload
        assert all(UNIQUE[later] not in payload for later in order[index + 1:])
    document = (project / "out" / "notes-demo.md").read_text()
    assert "written by the agent" in document
    frontmatter = document.split("---")[1]
    assert "stepsCompleted" in frontmatter and all(str(n) in frontmatter for n in (1, 2, 3))
