"""The ``stepline mcp`` server, driven by a real MCP client over stdio."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from interfaces.mcp_agent import call as _call
from interfaces.mcp_agent import stdio_server
from stepline.interfaces.mcp import find_workflows

WORKFLOW = """\
id: trio
name: Three steps
variables: {topic: owls}
steps:
  - id: outline
    name: Outline
    body: "Outline an article about {topic}. MARK-ONE"
    outputs: [out/outline.md]
  - id: draft
    name: Draft
    body: "Draft the article from the outline. MARK-TWO"
    outputs: [out/draft.md]
  - id: review
    name: Review
    body: "Review the draft and note one improvement. MARK-THREE"
    outputs: [out/review.md]
"""

GATED = """\
id: gated
steps:
  - id: only
    name: Only
    human_gate: required
    body: "Write the approved note. MARK-GATED"
    outputs: [note.md]
"""

MARKS = ["MARK-ONE", "MARK-TWO", "MARK-THREE"]


def _server(project: Path, *, entry_point: bool) -> StdioServerParameters:
    if entry_point:
        return StdioServerParameters(command=str(Path(sys.executable).parent / "stepline"),
                                     args=["mcp", "--project-root", str(project)], cwd=str(project))
    return stdio_server(project)


def _drive(project: Path, body: Callable[[Client], Awaitable[Any]], *, entry_point: bool = False) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(60), Client(_server(project, entry_point=entry_point)) as client:
            return await body(client)

    return asyncio.run(main())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "trio.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "flows" / "gated.yaml").write_text(GATED, encoding="utf-8")
    (tmp_path / "notes.yaml").write_text("just: data\n", encoding="utf-8")
    return tmp_path


def test_agent_drives_a_native_workflow_to_completion_one_step_at_a_time(project: Path) -> None:
    """An MCP client lists, starts and completes a 3-step run, and each step's payload hides later steps."""

    async def body(client: Client) -> dict[str, Any]:
        listed = await _call(client, "list_workflows")
        assert {"path": "flows/trio.yaml", "format": "native"} in listed
        assert all(item["path"] != "notes.yaml" for item in listed)
        started = await _call(client, "start_run", {"path": "flows/trio.yaml"})
        seen: list[str] = []
        while True:
            current = await _call(client, "current_step", {"wait_seconds": 10})
            if current["status"] != "waiting_for_work":
                break
            (step,) = current["requests"]
            payload = json.dumps(step)
            index = len(seen)
            assert MARKS[index] in payload
            assert all(later not in payload for later in MARKS[index + 1:])
            seen.append(step["step_id"])
            await _call(client, "write_output", {"content": f"# {step['title']}\nby the agent\n",
                                                 "request_id": step["request_id"]})
            await _call(client, "set_var", {"name": f"done_{step['step_id']}", "value": True})
            await _call(client, "finish", {"summary": f"did {step['step_id']}"})
        assert seen == ["outline", "draft", "review"]
        assert current["status"] == "completed"
        status = await _call(client, "run_status", {"run_id": started["run_id"]})
        return status

    status = _drive(project, body)
    assert status["status"] == "completed"
    assert [s["status"] for s in status["steps"]] == ["completed"] * 3
    assert (project / "out" / "outline.md").read_text(encoding="utf-8") == "# Outline\nby the agent\n"
    assert (project / "out" / "review.md").read_text(encoding="utf-8") == "# Review\nby the agent\n"


def test_protocol_mistakes_are_refused_and_the_agent_can_correct_them(project: Path) -> None:
    """A request id that is not waiting, a path outside the project and a call before any run are errors the
    agent sees."""

    async def body(client: Client) -> list[str]:
        errors = []
        early = await client.call_tool("write_output", {"content": "x"})
        errors.append(early.content[0].text)  # type: ignore[union-attr]
        await _call(client, "start_run", {"path": "flows/trio.yaml"})
        await _call(client, "current_step")
        wrong = await client.call_tool("write_output", {"content": "x", "request_id": "r9"})
        errors.append(wrong.content[0].text)  # type: ignore[union-attr]
        outside = await client.call_tool("write_output", {"content": "x", "path": "../escape.md"})
        errors.append(outside.content[0].text)  # type: ignore[union-attr]
        await _call(client, "write_output", {"content": "fine\n"})
        await _call(client, "finish")
        current = await _call(client, "current_step")
        errors.append(current["requests"][0]["step_id"])
        return errors

    early, wrong, outside, next_step = _drive(project, body, entry_point=True)
    assert "no step is waiting for work" in early
    assert "request 'r9' is not waiting (waiting: r1 (outline))" in wrong
    assert "outside the project root" in outside
    assert next_step == "draft"
    assert not (project.parent / "escape.md").exists()


def test_a_gated_step_blocks_until_the_gate_is_decided_over_mcp(project: Path) -> None:
    """A required human gate blocks the run; list_gates shows it, decide_gate approves, resume_run completes."""

    async def body(client: Client) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
        started = await _call(client, "start_run", {"path": "flows/gated.yaml"})
        blocked = await _call(client, "current_step")
        gates = await _call(client, "list_gates", {"run_id": started["run_id"]})
        await _call(client, "decide_gate", {"run_id": started["run_id"], "gate_id": gates[0]["gate_id"],
                                            "by": "ada", "notes": "fine"})
        await _call(client, "resume_run", {"run_id": started["run_id"]})
        step = await _call(client, "current_step")
        assert "MARK-GATED" in json.dumps(step)
        await _call(client, "write_output", {"content": "approved\n"})
        await _call(client, "finish", {"summary": "wrote it"})
        final = await _call(client, "current_step")
        return blocked, gates, final

    blocked, gates, final = _drive(project, body)
    assert blocked["status"] == "blocked"
    assert [g["gate_id"] for g in gates] == ["step:only"]
    assert final["status"] == "completed"
    assert (project / "note.md").read_text(encoding="utf-8") == "approved\n"


def test_workflow_listing_finds_every_format_and_skips_run_storage(tmp_path: Path) -> None:
    """Native files, BMAD workflow.yaml / workflow*.md, Agent Skills and CCW sessions are listed; .stepline, data
    and a workflow's templates are not."""
    (tmp_path / "native.yaml").write_text(GATED, encoding="utf-8")
    (tmp_path / "bmad" / "prd").mkdir(parents=True)
    (tmp_path / "bmad" / "prd" / "workflow.yaml").write_text("name: prd\ninstructions: i.md\n", encoding="utf-8")
    (tmp_path / "bmad" / "brief").mkdir()
    (tmp_path / "bmad" / "brief" / "workflow-brief.md").write_text("---\nname: brief\n---\n", encoding="utf-8")
    session = tmp_path / ".workflow" / "active" / "WFS-auth"
    (session / ".task").mkdir(parents=True)
    (session / "workflow-session.json").write_text("{}", encoding="utf-8")
    (session / ".task" / "IMPL-1.json").write_text("{}", encoding="utf-8")
    (tmp_path / ".stepline" / "runs").mkdir(parents=True)
    (tmp_path / ".stepline" / "runs" / "copy.yaml").write_text(GATED, encoding="utf-8")
    (tmp_path / "package.json").write_text("{}", encoding="utf-8")
    (tmp_path / "bmad" / "brief" / "templates").mkdir()  # a workflow's own resources are not workflows
    (tmp_path / "bmad" / "brief" / "templates" / "workflow-template.md").write_text("---\nname: t\n---\n")
    skill = tmp_path / "skills" / "bmad-build"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: bmad-build\ndescription: Build.\n---\nBuild it.\n")
    (skill / "workflow.md").write_text("Follow step-01.\n", encoding="utf-8")
    assert sorted(find_workflows(tmp_path), key=lambda item: item["path"]) == [
        {"path": ".workflow/active/WFS-auth", "format": "ccw"},
        {"path": "bmad/brief/workflow-brief.md", "format": "bmad-microfile"},
        {"path": "bmad/prd/workflow.yaml", "format": "bmad-legacy"},
        {"path": "native.yaml", "format": "native"},
        {"path": "skills/bmad-build", "format": "bmad-skill"},  # a skill is its folder, listed once
    ]
