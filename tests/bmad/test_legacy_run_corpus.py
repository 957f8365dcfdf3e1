"""The real BMAD corpus through the legacy interpreter: every workflow in yolo dry-run, dev-story and create-story."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bmad.test_legacy_run import RulesExecutor
from conftest import CORPUS
from stepline import Engine
from stepline.bmad._legacy_driver import condition_counts
from stepline.errors import ReaderError
from stepline.families import load_workflow
from stepline.interfaces.cli._app import run_cli
from stepline.model import Run

BMAD = CORPUS / "bmad" / "v6.0.0-alpha.23"
EXTRAS = CORPUS / "bmad" / "extras"
#: Upstream files whose tag nesting the reader recovers (the open tag closed at its parent's end, as an HTML
#: parser does), and the warning the run's first step says it with.
RECOVERED = {"document-project": "document-project/instructions.md:128: <check> opened on line 62 is closed by "
                                 "</step> on line 128"}

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason="the corpus is not present")]


def _install(project: Path) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    code = run_cli(["bmad", "install", str(BMAD), "--project", str(project), "--extras", str(EXTRAS),
                    "--set", "user_name=Ada"])
    assert code == 0
    return project


@pytest.fixture
def installed(project: Path) -> Path:
    """The corpus installed into the project with `stepline bmad install`."""
    return _install(project)


def _run(project: Path, name: str, executor: Any, **variables: Any) -> tuple[Engine, Run]:
    path = next(p for p in (project / "_bmad").rglob("workflow.yaml") if p.parent.name == name)
    engine = Engine(project_root=project, executor=executor, mode="yolo")
    return engine, asyncio.run(engine.start(load_workflow(path, project_root=project, variables=variables)))


def _runtime_decisions(engine: Engine, run: Run) -> dict[str, bool]:
    return {e.data["args"]["condition"]: e.data["result"]["value"]["value"]
            for e in engine.store.open(run.run_id).events()
            if e.type == "CallRecorded" and e.data["op"] == "legacy:condition"
            and e.data["result"]["value"]["by"] == "runtime"}


def test_every_legacy_workflow_runs_to_completion_in_yolo_dry_run(tmp_path: Path) -> None:
    """All 26 corpus workflows are read and complete, template ones with their output; the one whose tag nesting
    the reader recovered runs too, its first step saying where (file:line), as validate warns."""
    project = _install(tmp_path / "corpus")
    runs: dict[str, Run] = {}
    failed: dict[str, str] = {}
    for path in sorted((project / "_bmad").rglob("workflow.yaml")):
        try:
            spec = load_workflow(path, project_root=project)
        except ReaderError as exc:
            failed[path.parent.name] = str(exc)
            continue
        assert spec.format == "bmad-legacy"
        runs[path.parent.name] = asyncio.run(Engine(project_root=project, executor="dry-run", mode="yolo").start(spec))
    assert len(runs) + len(failed) == 26
    failed |= {name: run.error or "" for name, run in runs.items() if run.status.value != "completed"}
    assert failed == {}
    for name, fragment in RECOVERED.items():
        assert fragment in " ".join(step.summary or "" for step in runs[name].steps.values())
    for name, run in runs.items():
        if run.status.value == "completed" and isinstance(run.workflow.meta.get("template"), str):
            output = project / run.cursor["output"]
            assert output.is_file() and "{{" not in output.read_text(), name
    assert sum(condition_counts(run)["runtime"] for run in runs.values()) > 0


def test_dev_story_finds_the_story_in_sprint_status_loops_over_tasks_and_marks_it_for_review(installed: Path) -> None:
    """dev-story: sprint-status discovery by file checks, the step 8 -> 5 task loop, completion through step 9."""
    impl = installed / "_bmad-output" / "implementation-artifacts"
    impl.mkdir(parents=True)
    sprint = impl / "sprint-status.yaml"
    sprint.write_text("development_status:\n  epic-1: in-progress\n  1-1-login: done\n  1-2-signup: ready-for-dev\n")
    (impl / "1-2-signup.md").write_text("# Story 1.2: Signup\n\nStatus: ready-for-dev\n\n## Tasks\n\n- [ ] Form\n")
    executor = RulesExecutor(
        sets={"Find the FIRST story": {"story_key": "1-2-signup"}, "for later use": {"current_sprint_status": "x"}},
        writes={"Update development_status[1-2-signup]": (str(sprint.relative_to(installed)),
                                                          "development_status:\n  1-2-signup: review\n")},
        decisions={"current status == 'ready-for-dev'": True, "more tasks remain": [True, False],
                   "no tasks remain": True})
    engine, run = _run(installed, "dev-story", executor)
    assert run.status.value == "completed", run.error
    started = [e.step_id for e in engine.store.open(run.run_id).events() if e.type == "WorkflowStepStarted"]
    assert started == ["step-1", "step-2", "step-3", "step-4", "step-5", "step-6", "step-7", "step-8",
                       "step-5@2", "step-6@2", "step-7@2", "step-8@2", "step-9", "step-10"]
    decided = _runtime_decisions(engine, run)
    assert decided["{{story_path}} is provided"] is False and decided["{{sprint_status}} file exists"] is True
    assert decided["{sprint_status} file exists AND {{current_sprint_status}} != 'no-sprint-tracking'"] is True
    assert "1-2-signup: review" in sprint.read_text()
    assert any("Find the FIRST story" in r.content for r in executor.requests if r.step_id == "step-1")


def test_dev_story_with_a_story_path_jumps_to_the_task_check_anchor(installed: Path) -> None:
    """A given story_path takes the goto anchor="task_check": sprint discovery is never asked for."""
    story = installed / "story.md"
    story.write_text("# Story\n")
    executor = RulesExecutor(decisions={"no incomplete tasks": True})
    engine, run = _run(installed, "dev-story", executor, story_path=str(story))
    assert run.status.value == "completed", run.error
    first = "\n".join(r.content for r in executor.requests if r.step_id == "step-1")
    assert "Use " + str(story) + " directly" in first and "Parse sections" in first
    assert "Find the FIRST story" not in first
    started = [e.step_id for e in engine.store.open(run.run_id).events() if e.type == "WorkflowStepStarted"]
    assert started[:2] == ["step-1", "step-6"]


def test_create_story_writes_the_story_document_section_by_section(installed: Path) -> None:
    """create-story: prose GOTO step 2a, discovery of the epics, 10 sections in order, placeholders filled."""
    planning = installed / "_bmad-output" / "planning-artifacts"
    planning.mkdir(parents=True)
    (planning / "epics.md").write_text("# Epics\n\n## Story 1.2: Signup\n")
    names = ["story_header", "story_requirements", "developer_context_section", "technical_requirements",
             "architecture_compliance", "library_framework_requirements", "file_structure_requirements",
             "testing_requirements", "project_context_reference", "story_completion_status"]
    executor = RulesExecutor(
        decisions={"is provided by user": True},
        sets={"from user input": {"epic_num": 1, "story_num": 2, "story_key": "1-2-signup", "story_title": "Signup"}},
        sections={name: f"### {name}\n\n{name} for 1-2-signup" for name in names},
        answers={"should role say": "shopper", "should action say": "to sign up", "should benefit say": "I can buy",
                 "should agent_model_name_version say": "test-model"})
    _engine, run = _run(installed, "create-story", executor)
    assert run.status.value == "completed", run.error
    assert "# Epics" in run.variables["epics_content"]
    text = (installed / "_bmad-output" / "implementation-artifacts" / "1-2-signup.md").read_text()
    assert text.startswith("# Story 1.2: Signup\n\nStatus: ready-for-dev\n")
    assert "As a shopper,\nI want to sign up,\nso that I can buy." in text
    assert "### Agent Model Used\n\ntest-model\n" in text
    positions = [text.index(f"### {name}\n\n{name} for 1-2-signup") for name in names]
    assert positions == sorted(positions) and positions[0] > text.index("### File List")
    for skipped in ("previous_story_intelligence", "git_intelligence_summary", "latest_tech_information"):
        assert skipped not in text
    assert "{{" not in text
    task = next(r for r in executor.requests if r.step_id == "step-6" and "validate-workflow" in r.content)
    assert "Run this task: Validate against checklist" in task.content
