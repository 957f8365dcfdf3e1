"""The BMAD legacy interpreter: order and jumps, conditions, modes, template-output, discovery, children, resume."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.bmad._conditions import classify
from stepline.bmad._conditions_driver import evaluate
from stepline.bmad._discover import discover_inputs
from stepline.bmad._legacy_driver import condition_counts
from stepline.engine import HumanChannel, RuntimeConfig
from stepline.executors import Executor, StepRequest, StepSession
from stepline.families import load_workflow
from stepline.interfaces.cli._app import run_cli
from stepline.model import Run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bmad_run"


def _pick(rules: dict[str, Any], text: str, default: Any) -> Any:
    for needle, value in rules.items():
        if needle in text:
            if isinstance(value, list):
                return value.pop(0) if len(value) > 1 else value[0]
            return value
    return default


class RulesExecutor(Executor):
    """Decides, answers and writes by substring rules (lists are consumed in order); ``work`` requests may set
    variables (``sets``: text in the request -> variables) or write files (``writes``: text -> (path, content))."""

    name = "rules"
    pure = True

    def __init__(self, *, decisions: dict[str, Any] | None = None, answers: dict[str, Any] | None = None,
                 sections: dict[str, Any] | None = None, sets: dict[str, dict[str, Any]] | None = None,
                 writes: dict[str, tuple[str, str]] | None = None) -> None:
        self.decisions = decisions or {}
        self.answers = answers or {}
        self.sections = sections or {}
        self.sets = sets or {}
        self.writes = writes or {}
        self.requests: list[StepRequest] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Answer one request by the rules."""
        self.requests.append(request)
        if request.kind == "decide":
            await session.decide(bool(_pick(self.decisions, request.condition or "", False)), "by rule")
        elif request.kind == "answer":
            answer = str(_pick(self.answers, request.question or "", "ok"))
            await session.finish(choice=answer, summary=answer)
        elif request.kind == "generate":
            section = request.section or ""
            text = str(_pick(self.sections, section, f"{section} text"))
            await session.write_output(text, section=section, mode="section")
            await session.finish(summary=f"wrote {section}")
        else:
            for needle, values in self.sets.items():
                if needle in request.content:
                    for name, value in values.items():
                        await session.set_var(name, value)
            for needle, (path, content) in self.writes.items():
                if needle in request.content:
                    await session.write_output(content, path=path, mode="replace")
            await session.finish(summary="done")

    def of_kind(self, kind: str) -> list[StepRequest]:
        """The requests of one kind, in order."""
        return [r for r in self.requests if r.kind == kind]


@pytest.fixture
def wf(project: Path) -> Path:
    """The fixture workflows installed at ``<project>/wf``."""
    shutil.copytree(FIXTURES, project / "wf")
    return project / "wf"


def _run(project: Path, name: str, executor: Any, mode: str = "yolo", **engine: Any) -> tuple[Engine, Run]:
    spec = load_workflow(project / "wf" / name, project_root=project)
    eng = Engine(project_root=project, executor=executor, mode=mode, **engine)  # type: ignore[arg-type]
    return eng, asyncio.run(eng.start(spec))


def _events(engine: Engine, run: Run, kind: str) -> list[Any]:
    return [e for e in engine.store.open(run.run_id).events() if e.type == kind]


def _started(engine: Engine, run: Run) -> list[str]:
    return [e.step_id for e in _events(engine, run, "WorkflowStepStarted")]


def _prompter(answers: dict[str, list[str]], asked: list[str]) -> HumanChannel:
    def prompt(question: str, choices: list[str] | None) -> str:
        asked.append(question)
        for needle, queue in answers.items():
            if needle in question:
                return queue.pop(0) if len(queue) > 1 else queue[0]
        raise AssertionError(f"unexpected question: {question}")

    return HumanChannel(interactive=True, prompt=prompt)


# -- order, jumps, batching ---------------------------------------------------------------------------------
def test_yolo_run_follows_document_order_jumps_and_revisits(project: Path, wf: Path) -> None:
    """A choice goto skips step 2, a prose 'GOTO step 2a' lands on step 2, and later steps run again as @2."""
    executor = RulesExecutor(decisions={"second look": [True, False]}, answers={"colour": "r"})
    engine, run = _run(project, "flow", executor)
    assert run.status.value == "completed", run.error
    assert _started(engine, run) == ["step-1", "step-3", "step-4", "step-5", "step-6",
                                     "step-2", "step-3@2", "step-4@2", "step-5@2", "step-6@2"]
    assert run.variables["colour"] == "r"


def test_actions_between_interaction_points_are_one_work_request(project: Path, wf: Path) -> None:
    """Consecutive actions go out together; repeat and for-each rounds are rendered into the same request."""
    executor = RulesExecutor(answers={"colour": "b"})
    _run(project, "flow", executor)
    works = [r.content for r in executor.of_kind("work")]
    assert "1. Read the brief\n2. List the goals" in works[0] and "Skip the basics" not in works[0]
    assert "Keep every answer short" in works[0]
    assert "1. Skip the basics" in works[1] and "Explain the basics" not in "".join(works)
    assert any("Say hello 1" in w and "Say hello 2" in w for w in works)
    assert any("Handle alpha" in w and "Handle beta" in w for w in works)


def test_conditions_are_decided_by_the_runtime_when_possible_and_recorded(project: Path, wf: Path) -> None:
    """Comparisons, presence and choices never reach the model; prose goes to a decide request; all are journaled."""
    executor = RulesExecutor(decisions={"second look": [True, False]}, answers={"colour": "r"})
    engine, run = _run(project, "flow", executor)
    assert condition_counts(run) == {"runtime": 5, "model": 2}
    assert run.cursor["conditions"] == {"runtime": 5, "model": 2}
    assert [r.condition for r in executor.of_kind("decide")] == ["the work needs a second look"] * 2
    records = [e.data for e in _events(engine, run, "CallRecorded") if e.data["op"] == "legacy:condition"]
    by_condition = {r["args"]["condition"]: r["result"]["value"] for r in records}
    assert by_condition["{{level}} == 'expert'"] == {"value": True, "by": "runtime", "reason": "level = 'expert'"}
    assert by_condition["user chooses 'r'"]["by"] == "runtime"
    assert by_condition["the work needs a second look"]["reason"] == "by rule"


def test_normal_mode_asks_for_optional_steps_and_to_continue(project: Path, wf: Path) -> None:
    """In normal mode an optional step is offered, and a step without interaction ends with 'continue?'."""
    asked: list[str] = []
    human = _prompter({"colour": ["b"], "optional": ["n"], "Continue": ["y"]}, asked)
    _engine, run = _run(project, "flow", RulesExecutor(), mode="normal", human=human)
    assert run.status.value == "completed", run.error
    assert [q.split("?")[0].split(":")[0] for q in asked] == [
        "Pick a colour", "Step 2 (Blue only) is done. Continue to the next step",
        "Step 3 (Polish) is optional. Include it", "Step 4 (Greet twice) is done. Continue to the next step",
        "Step 5 (Each item) is done. Continue to the next step"]
    assert run.steps["step-3"].summary.startswith("optional step left out")  # type: ignore[union-attr]


def test_goto_loop_fails_the_run_after_max_step_visits(project: Path, wf: Path) -> None:
    """A step revisited more than runtime.max_step_visits times fails the run with the goto's file:line."""
    config = RuntimeConfig.model_validate({"runtime": {"max_step_visits": 3}})
    engine, run = _run(project, "loop", RulesExecutor(), config=config)
    assert run.status.value == "failed"
    assert _started(engine, run) == ["step-1", "step-2", "step-2@2", "step-2@3"]
    assert "step 2 would run a 4th time by the goto at" in (run.error or "")
    assert "loop/instructions.xml:7" in (run.error or "") and "runtime.max_step_visits = 3" in (run.error or "")


# -- template-output -----------------------------------------------------------------------------------------
def test_template_output_fills_the_document_section_by_section(project: Path, wf: Path) -> None:
    """The output is created from the template, each section written and checkpointed, one regenerated in place,
    and the placeholder nobody filled is asked for."""
    executor = RulesExecutor(answers={"topic": "cats", "reviewer": "Grace"},
                             decisions={"another pass": [True, False]},
                             sections={"intro": "Cats are small.", "details": ["Details v1", "Details v2"],
                                       "summary": ["Summary v1", "Summary v2"]})
    engine, run = _run(project, "tpl", executor)
    assert run.status.value == "completed", run.error
    out = project / "out" / "cats-report.md"
    text = out.read_text()
    date = run.variables["date"]
    assert text == (f"# Report on cats by Ada ({date})\n\n## Introduction\n\nCats are small.\n\n## Details\n\n"
                    "Details v2\n\nReviewed by: Grace\nSummary v2")
    ready = _events(engine, run, "ArtifactReady")
    sections = [e.data["section"] for e in ready if "section" in e.data]
    assert sections == ["intro", "details", "summary", "details", "summary"]
    assert ready[-1].data["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert run.cursor["checkpoint"] == {"step": "step-3@2", "section": "summary", "path": "out/cats-report.md"}


def test_template_menu_in_normal_mode_reworks_continues_and_switches_to_yolo(project: Path, wf: Path) -> None:
    """[a] regenerates the section with the elicitation method, [c] goes on, [y] drops later menus."""
    asked: list[str] = []
    human = _prompter({"topic": ["dogs"], "'intro'": ["a", "c"], "'details'": ["y"]}, asked)
    executor = RulesExecutor(sections={"intro": ["Intro v1", "Intro v2"]}, answers={"reviewer": "Ray"})
    _engine, run = _run(project, "tpl", executor, mode="normal", human=human)
    assert run.status.value == "completed", run.error
    assert [r.section for r in executor.of_kind("generate")] == ["intro", "intro", "details", "summary"]
    assert "Rework the section 'intro'" in executor.of_kind("generate")[1].content
    assert sum("'summary'" in q for q in asked) == 0 and run.cursor["yolo"] is True
    text = (project / "out" / "dogs-report.md").read_text()
    assert "Intro v2" in text and "Intro v1" not in text and "Reviewed by: Ray" in text


def test_non_interactive_run_blocks_and_continues_with_answer_and_resume(project: Path, wf: Path) -> None:
    """Each question blocks the run (exit 9); `stepline answer` + `stepline resume` go on without redoing work."""
    base = ["-C", str(project), "-q"]
    assert run_cli(["run", str(wf / "tpl"), "--non-interactive", *base]) == 9
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    answers = ["cats", "c", "c", "c", "Grace"]
    for answer in answers:
        assert run_cli(["answer", run_id, answer, "-C", str(project)]) == 0
        code = run_cli(["resume", run_id, *base])
        assert code == (0 if answer == answers[-1] else 9)
    text = (project / "out" / "cats-report.md").read_text()
    assert "Reviewed by: Grace" in text and "{{" not in text
    engine = Engine(project_root=project)
    events = engine.store.open(run_id).events()
    assert sum(1 for e in events if e.type == "ArtifactReady" and e.data.get("section") == "intro") == 1


# -- discover_inputs, invoke-task, invoke-workflow -----------------------------------------------------------
def test_discover_inputs_loads_shards_whole_files_and_notes_what_is_missing(project: Path, wf: Path) -> None:
    """Sharded before whole, index first, the selected epic only, the index's links only, nothing = empty."""
    executor = RulesExecutor(answers={"epic_num": "2"})
    engine, run = _run(project, "inputs", executor)
    assert run.status.value == "completed", run.error
    prd = run.variables["prd_content"]
    assert prd.index("prd/index.md") < prd.index("prd/a-goals.md") < prd.index("prd/b-users.md")
    assert run.variables["epics_content"] == "# Epic 2\n"
    architecture = run.variables["architecture_content"]
    assert "# Stack" in architecture and "# Data" in architecture and "Deployment" not in architecture
    assert run.variables["brief_content"] == "# Brief\n" and run.variables["ux_content"] == ""
    report = next(e.data["result"]["value"]["report"] for e in _events(engine, run, "CallRecorded")
                  if e.data["op"] == "legacy:discover_inputs")
    assert "✓ Loaded {prd_content} from 3 sharded files" in report and "○ No ux files found" in report
    assert "1 shard(s) the index does not name were not loaded" in report
    assert "Input discovery, done by the runtime" in executor.of_kind("work")[0].content


def test_discover_inputs_without_shards_uses_the_whole_document(tmp_path: Path) -> None:
    """A group whose sharded pattern matches nothing falls back to the whole file (FULL_LOAD by default)."""
    (tmp_path / "prd.md").write_text("# whole\n")
    found = discover_inputs({"prd": {"whole": "*prd*.md", "sharded": "*prd*/*.md"}}, {}, tmp_path)
    assert found.contents == {"prd_content": "# whole\n"} and found.groups[0].source == "whole"


def test_invoke_task_sends_the_installed_task_and_diagnoses_a_missing_one(project: Path, wf: Path) -> None:
    """The task file goes to the executor with the instruction; a task that is nowhere fails with file:line."""
    tasks = project / "_bmad" / "core" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "validate-workflow.xml").write_text("<task>check every item</task>\n")
    executor = RulesExecutor()
    _engine, run = _run(project, "task", executor)
    first = executor.of_kind("work")[0].content
    assert "Run this task: Validate against" in first and "<task>check every item</task>" in first
    assert run.status.value == "failed"
    assert "task/instructions.xml:6: task '{project-root}/_bmad/core/tasks/no-such-task.xml' not found" in (
        run.error or "")


def test_invoke_workflow_starts_a_linked_child_run_and_diagnoses_a_bare_folder(project: Path, wf: Path) -> None:
    """A folder path runs its workflow.yaml as a child run with the params; a folder without one is reported."""
    executor = RulesExecutor(answers={"colour": "b"})
    engine, run = _run(project, "parent", executor)
    children = [s for s in engine.store.summaries() if s.run_id != run.run_id]
    assert len(children) == 1
    child = engine.load(engine.store.open(children[0].run_id))
    assert child.parent_run_id == run.run_id and child.status.value == "completed"
    assert child.variables["level"] == "novice"
    assert any("Explain the basics" in r.content for r in executor.of_kind("work"))
    assert run.status.value == "failed"
    assert "parent/instructions.xml:8" in (run.error or "")
    assert "docs is a folder without a workflow.yaml or workflow.md" in (run.error or "")


# -- crash and resume ----------------------------------------------------------------------------------------
class _Crash(BaseException):
    """Stands for the process dying."""


class CrashingRules(RulesExecutor):
    """Dies before answering its ``crash_at``-th request."""

    def __init__(self, crash_at: int, **rules: Any) -> None:
        super().__init__(**rules)
        self.crash_at = crash_at

    async def perform(self, request: StepRequest, session: Any) -> None:
        if len(self.requests) + 1 == self.crash_at:
            raise _Crash()
        await super().perform(request, session)


def test_a_crash_mid_step_resumes_in_place_without_repeating_requests(project: Path, wf: Path) -> None:
    """After a crash inside step 6, completed steps do not run again and no finished request is asked twice."""
    clean = RulesExecutor(decisions={"second look": [False]}, answers={"colour": "b"})
    _run(project, "flow", clean)
    total = len(clean.requests)
    crash_at = next(i for i, r in enumerate(clean.requests, 1) if r.kind == "decide")
    first = CrashingRules(crash_at, answers={"colour": "b"})
    spec = load_workflow(project / "wf" / "flow", project_root=project)
    engine = Engine(project_root=project, executor=first, mode="yolo")
    before = {p.name for p in engine.store.root.iterdir()}
    with pytest.raises(_Crash):
        asyncio.run(engine.start(spec))
    (run_id,) = {p.name for p in engine.store.root.iterdir()} - before
    second = RulesExecutor(decisions={"second look": [False]})
    resumed = Engine(project_root=project, executor=second)
    run = asyncio.run(resumed.resume(run_id))
    assert run.status.value == "completed", run.error
    assert len(first.requests) + len(second.requests) == total
    assert [r.kind for r in second.requests] == ["decide"]
    started = [e.step_id for e in resumed.store.open(run_id).events() if e.type == "WorkflowStepStarted"]
    assert started == ["step-1", "step-2", "step-3", "step-4", "step-5", "step-6"]


# -- the condition evaluator ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("condition", "variables", "answer", "expected"), [
    ("{{mode}} == 'data'", {"mode": "data"}, None, True),
    ("count > 2", {"count": "3"}, None, True),
    ("count > 2", {"count": "many"}, None, None),
    ("{{story_path}} is provided", {"story_path": ""}, None, False),
    ("{{notes}} is empty", {}, None, True),
    ("{{sprint_status}} file exists", {"sprint_status": "present.yaml"}, None, True),
    ("{sprint_status} file does NOT exist", {"sprint_status": "absent.yaml"}, None, True),
    ("{{sprint_status}} file exists", {}, None, None),
    ("user chooses '2'", {}, "[2]", True),
    ("user chooses '2'", {}, None, None),
    ("choice == 3", {}, "3", True),
    ("{{a}} == 1 AND {{b}} is provided", {"a": 2}, None, False),
    ("{{a}} == 1 OR {{b}} == 2", {"a": 2}, None, None),
    ("the sky is blue", {}, None, None),
])
def test_conditions_the_runtime_can_decide(tmp_path: Path, condition: str, variables: dict[str, Any],
                                           answer: str | None, expected: bool | None) -> None:
    """Each decidable form gets its value from variables, files or the last answer; the rest stays undecided."""
    (tmp_path / "present.yaml").write_text("x: 1\n")
    verdict = evaluate(classify(condition), variables=variables, project_root=tmp_path, last_answer=answer)
    assert verdict.value is expected, verdict.reason
