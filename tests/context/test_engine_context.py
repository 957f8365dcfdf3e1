"""TELIS in a run: resolved before the executor, journaled, on the RunStep, in every executor's view, shown by
`stepline show`; BMAD and CCW steps given TELIS inputs by the runtime config; a bad input fails the step clearly."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from stepline import Engine
from stepline.context import TelisConfig, TelisInputRule
from stepline.context._lsp import find_command
from stepline.engine._config import RuntimeConfig, load_runtime_config
from stepline.executors import Executor, StepRequest, StepSession
from stepline.model import Run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HAS_PYLSP = find_command(["pylsp"]) is not None
MODULE = ('def area(width: float, height: float) -> float:\n    """Area of a rectangle."""\n'
          "    return width * height\n\n\nprint(area(2, 3))\n")


class Recorder(Executor):
    """Keeps every request and finishes it."""

    name = "recorder"
    pure = True

    def __init__(self) -> None:
        self.requests: list[StepRequest] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.requests.append(request)
        await session.finish(summary="done")


def _docs(project: Path) -> None:
    (project / "docs").mkdir(exist_ok=True)
    (project / "docs" / "shapes.md").write_text(
        "# Shapes\n\nShapes have an area.\n\n## Rectangles\n\nA rectangle's area is width times height.\n\n"
        "## Circles\n\nA circle's area is pi times the radius squared.\n", encoding="utf-8")
    (project / "docs" / "deploy.md").write_text("# Deploy\n\nDeploys run on Fridays.\n", encoding="utf-8")
    (project / "geometry.py").write_text(MODULE, encoding="utf-8")


def _native(project: Path, steps: list[dict[str, Any]]) -> Run:
    from stepline.families import load_workflow

    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "ctx", "steps": steps}), encoding="utf-8")
    return load_workflow(project / "flow.yaml", project_root=project)  # type: ignore[return-value]


def _pylsp_children() -> list[psutil.Process]:
    return [p for p in psutil.Process(os.getpid()).children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE and "pylsp" in " ".join(p.cmdline())]


@pytest.mark.skipif(not HAS_PYLSP, reason="pylsp is not installed")
def test_a_step_gets_its_context_before_the_executor_and_the_server_ends_with_the_run(project: Path) -> None:
    """The request carries the shards and pylsp's hover; the RunStep holds the same context; the journal has it
    with its fingerprint; a step that asks for nothing gets nothing; no pylsp process outlives the run."""
    _docs(project)
    spec = _native(project, [
        {"id": "plain", "body": "No context here."},
        {"id": "measure", "body": "Compute areas.", "inputs": {
            "telis_query": "rectangle area", "telis_shard_limit": 2, "telis_document_path": "geometry.py",
            "telis_line": 5, "telis_character": 7, "telis_method": "hover"}},
    ])
    executor = Recorder()
    engine = Engine(project_root=project, executor=executor)
    run = asyncio.run(engine.start(spec))
    assert run.status.value == "completed"
    plain, measure = executor.requests
    assert plain.telis_context is None and run.steps["plain"].telis_context is None
    context = measure.telis_context
    assert context is not None and context == run.steps["measure"].telis_context
    assert context["shards"][0]["id"] == "docs/shapes.md#rectangles"
    assert "area(width: float, height: float) -> float" in context["lsp"]["result"]["text"]
    assert "Area of a rectangle." in context["lsp"]["result"]["text"]
    events = [e for e in engine.store.open(run.run_id).events() if e.type == "ContextResolved"]
    assert [e.step_id for e in events] == ["measure"]
    assert events[0].data["fingerprint"] == context["fingerprint"]
    assert _pylsp_children() == []


def test_every_executor_is_given_the_context(project: Path) -> None:
    """The LLM executors' prompt, the CLI agent's prompt and the MCP step payload carry the context."""
    from stepline.executors._llm import build_prompt as llm_prompt
    from stepline.executors._mcp_bridge import step_payload
    from stepline.executors.cli_agents import build_prompt as agent_prompt

    _docs(project)
    executor = Recorder()
    spec = _native(project, [{"id": "s", "body": "Write.", "inputs": {"telis_query": "deploy fridays"}}])
    asyncio.run(Engine(project_root=project, executor=executor).start(spec))
    (request,) = executor.requests
    _, user = llm_prompt(request)
    assert "## Context (TELIS)" in user and "Deploys run on Fridays." in user
    assert "## Context (TELIS)" in agent_prompt(request, "write") and "Deploy (docs/deploy.md" in agent_prompt(
        request, "write")
    assert step_payload(request)["telis_context"]["shards"][0]["source"] == "docs/deploy.md"


def test_stepline_show_prints_each_steps_context(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`stepline show` has the ContextResolved event and a section with the shards, their tiers and sources."""
    from stepline.interfaces.cli._app import run_cli

    _docs(project)
    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "ctx", "steps": [
        {"id": "s", "inputs": {"telis_query": "circle radius", "telis_shard_limit": 1}}]}), encoding="utf-8")
    assert run_cli(["run", "flow.yaml", "--executor", "dry-run", "--yolo", "-C", str(project), "-q"]) == 0
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    capsys.readouterr()
    assert run_cli(["show", run_id, "-C", str(project)]) == 0
    out = capsys.readouterr().out
    assert "ContextResolved" in out and "context (TELIS):" in out
    assert "[full] Shapes › Circles (docs/shapes.md" in out


def test_a_bad_telis_input_fails_the_step_with_one_clear_line(project: Path) -> None:
    """telis_line that is not a number: the step fails, naming the step and the input."""
    spec = _native(project, [{"id": "s", "inputs": {"telis_query": "x", "telis_document_path": "a.py",
                                                    "telis_line": "seven"}}])
    run = asyncio.run(Engine(project_root=project, executor=Recorder()).start(spec))
    assert run.status.value == "failed"
    assert run.steps["s"].error == "step 's': telis_line must be an integer, not 'seven'"


def test_bmad_steps_get_telis_inputs_from_input_file_patterns_by_config(project: Path) -> None:
    """A rule in config/runtime.yaml searches the documents a BMAD workflow's input_file_patterns name, with the
    step's goal as the query; the workflow files are not changed."""
    from stepline.families import load_workflow

    shutil.copytree(FIXTURES / "bmad_run", project / "wf")
    (project / "config").mkdir()
    (project / "config" / "runtime.yaml").write_text(yaml.safe_dump({"telis": {"docs": [], "inputs": [{
        "formats": ["bmad-legacy"], "documents": ["workflow.meta.input_file_patterns"],
        "query": ["step.name", "step.description", "variables.epic_num"]}]}}), encoding="utf-8")
    config = load_runtime_config(project)
    spec = load_workflow(project / "wf" / "inputs", project_root=project)
    executor = Recorder()
    run = asyncio.run(Engine(project_root=project, executor=executor, config=config, mode="yolo").start(
        spec, {"epic_num": "2"}))
    assert run.status.value == "completed", run.error
    contexts = [r.telis_context for r in executor.requests if r.telis_context]
    assert contexts, "no request carried a context"
    sources = {s["source"] for c in contexts for s in c["shards"]}
    assert sources and all(s.startswith("wf/inputs/docs/") for s in sources)
    documents = contexts[0]["request"]["documents"]
    assert any(d.endswith("wf/inputs/docs/*prd*/*.md") for d in documents)


def test_ccw_tasks_get_telis_inputs_from_focus_paths_by_config(tmp_path: Path) -> None:
    """A rule reads each task's JSON (load: step.meta.task_json): its title and requirements are the query, its
    focus_paths the documents; each task's context comes from its own folder first."""
    from stepline.ccw._driver import execute_session

    project = tmp_path / "project-active"
    shutil.copytree(FIXTURES / "ccw" / "project-active", project)
    for folder, text in {"src/auth/api": "# Auth API\n\nThe API issues JSON web tokens on login.\n",
                         "src/ui/login": "# Login form\n\nThe login form posts the user's credentials.\n",
                         "src/db": "# Schema\n\nThe users table stores password hashes.\n"}.items():
        (project / folder).mkdir(parents=True)
        (project / folder / "NOTES.md").write_text(text, encoding="utf-8")
    rule = TelisInputRule(formats=["ccw"], load="step.meta.task_json",
                          query=["file.title", "file.context.requirements"],
                          documents=["file.context.focus_paths"], set={"telis_shard_limit": 1})
    config = RuntimeConfig(telis=TelisConfig(docs=[], inputs=[rule]))
    config.tools.risk_policy.high_requires_approval = False
    executor = Recorder()
    engine = Engine(project_root=project, executor=executor, config=config)
    run = asyncio.run(execute_session(engine, project / ".workflow" / "active" / "WFS-auth-system"))
    assert run.status.value == "completed", run.error
    by_step = {r.step_id: r.telis_context for r in executor.requests}
    assert by_step["IMPL-1.2"]["shards"][0]["source"] == "src/ui/login/NOTES.md"
    assert by_step["IMPL-1.3"]["shards"][0]["source"] == "src/db/NOTES.md"
    assert by_step["IMPL-1.2"]["request"]["documents"] == ["src/ui/login"]
    assert json.dumps(by_step["IMPL-1.3"]).count("password hashes") == 1
