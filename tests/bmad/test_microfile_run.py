"""Running micro-file workflows on small fixtures: menus, routers, state, continuation, crashes, bad input."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.bmad import _microfile_driver as microfile
from stepline.bmad import install_bmad
from stepline.engine import HumanChannel
from stepline.executors import Executor, StepRequest, StepSession
from stepline.families import load_workflow
from stepline.formats._frontmatter import read_frontmatter_file
from stepline.model import Run, RunMode
from stepline.store import atomic_write_bytes

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "project"
BMAD_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bmad"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A private copy of the fixture project (runs write outputs and run stores into it)."""
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root)
    return root.resolve()


def start(project: Path, name: str, *, executor: Any = "dry-run", mode: RunMode = "yolo",
          workflow_mode: str | None = None, human: HumanChannel | None = None, **options: Any) -> tuple[Engine, Run]:
    engine = Engine(project_root=project, executor=executor, executor_options=options, mode=mode, human=human)
    spec = load_workflow(project / "_bmad" / "demo" / "workflows" / name, project_root=project, mode=workflow_mode)
    return engine, asyncio.run(engine.start(spec))


def resume(project: Path, run_id: str, **kwargs: Any) -> Run:
    return asyncio.run(Engine(project_root=project, **kwargs).resume(run_id))


def events(engine: Engine, run: Run, kind: str | None = None) -> list[Any]:
    return [e for e in engine.store.open(run.run_id).events() if kind is None or e.type == kind]


def document(project: Path) -> Path:
    return project / "out" / "notes-demo.md"


class Recorder(Executor):
    """Dry-run answers, but remembers every request (to check what was handed over and asked)."""

    name = "recorder"
    pure = True

    def __init__(self, choices: dict[str, list[str]] | None = None) -> None:
        from stepline.executors._dryrun import DryRunExecutor

        self.requests: list[StepRequest] = []
        self.choices = {k: list(v) for k, v in (choices or {}).items()}
        self.fallback = DryRunExecutor()

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.requests.append(request)
        queue = self.choices.get(request.step_id)
        if queue and request.kind in ("work", "choose") and request.menu:
            if request.kind == "work":
                await session.write_output(f"work of {request.step_id}\n")
            await session.finish(choice=queue.pop(0))
            return
        await self.fallback.perform(request, session)


class TestRun:
    def test_document_is_built_from_the_template_and_tracks_state(self, project: Path) -> None:
        """The first step creates the document from its template; each step adds itself to stepsCompleted."""
        engine, run = start(project, "menus")
        assert run.status.value == "completed", run.error
        fm = read_frontmatter_file(document(project))
        assert fm.data["stepsCompleted"] == [1, 2, 3] and fm.data["lastStep"] == 3
        text = document(project).read_text()
        assert "date: { system-date }" in text and "author: { user }" in text
        assert "# Notes for demo" in text and text.count("[dry-run] step-") == 3
        assert [e.step_id for e in events(engine, run, "WorkflowStepStarted")] == [
            "workflow-init", "step-01-start", "step-02-draft", "step-03-done"]

    def test_each_step_file_is_handed_over_when_it_runs_and_never_earlier(self, project: Path) -> None:
        """A step's request holds only its own file (variables substituted) and the hand-over is journaled."""
        recorder = Recorder()
        engine, run = start(project, "menus", executor=recorder)
        work = {r.step_id: r.content for r in recorder.requests if r.kind == "work"}
        assert "UNIQUE-TEXT-OF-STEP-ONE for Tester" in work["step-01-start"]
        assert "UNIQUE-TEXT-OF-STEP-TWO" not in work["step-01-start"]
        assert "UNIQUE-TEXT-OF-STEP-THREE" not in work["step-02-draft"]
        handovers = [e.data["result"] for e in events(engine, run, "CallRecorded") if e.data["op"] == "handover"]
        assert [Path(h["path"]).name for h in handovers] == ["step-01-start.md", "step-02-draft.md", "step-03-done.md"]
        assert all(len(h["sha256"]) == 64 for h in handovers)

    def test_csv_data_is_loaded_with_its_step(self, project: Path) -> None:
        """A CSV the step references reaches the executor with that step, and not with the others."""
        recorder = Recorder()
        start(project, "menus", executor=recorder)
        work = {r.step_id: r.context for r in recorder.requests if r.kind == "work"}
        assert work["step-02-draft"]["data"]["itemsData"] == [{"id": "1", "name": "apple"},
                                                             {"id": "2", "name": "pear"}]
        assert work["step-01-start"]["data"] == {}

    def test_elicitation_and_party_mode_loop_back_to_the_menu(self, project: Path) -> None:
        """[A] and [P] invoke their core workflows as requests, then the menu is shown again until [C]."""
        recorder = Recorder({"step-02-draft": ["A", "P", "R", "C"]})
        _, run = start(project, "menus", executor=recorder)
        assert run.status.value == "completed"
        kinds = [(r.kind, r.title) for r in recorder.requests if r.step_id == "step-02-draft"]
        contents = [r.content for r in recorder.requests if r.step_id == "step-02-draft"]
        assert [k for k, _ in kinds] == ["work", "work", "choose", "work", "choose", "work", "choose"]
        assert "ELICITATION-WORKFLOW-TEXT" in contents[1] and "PARTY-MODE-WORKFLOW-TEXT" in contents[3]
        assert "The user chose [R] Rewrite" in contents[5]
        assert read_frontmatter_file(document(project)).data["stepsCompleted"] == [1, 2, 3]

    def test_an_answer_that_is_not_an_option_is_asked_again(self, project: Path) -> None:
        """An invalid menu answer is re-asked with a note, never a crash."""
        recorder = Recorder({"step-02-draft": ["Z", "maybe", "c"]})
        _, run = start(project, "menus", executor=recorder)
        assert run.status.value == "completed" and run.steps["step-02-draft"].choice == "C"
        asks = [r.question for r in recorder.requests if r.step_id == "step-02-draft" and r.kind == "choose"]
        assert len(asks) == 2 and asks[0] is not None and asks[0].startswith("'Z' is not one of the options.")

    def test_a_person_answers_menus_in_normal_mode(self, project: Path) -> None:
        """In normal mode the menu goes to the human channel; a wrong answer is asked again."""
        answers = iter(["nope", "C"])
        asked: list[tuple[str, list[str] | None]] = []

        def prompt(question: str, choices: list[str] | None) -> str:
            asked.append((question, choices))
            return next(answers)

        _, run = start(project, "menus", mode="normal", human=HumanChannel(interactive=True, prompt=prompt))
        assert run.status.value == "completed"
        assert [c for _, c in asked] == [["A", "P", "R", "X", "C"]] * 2
        assert asked[1][0].startswith("'nope' is not one of the options.")

    def test_exit_stops_cleanly_and_resume_shows_the_menu_again(self, project: Path) -> None:
        """[X] stops the run (blocked, resumable) before the step is saved; resume presents the menu again."""
        script = {"steps": {"step-02-draft": {"turns": [[{"finish": {"choice": "X"}}],
                                                        [{"finish": {"choice": "C"}}]]}}}
        _, run = start(project, "menus", executor="scripted", script=script)
        assert run.status.value == "blocked" and "exited at [X] Exit" in (run.blocked_reason or "")
        assert read_frontmatter_file(document(project)).data["stepsCompleted"] == [1]
        again = resume(project, run.run_id)
        assert again.status.value == "completed"
        assert read_frontmatter_file(document(project)).data["stepsCompleted"] == [1, 2, 3]

    def test_files_the_executor_read_become_input_documents(self, project: Path) -> None:
        """Project files read through the protocol during a step are added to inputDocuments."""
        (project / "docs").mkdir()
        (project / "docs" / "brief.md").write_text("# Brief\n")
        script = {"steps": {"step-01-start": [{"read": {"path": "docs/brief.md"}}, {"finish": {}}]}}
        _, run = start(project, "menus", executor="scripted", script=script)
        assert run.status.value == "completed"
        assert read_frontmatter_file(document(project)).data["inputDocuments"] == ["docs/brief.md"]


class TestContinuation:
    def test_a_document_with_steps_completed_resumes_at_the_next_step(self, project: Path) -> None:
        """Running again on a document that lists step 1 skips it (with the reason) and starts at step 2."""
        start(project, "menus")
        doc = document(project)
        doc.write_text(doc.read_text().replace("stepsCompleted: [1, 2, 3]", "stepsCompleted: [1]"))
        engine, run = start(project, "menus")
        assert run.status.value == "completed"
        assert run.steps["step-01-start"].status.value == "skipped"
        assert run.steps["step-01-start"].error == f"completed in {doc} (stepsCompleted)"
        assert [e.step_id for e in events(engine, run, "WorkflowStepStarted")] == [
            "workflow-init", "step-02-draft", "step-03-done"]
        assert read_frontmatter_file(doc).data["stepsCompleted"] == [1, 2, 3]

    def test_a_completed_document_reports_completion(self, project: Path) -> None:
        """Running a workflow whose document lists every step runs nothing and says it is complete."""
        start(project, "menus")
        engine, run = start(project, "menus")
        assert run.status.value == "completed"
        assert "is already complete" in (run.steps["workflow-init"].summary or "")
        assert [e.step_id for e in events(engine, run, "WorkflowStepStarted")] == ["workflow-init"]

    def test_names_style_is_kept(self, project: Path) -> None:
        """A document that lists step names gets names, not numbers."""
        start(project, "menus")
        doc = document(project)
        doc.write_text(doc.read_text().replace("stepsCompleted: [1, 2, 3]", "stepsCompleted: ['step-01-start']"))
        start(project, "menus")
        assert read_frontmatter_file(doc).data["stepsCompleted"] == ["step-01-start", "step-02-draft",
                                                                     "step-03-done"]


class TestCrash:
    class Crash(BaseException):
        """Stands for the process dying (not an error the engine may catch)."""

    @pytest.mark.parametrize("moment", ["before-write", "after-write"])
    def test_journal_and_frontmatter_agree_after_a_crash(self, project: Path, monkeypatch: pytest.MonkeyPatch,
                                                         moment: str) -> None:
        """A crash around the frontmatter update of step 2 is repaired on resume, without a double entry."""
        from stepline.stepchain import _state  # the chain's frontmatter state: where the update is written

        real_write, real_record = atomic_write_bytes, _state.record

        def write(path: Path, data: bytes) -> None:
            if moment == "before-write" and b"stepsCompleted: [1, 2]" in data:
                raise self.Crash
            real_write(path, data)

        def record(ctx: Any, key: str, op: str, args: dict[str, Any], result: Any) -> None:
            if moment == "after-write" and op == "document_state" and args["step"] == 2:
                raise self.Crash
            real_record(ctx, key, op, args, result)

        monkeypatch.setattr(_state, "atomic_write_bytes", write)
        monkeypatch.setattr(_state, "record", record)
        engine = Engine(project_root=project, mode="yolo")
        spec = load_workflow(project / "_bmad" / "demo" / "workflows" / "menus", project_root=project)
        with pytest.raises(self.Crash):
            asyncio.run(engine.start(spec))
        monkeypatch.undo()
        run_id = _only_run(project)
        expected = [1] if moment == "before-write" else [1, 2]
        assert read_frontmatter_file(document(project)).data["stepsCompleted"] == expected
        run = resume(project, run_id)
        assert run.status.value == "completed"
        assert read_frontmatter_file(document(project)).data["stepsCompleted"] == [1, 2, 3]
        assert run.steps["step-02-draft"].attempts == 1


def _only_run(project: Path) -> str:
    (run_dir,) = (project / ".stepline" / "runs").iterdir()
    return run_dir.name


class TestRouter:
    def test_a_chosen_mode_runs_its_chain(self, project: Path) -> None:
        """With a mode, only that mode's chain runs; the other mode's steps are skipped as not taken."""
        _, run = start(project, "router", workflow_mode="validate")
        assert run.status.value == "completed"
        assert run.steps["step-v-01-check"].status.value == "completed"

    def test_without_a_mode_the_executor_picks_in_yolo(self, project: Path) -> None:
        """Without a mode the router's [C]/[V] question goes through the human channel; in yolo the executor
        answers it (dry-run: the first option)."""
        recorder = Recorder()
        _, run = start(project, "router", executor=recorder)
        assert run.status.value == "completed" and run.steps["workflow-init"].choice == "create"
        assert run.steps["step-01-make"].status.value == "completed"
        assert run.steps["step-v-01-check"].status.value == "skipped"
        (answer,) = [r for r in recorder.requests if r.kind == "answer"]
        assert answer.choices == ["C", "V"]

    def test_without_a_mode_a_non_interactive_run_blocks_until_answered(self, project: Path) -> None:
        """A non-interactive run blocks on the mode question; an answer + resume runs the chosen mode's chain."""
        from stepline.service import RunService

        engine, run = start(project, "router", mode="non-interactive")
        assert run.status.value == "blocked" and "[C] Create" in (run.blocked_reason or "")
        (gate,) = engine.gates.pending()
        assert gate.kind == "question" and gate.step_id == "workflow-init"
        RunService(project).answer(run.run_id, "v", by="test")
        done = resume(project, run.run_id)
        assert done.status.value == "completed" and done.steps["step-v-01-check"].status.value == "completed"


class TestBadInput:
    def test_a_missing_next_step_file_fails_naming_file_and_line(self, project: Path) -> None:
        """A nextStepFile that does not exist fails the step with file:line, before the executor runs."""
        _, run = start(project, "bad-next")
        assert run.status.value == "failed"
        error = run.steps["step-01-first"].error or ""
        assert "steps/step-01-first.md:4: nextStepFile './step-02-missing.md' names a step file that does not " \
               "exist" in error

    def test_unterminated_frontmatter_fails_naming_file_and_line(self, project: Path) -> None:
        """A step whose frontmatter is never closed fails with file:1 instead of running without its keys."""
        _, run = start(project, "bad-frontmatter")
        assert run.status.value == "failed"
        assert "step-01-first.md:1: the step's frontmatter is broken: frontmatter opened with '---' is never " \
               "closed" in (run.steps["step-01-first"].error or "")

    def test_a_key_that_is_not_valid_yaml_runs_with_a_recorded_warning(self, project: Path) -> None:
        """A key with bad YAML is used as written; the warning (file:line) is journaled with the hand-over."""
        engine, run = start(project, "odd-yaml")
        assert run.status.value == "completed"
        (handover,) = [e.data["result"] for e in events(engine, run, "CallRecorded") if e.data["op"] == "handover"]
        assert handover["warnings"] and "step-01-first.md:3: frontmatter key 'description'" in handover["warnings"][0]

    def test_a_self_loop_ends_with_the_loop_diagnostic(self, project: Path) -> None:
        """A step that only ever leads to itself stops at runtime.max_step_visits with the reader's diagnostic."""
        _, run = start(project, "loop")
        assert run.status.value == "failed"
        error = run.steps["step-01-again@26"].error or ""
        assert "would run a 26th time (runtime.max_step_visits is 25)" in error
        assert "step-01-again.md:4: nextStepFile './step-01-again.md' names this step itself" in error

    def test_missing_shipped_data_fails_naming_who_referenced_it(self, project: Path) -> None:
        """A CSV shipped with the workflow that is missing fails the step naming the file:line referencing it."""
        _, run = start(project, "missing-data")
        assert run.status.value == "failed"
        error = run.steps["step-01-first"].error or ""
        assert "types.csv: CSV data file not found (referenced from " in error
        assert "step-01-first.md:4 (typesCSV)" in error


def test_hybrid_workflow_runs_as_micro_file(tmp_path: Path) -> None:
    """A workflow.yaml whose instructions name a workflow.md runs its step files with the yaml's variables."""
    root = tmp_path / "proj"
    install_bmad(BMAD_FIXTURE, root, {"user_name": "Ada"})
    spec = load_workflow(root / "_bmad" / "demo" / "workflows" / "hybrid" / "workflow.yaml", project_root=root)
    recorder = Recorder()
    run = asyncio.run(Engine(project_root=root, executor=recorder, mode="yolo").start(spec))
    assert run.status.value == "completed" and run.steps["step-01-start"].status.value == "completed"
    assert run.variables["user_name"] == "Ada"
    assert any("Say hello." in r.content for r in recorder.requests)


def test_the_final_manifest_holds_the_step_the_flow_added(project: Path) -> None:
    """The flow puts the initialisation step into the spec as it is built; the manifest's spec, made once per
    run after that, is still the whole workflow the run ran (redacted), so a resume rebuilds the same flow."""
    from stepline.guardrails import redact

    engine, run = start(project, "menus")
    assert run.status.value == "completed"
    manifest = json.loads((engine.store.root / run.run_id / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["workflow"] == json.loads(redact(run.workflow.model_dump_json(exclude_defaults=True)))
    assert microfile.INIT_STEP in [step["id"] for step in manifest["workflow"]["steps"]]
