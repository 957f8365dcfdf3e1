"""CCW sessions run by the engine: order, concurrency, containers, failures, pre_analysis, files, archive."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.ccw._driver import complete_session, execute_session
from stepline.ccw._state import Completion, SessionWriter
from stepline.engine._config import RiskPolicy, RuntimeConfig, ToolsSection
from stepline.errors import ReaderError, RunStateError
from stepline.executors import Executor, StepRequest, StepSession
from stepline.model import Run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: pre_analysis ``bash(...)`` commands are high risk: these tests run them without a person's approval, as
#: a project that allows them in config/runtime.yaml does (tests/ccw/test_pre_analysis_policy.py checks the gate).
ALLOW_PLAN_COMMANDS = RuntimeConfig(tools=ToolsSection(risk_policy=RiskPolicy(high_requires_approval=False)))


class Recorder(Executor):
    """Records every request, tracks how many run at once, sleeps a little, fails the ids it is told to."""

    name = "recorder"
    pure = True

    def __init__(self, *, delay: float = 0.0, fail: frozenset[str] = frozenset()) -> None:
        self.delay = delay
        self.fail = fail
        self.requests: list[StepRequest] = []
        self.active = 0
        self.peak = 0
        self.started: list[str] = []
        self.overlaps: list[set[str]] = []
        self._now: set[str] = set()

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.requests.append(request)
        self.started.append(request.step_id)
        self._now.add(request.step_id)
        self.overlaps.append(set(self._now))
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.active -= 1
            self._now.discard(request.step_id)
        if request.step_id in self.fail:
            raise RuntimeError(f"agent crashed on {request.step_id}")
        await session.finish(summary=f"did {request.step_id}\nsecond line")


def _copy(tmp_path: Path, *parts: str) -> Path:
    """Copy a fixture folder into the test's scratch space and return the copy."""
    target = tmp_path / parts[-1]
    shutil.copytree(FIXTURES.joinpath(*parts), target)
    return target


def _generated(project: Path, tasks: int, *, seed: int, max_deps: int) -> Path:
    """A random-DAG session from the bench's generator (tasks without pre_analysis)."""
    import importlib.util

    generator = Path(__file__).resolve().parents[2] / "bench" / "ccw_gen.py"
    spec = importlib.util.spec_from_file_location("ccw_gen", generator)
    assert spec is not None and spec.loader is not None
    ccw_gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ccw_gen)
    session_dir: Path = ccw_gen.generate_session(project, tasks, seed=seed, max_deps=max_deps)
    return session_dir


def _run(project: Path, session_dir: Path, executor: Executor, concurrency: int = 4) -> Run:
    engine = Engine(config=ALLOW_PLAN_COMMANDS, project_root=project, executor=executor, concurrency=concurrency)
    return asyncio.run(execute_session(engine, session_dir))


def _statuses(run: Run) -> dict[str, str]:
    return {sid: step.status.value for sid, step in run.steps.items()}


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _agree(session_dir: Path, task_ids: list[str]) -> dict[str, bool]:
    """Per task: are TODO box, JSON status and summary file all completed (asserting they agree)?"""
    todo = (session_dir / "TODO_LIST.md").read_text(encoding="utf-8")
    result = {}
    for task_id in task_ids:
        line = next(line for line in todo.splitlines() if f"**{task_id}**" in line)
        ticked = "[x]" in line and f"./.summaries/{task_id}-summary.md" in line
        data = json.loads((session_dir / ".task" / f"{task_id}.json").read_text(encoding="utf-8"))
        summary = (session_dir / ".summaries" / f"{task_id}-summary.md").is_file()
        assert ticked == (data["status"] == "completed") == summary, (task_id, ticked, data["status"], summary)
        result[task_id] = ticked
    return result


def test_parallel_session_with_containers_runs_in_dependency_order_and_writes_all_three_files(tmp_path: Path) -> None:
    """A parallel session with a container: subtasks before the container, dependents after their
    dependencies, serialized tasks never together, critical path first, and every file records completion."""
    project = _copy(tmp_path, "ccw", "project-active")
    session_dir = project / ".workflow" / "active" / "WFS-auth-system"
    executor = Recorder(delay=0.02)
    run = _run(project, session_dir, executor)
    assert run.status.value == "completed"
    assert set(_statuses(run).values()) == {"completed"}
    order = executor.started
    assert "IMPL-1.1" not in order  # ticked before the run: it completes without its agent
    assert "IMPL-1" not in order  # a container never goes to an agent
    journal = (project / ".stepline" / "runs" / run.run_id / "journal.jsonl").read_text(encoding="utf-8")
    started = [json.loads(line)["step_id"] for line in journal.splitlines() if '"WorkflowStepStarted"' in line]
    assert started[:3] == ["IMPL-1.3", "IMPL-1.1", "IMPL-1.2"]  # critical path first, then document order
    assert order.index("IMPL-2") > max(order.index("IMPL-1.2"), order.index("IMPL-1.3"))
    assert order.index("IMPL-4") > max(order.index("IMPL-2"), order.index("IMPL-3"))
    assert not any({"IMPL-2", "IMPL-3"} <= running for running in executor.overlaps)  # serialization
    assert _agree(session_dir, ["IMPL-1.1", "IMPL-1.2", "IMPL-1.3", "IMPL-2", "IMPL-3", "IMPL-4"]) == dict.fromkeys(
        ["IMPL-1.1", "IMPL-1.2", "IMPL-1.3", "IMPL-2", "IMPL-3", "IMPL-4"], True)
    todo = (session_dir / "TODO_LIST.md").read_text(encoding="utf-8")
    assert "▸ **IMPL-1**: Auth foundation → [📋](./.task/IMPL-1.json)\n" in todo  # container line kept
    assert todo.endswith("- `- [x]` = Completed leaf task\n")  # the legend is untouched
    container = json.loads((session_dir / ".task" / "IMPL-1.json").read_text(encoding="utf-8"))
    assert container["status"] == "completed"
    assert container["status_history"][-1]["from"] == "container"
    task = json.loads((session_dir / ".task" / "IMPL-2.json").read_text(encoding="utf-8"))
    assert [(h["from"], h["to"]) for h in task["status_history"]] == [("pending", "in_progress"),
                                                                     ("in_progress", "completed")]
    summary = (session_dir / ".summaries" / "IMPL-2-summary.md").read_text(encoding="utf-8")
    for section in ("# Task: IMPL-2 Integration tests", "## Implementation Summary", "did IMPL-2",
                    "### Files Modified", "## Outputs for Dependent Tasks", "## Status: ✅ Complete"):
        assert section in summary
    old = (FIXTURES / "ccw" / "project-active" / ".workflow" / "active" / "WFS-auth-system" / ".summaries"
           / "IMPL-1.1-summary.md").read_text(encoding="utf-8")
    assert (session_dir / ".summaries" / "IMPL-1.1-summary.md").read_text(encoding="utf-8") == old
    meta = json.loads((session_dir / "workflow-session.json").read_text(encoding="utf-8"))
    assert meta["status"] == "active" and meta["execution_started_at"]


def test_parallel_tasks_run_concurrently_up_to_the_limit_grouped_by_execution_group(tmp_path: Path) -> None:
    """Eight independent tasks run three at a time, group by group; the task depending on all runs last."""
    session_dir = _copy(tmp_path, "ccw_run", "WFS-wide")
    executor = Recorder(delay=0.05)
    run = _run(tmp_path, session_dir, executor, concurrency=3)
    assert run.status.value == "completed"
    assert executor.peak == 3
    assert executor.started[-1] == "IMPL-9"
    groups = ["api" if int(sid.split("-")[1]) % 2 == 0 else "ui" for sid in executor.started[:-1]]
    assert groups == sorted(groups, key=lambda g: groups.index(g))  # each group's tasks start together
    assert all(_agree(session_dir, [f"IMPL-{i}" for i in range(1, 10)]).values())


@pytest.mark.parametrize(("parts", "expected"), [
    (("ccw", "project-active", ".workflow", "active", "WFS-payment-module"), ["IMPL-1", "IMPL-2", "IMPL-3"]),
    (("ccw", "sessions", "WFS-tdd-parser"), ["IMPL-1", "IMPL-2", "IMPL-3", "IMPL-4"]),
])
def test_sequential_and_tdd_models_run_one_task_at_a_time_in_document_order(
        tmp_path: Path, parts: tuple[str, ...], expected: list[str]) -> None:
    """Sequential and TDD plans never overlap tasks, whatever the concurrency, and keep document order."""
    session_dir = _copy(tmp_path, *parts)
    executor = Recorder(delay=0.01)
    run = _run(tmp_path, session_dir, executor, concurrency=4)
    assert run.status.value == "completed"
    assert executor.peak == 1
    assert executor.started == expected
    assert all(_agree(session_dir, expected).values())


def test_phased_model_puts_a_barrier_after_each_phase(tmp_path: Path) -> None:
    """Tasks of a phase run together, and no task of a later phase starts before the earlier phase ends."""
    session_dir = _copy(tmp_path, "ccw_run", "WFS-phased")
    executor = Recorder(delay=0.03)
    run = _run(tmp_path, session_dir, executor, concurrency=4)
    assert run.status.value == "completed"
    assert executor.peak == 2
    assert [set(executor.started[:2]), set(executor.started[2:4]), executor.started[4]] == [
        {"IMPL-1", "IMPL-2"}, {"IMPL-3", "IMPL-4"}, "IMPL-5"]
    assert not any(overlap & {"IMPL-1", "IMPL-2"} and overlap & {"IMPL-3", "IMPL-4", "IMPL-5"}
                   for overlap in executor.overlaps)


def test_phases_that_contradict_the_dependencies_are_refused_before_anything_runs(tmp_path: Path) -> None:
    """IMPL-1 (phase 1) depending on IMPL-5 (phase 3) can never run: a load-time error, no file touched."""
    session_dir = _copy(tmp_path, "ccw_run", "WFS-phased")
    task = session_dir / ".task" / "IMPL-1.json"
    data = json.loads(task.read_text(encoding="utf-8"))
    data["context"]["depends_on"] = ["IMPL-5"]
    task.write_text(json.dumps(data, indent=2), encoding="utf-8")
    before = _tree(session_dir)
    executor = Recorder()
    with pytest.raises(ReaderError, match=r"phases contradict the dependencies"):
        _run(tmp_path, session_dir, executor)
    assert not executor.started and _tree(session_dir) == before


def test_failed_task_skips_its_dependents_and_the_rest_completes(tmp_path: Path) -> None:
    """IMPL-1 fails: its dependents (also through a subtask, its container and the container's dependent)
    are skipped and stay unticked; independent tasks still complete."""
    session_dir = _copy(tmp_path, "ccw", "sessions", "WFS-failing-deps")
    run = _run(tmp_path, session_dir, Recorder(fail=frozenset({"IMPL-1"})))
    assert run.status.value == "failed"
    assert "agent crashed on IMPL-1" in (run.error or "")
    assert _statuses(run) == {"IMPL-1": "failed", "IMPL-2": "skipped", "IMPL-3": "skipped", "IMPL-4": "completed",
                              "IMPL-5": "skipped", "IMPL-5.1": "skipped", "IMPL-5.2": "completed",
                              "IMPL-6": "skipped"}
    done = _agree(session_dir, ["IMPL-1", "IMPL-2", "IMPL-3", "IMPL-4", "IMPL-5.1", "IMPL-5.2", "IMPL-6"])
    assert [task for task, ticked in done.items() if ticked] == ["IMPL-4", "IMPL-5.2"]


def test_failed_session_runs_again_from_its_files_without_redoing_completed_tasks(tmp_path: Path) -> None:
    """After a failed run, executing again starts a new run in which only the unfinished tasks reach the agent."""
    session_dir = _copy(tmp_path, "ccw", "sessions", "WFS-failing-deps")
    _run(tmp_path, session_dir, Recorder(fail=frozenset({"IMPL-1"})))
    second = Recorder()
    run = _run(tmp_path, session_dir, second)
    assert run.status.value == "completed"
    assert sorted(second.started) == ["IMPL-1", "IMPL-2", "IMPL-3", "IMPL-5.1", "IMPL-6"]
    assert all(_agree(session_dir, ["IMPL-1", "IMPL-2", "IMPL-3", "IMPL-4", "IMPL-5.1", "IMPL-5.2", "IMPL-6"]).values())


def test_cycle_is_a_load_time_error_naming_the_tasks_and_nothing_is_written(tmp_path: Path) -> None:
    """A dependency cycle stops the session before anything runs; the error names the tasks in the cycle."""
    session_dir = _copy(tmp_path, "ccw", "sessions", "WFS-cycle")
    before = _tree(session_dir)
    with pytest.raises(ReaderError, match=r"dependency cycle: IMPL-\d → IMPL-\d → IMPL-\d → IMPL-\d"):
        _run(tmp_path, session_dir, Recorder())
    assert _tree(session_dir) == before
    assert not list((tmp_path / ".stepline" / "runs").glob("run-*"))  # no run (only the session's lock file)


def test_prompt_is_built_from_the_task_json_with_dependency_summaries_and_the_inferred_agent(tmp_path: Path) -> None:
    """The work request carries requirements, focus paths, acceptance, approach, target files, the summaries
    of the dependencies and the agent (inferred from meta.type when meta.agent is missing)."""
    project = _copy(tmp_path, "ccw", "project-active")
    executor = Recorder()
    _run(project, project / ".workflow" / "active" / "WFS-auth-system", executor)
    request = next(r for r in executor.requests if r.step_id == "IMPL-4")
    assert request.kind == "work"
    assert request.hints["agent"] == "@doc-generator"  # meta.type docs, no meta.agent
    prompt = request.content
    for text in ("**EXECUTE TASK FROM JSON**", "Document the auth flow: 1 module changed", "## Focus Paths",
                 "verified by the test suite (exit code 0)", "**Document the auth flow**: Implement document",
                 "## Target Files\n- src/", "### IMPL-2\n# Task: IMPL-2 Integration tests", "### IMPL-3",
                 "TODO List: ", "[dependency_context]"):
        assert text in prompt, text
    assert request.context["task"]["id"] == "IMPL-4"
    first = next(r for r in executor.requests if r.step_id == "IMPL-1.3")
    assert first.hints["agent"] == "@code-developer" and "[execution_group: parallel-db-schema]" in first.content


def test_a_task_starts_with_its_dependencies_files_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dependency's slot is free as soon as its intent is journaled, before it is durable and before its
    files are written; a task that depends on it still finds its task JSON and summary completed on disk,
    however slow the journal's fsync (made slow here)."""
    import time

    from stepline.ccw import _state

    real_sync = _state._sync_file

    def slow_sync(path: Path) -> None:
        time.sleep(0.05)
        real_sync(path)

    monkeypatch.setattr(_state, "_sync_file", slow_sync)
    session_dir = _generated(tmp_path, 12, seed=3, max_deps=2)  # no pre_analysis: no time to spare
    seen: dict[str, dict[str, bool]] = {}

    class Inspector(Recorder):
        async def perform(self, request: StepRequest, session: StepSession) -> None:
            seen[request.step_id] = {
                dep: (session_dir / ".summaries" / f"{dep}-summary.md").is_file() and json.loads(
                    (session_dir / ".task" / f"{dep}.json").read_text(encoding="utf-8"))["status"] == "completed"
                for dep in request.context["dependencies"]}
            await super().perform(request, session)

    assert _run(tmp_path, session_dir, Inspector()).status.value == "completed"
    assert sum(len(found) for found in seen.values()) >= 8  # the DAG has dependencies to check
    assert all(all(found.values()) for found in seen.values()), seen


def test_pre_analysis_runs_every_command_kind_with_substitution_and_on_error(tmp_path: Path) -> None:
    """bash, Read, Glob and Search run through the tools; [var] takes an earlier output; skip_optional
    leaves the variable empty and continue keeps the partial output; the agent sees all of it."""
    session_dir = _copy(tmp_path, "ccw_run", "WFS-pre-analysis")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("x = 1  # TODO tidy\n", encoding="utf-8")
    (tmp_path / "src" / "util.py").write_text("y = 2\n", encoding="utf-8")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "app.ini").write_text("[app]\nname = demo\n", encoding="utf-8")
    executor = Recorder()
    run = _run(tmp_path, session_dir, executor)
    assert run.status.value == "completed"
    flow = executor.requests[0].context["flow_context"]
    assert flow["sources"] == "app.py"
    assert flow["config"] == "[app]\nname = demo"
    assert flow["modules"] == "src/app.py\nsrc/util.py"
    assert flow["todos"] == "src/app.py:1:x = 1  # TODO tidy"
    assert flow["echoed"] == "sources were: app.py"
    assert flow["missing"] == "" and flow["partial"] == "partial"
    assert "### [config]\n[app]\nname = demo" in executor.requests[0].content


def _pre_session(tmp_path: Path, on_error: str, command: str = "bash(test -f flag.txt && echo found)") -> Path:
    session_dir = _copy(tmp_path, "ccw_run", "WFS-pre-analysis")
    path = session_dir / ".task" / "IMPL-1.json"
    task = json.loads(path.read_text(encoding="utf-8"))
    task["flow_control"]["pre_analysis"] = [{"step": "needs_flag", "action": "check", "command": command,
                                             "output_to": "flag", "on_error": on_error}]
    path.write_text(json.dumps(task, indent=2), encoding="utf-8")
    return session_dir


def test_pre_analysis_fail_fails_the_task_and_skips_its_dependents(tmp_path: Path) -> None:
    """on_error fail: the task fails with the command named, its agent is never called, IMPL-2 is skipped."""
    session_dir = _pre_session(tmp_path, "fail")
    executor = Recorder()
    run = _run(tmp_path, session_dir, executor)
    assert _statuses(run) == {"IMPL-1": "failed", "IMPL-2": "skipped"}
    assert "pre_analysis step 'needs_flag' failed" in (run.error or "") and executor.requests == []


def test_pre_analysis_retry_once_runs_the_command_a_second_time(tmp_path: Path) -> None:
    """on_error retry_once: a command that fails once and then succeeds lets the task complete."""
    session_dir = _pre_session(tmp_path, "retry_once",
                               "bash(if [ -f once ]; then echo second; else touch once; exit 1; fi)")
    executor = Recorder()
    run = _run(tmp_path, session_dir, executor)
    assert run.status.value == "completed"
    assert executor.requests[0].context["flow_context"]["flag"] == "second"


def test_pre_analysis_manual_intervention_blocks_until_a_person_approves(tmp_path: Path) -> None:
    """on_error manual_intervention: the run blocks on a gate; after approval, executing again resumes the
    same run, which continues the task without re-running its recorded commands."""
    from stepline.service import RunService

    session_dir = _pre_session(tmp_path, "manual_intervention")
    engine = Engine(config=ALLOW_PLAN_COMMANDS, project_root=tmp_path, executor=Recorder(), mode="non-interactive")
    run = asyncio.run(execute_session(engine, session_dir))
    assert run.status.value == "blocked" and "needs manual intervention" in (run.blocked_reason or "")
    RunService(tmp_path).decide(run.run_id, "ccw:IMPL-1:pre_analysis:0", approved=True, by="ops", notes=None)
    executor = Recorder()
    engine = Engine(config=ALLOW_PLAN_COMMANDS, project_root=tmp_path, executor=executor)
    again = asyncio.run(execute_session(engine, session_dir))
    assert again.run_id == run.run_id and again.status.value == "completed"
    assert executor.started == ["IMPL-1", "IMPL-2"]


def test_task_json_is_read_only_when_its_task_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Preparing a session reads no task body; each task's JSON is read once, as its task starts."""
    import stepline.ccw._driver as ccw

    reads: list[str] = []
    real = ccw.read_task_file
    executor = Recorder()

    def counting(path: Path) -> Any:
        reads.append(f"{path.stem}@{len(executor.started)}")
        return real(path)

    monkeypatch.setattr(ccw, "read_task_file", counting)
    session_dir = _copy(tmp_path, "ccw", "project-active", ".workflow", "active", "WFS-payment-module")
    ccw.prepare_session(session_dir)
    assert reads == []
    _run(tmp_path, session_dir, executor)
    assert [read.split("@")[0] for read in reads] == ["IMPL-1", "IMPL-2", "IMPL-3"]


def test_session_writer_redo_is_idempotent_from_any_partial_state(tmp_path: Path) -> None:
    """Applying a completion to the old files, to half-written ones or to finished ones gives the same bytes."""
    session_dir = _copy(tmp_path, "ccw", "project-active", ".workflow", "active", "WFS-payment-module")
    completion = Completion(task_id="IMPL-2", task_json=".task/IMPL-2.json",
                            history=({"from": "active", "to": "completed", "changed_at": "2026-01-01T00:00:00"},),
                            summary_path=".summaries/IMPL-2-summary.md", summary="# Task: IMPL-2\n")
    SessionWriter(session_dir).write([completion])
    done = _tree(session_dir)
    SessionWriter(session_dir).write([completion])
    assert _tree(session_dir) == done
    (session_dir / ".summaries" / "IMPL-2-summary.md").unlink()  # as if killed before the summary
    (session_dir / "TODO_LIST.md").write_text(
        (FIXTURES / "ccw" / "project-active" / ".workflow" / "active" / "WFS-payment-module" / "TODO_LIST.md")
        .read_text(encoding="utf-8"), encoding="utf-8")
    SessionWriter(session_dir).write([completion])
    assert _tree(session_dir) == done
    assert Completion.from_json(json.loads(json.dumps(completion.to_json()))) == completion


@pytest.mark.parametrize("extra", [{}, {"estimate_hours": 1.5, "weight": 1e16}, {"big": 2 ** 70},
                                   {"note": "caf\u00e9 \u2014 \u2713"}])
def test_a_completed_task_json_is_written_in_jqs_layout(tmp_path: Path, extra: dict[str, object]) -> None:
    """The task JSON gets status and history, laid out as jq writes it, whatever numbers and text it holds."""
    session_dir = _copy(tmp_path, "ccw", "project-active", ".workflow", "active", "WFS-payment-module")
    path = session_dir / ".task" / "IMPL-2.json"
    data = {**json.loads(path.read_text(encoding="utf-8")), **extra}
    path.write_text(json.dumps(data), encoding="utf-8")
    history = ({"from": "active", "to": "completed", "changed_at": "2026-01-01T00:00:00"},)
    SessionWriter(session_dir).write([Completion(task_id="IMPL-2", task_json=".task/IMPL-2.json", history=history,
                                                 summary_path=".summaries/IMPL-2-summary.md", summary="# IMPL-2\n")])
    expected = {**data, "status": "completed",
                "status_history": [*(data.get("status_history") or []), *history]}
    assert path.read_bytes() == (json.dumps(expected, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def test_completions_whose_files_never_got_written_are_redone_when_the_run_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's step completes once its intent is durable; its files come later. If writing them fails (or the
    process dies), the run stops before its last record and the next execute redoes every intent without a
    done record, although no task is left to run, and the three files then agree."""
    session_dir = _copy(tmp_path, "ccw", "sessions", "WFS-failing-deps")
    tasks = ["IMPL-1", "IMPL-2", "IMPL-3", "IMPL-4", "IMPL-5.1", "IMPL-5.2", "IMPL-6"]
    before = _tree(session_dir)

    def broken(self: SessionWriter, completions: list[Completion], **parts: bool) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SessionWriter, "write", broken)
    first = Recorder()
    with pytest.raises(RunStateError, match=r"could not be written.*No space left"):
        _run(tmp_path, session_dir, first)
    monkeypatch.undo()
    journal = next((tmp_path / ".stepline" / "runs").glob("*/journal.jsonl")).read_text(encoding="utf-8")
    records = [json.loads(line) for line in journal.splitlines()]
    assert {r["type"] for r in records}.isdisjoint({"WorkflowCompleted", "WorkflowFailed", "WorkflowStepFailed",
                                                   "StepSkipped"})
    intents = {r["step_id"] for r in records if r["type"] == "CallStarted" and r["data"].get("op") == "ccw_complete"}
    assert intents and not any(r["type"] == "CallRecorded" and r["data"].get("op") == "ccw_complete" for r in records)
    changed = {name for name, digest in _tree(session_dir).items() if before.get(name) != digest}
    assert not {name for name in changed if name.startswith((".task/", ".summaries/", "TODO"))}, changed
    second = Recorder()
    run = _run(tmp_path, session_dir, second)
    assert run.status.value == "completed"
    assert not set(second.started) & intents  # completed steps are not run again, only their files redone
    assert all(_agree(session_dir, tasks).values())


def test_completions_arriving_together_share_a_journal_fsync_and_are_done_only_once_their_files_are_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten tasks finishing together: their intents share journal fsyncs (group commit), and a task's done
    record is journaled only after its task JSON, summary and TODO_LIST.md were each made durable as a temp
    file (its fsync, or a sync(2) covering every file), renamed into place and their folder fsynced."""
    import os
    import time

    from stepline.ccw import _state

    session_dir = _generated(tmp_path, 10, seed=5, max_deps=0)  # ten independent tasks, started together
    log: list[tuple[str, str]] = []
    real_fsync, real_os_sync, real_replace, real_done = os.fsync, os.sync, os.replace, _state.Committer._done

    def fsync(fd: int) -> None:
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def sync() -> None:
        log.append(("sync", "*"))
        real_os_sync()

    def replace(src: str | Path, dst: str | Path) -> None:
        log.append(("replace", str(dst)))
        real_replace(src, dst)

    def done(self: _state.Committer, items: list[Any]) -> None:
        log.extend(("done", item.completion.task_id) for item in items)
        real_done(self, items)

    intent_syncs: list[Path] = []
    real_sync = _state._sync_file

    def sync_intents(path: Path) -> None:  # slow, as on a busy disk: what arrives meanwhile joins the next batch
        intent_syncs.append(path)
        time.sleep(0.1)
        real_sync(path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "sync", sync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(_state.Committer, "_done", done)
    monkeypatch.setattr(_state, "_sync_file", sync_intents)
    run = _run(tmp_path, session_dir, Recorder(delay=0.01), concurrency=10)
    assert run.status.value == "completed"
    assert 1 <= len(intent_syncs) <= 2  # the first intent's fsync, then one for the nine that came meanwhile
    folder = str(session_dir)
    for k in range(1, 11):
        task = f"IMPL-{k}"
        finished = log.index(("done", task))
        for target in (f"{folder}/.task/{task}.json", f"{folder}/.summaries/{task}-summary.md",
                       f"{folder}/TODO_LIST.md"):
            name = target.rpartition("/")[2]
            temp = f"{target.rpartition('/')[0]}/.{name}.{os.getpid()}.tmp"
            renames = [i for i, entry in enumerate(log[:finished]) if entry == ("replace", target)]
            renamed, before = renames[-1], (renames[-2] if len(renames) > 1 else -1)
            # the bytes were durable, then renamed; then the rename was durable
            assert {("fsync", temp), ("sync", "*")} & set(log[before + 1:renamed]), (task, name)
            assert ("fsync", target.rpartition("/")[0]) in log[renamed:finished], (task, name)
    assert all(_agree(session_dir, [f"IMPL-{k}" for k in range(1, 11)]).values())


@pytest.mark.parametrize("manifest", ["dict", "list", "none"])
def test_complete_marks_every_task_and_archives_with_a_manifest_entry(tmp_path: Path, manifest: str) -> None:
    """Completing a session ticks what is left, moves it to archives/ and appends one manifest entry, in
    whichever manifest shape the project has; completing again after an interrupted move finishes the job."""
    project = _copy(tmp_path, "ccw", "project-active")
    archives = project / ".workflow" / "archives"
    if manifest == "list":
        (archives / "manifest.json").write_text("[]", encoding="utf-8")
    elif manifest == "none":
        (archives / "manifest.json").unlink()
    entry = complete_session(project / ".workflow" / "active" / "WFS-payment-module")
    target = archives / "WFS-payment-module"
    assert not (project / ".workflow" / "active" / "WFS-payment-module").exists()
    assert entry["archive_path"] == ".workflow/archives/WFS-payment-module"
    assert entry["metrics"]["tasks_completed"] == 3 and entry["metrics"]["summaries_generated"] == 3
    assert all(_agree(target, ["IMPL-1", "IMPL-2", "IMPL-3"]).values())
    assert json.loads((target / "workflow-session.json").read_text(encoding="utf-8"))["status"] == "completed"
    assert not (target / ".archiving").exists()
    data = json.loads((archives / "manifest.json").read_text(encoding="utf-8"))
    entries = data["archives"] if manifest == "dict" else data
    assert [e["session_id"] for e in entries][-1] == "WFS-payment-module"
    complete_session(target)  # idempotent: no second entry
    data = json.loads((archives / "manifest.json").read_text(encoding="utf-8"))
    assert sum(e["session_id"] == "WFS-payment-module" for e in (data["archives"] if manifest == "dict" else data)) == 1


def test_legacy_session_completes_and_loses_its_active_marker(tmp_path: Path) -> None:
    """A 2025-09 layout session runs, then completes into .workflow/archives/ without its .active-* marker."""
    project = _copy(tmp_path, "ccw", "project-legacy")
    session_dir = project / ".workflow" / "WFS-user-auth"
    run = _run(project, session_dir, Recorder())
    assert run.status.value == "completed"
    complete_session(session_dir)
    assert not (project / ".workflow" / ".active-WFS-user-auth").exists()
    assert (project / ".workflow" / "archives" / "WFS-user-auth" / "TODO_LIST.md").is_file()


class _WaitsForFirst(Executor):
    """IMPL-1 finishes at once; IMPL-2 finishes only once IMPL-1's task JSON on disk says completed."""

    name = "waits-for-first"
    pure = True

    def __init__(self, session_dir: Path) -> None:
        self.task_json = session_dir / ".task" / "IMPL-1.json"
        self.saw_first_written = False

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.step_id != "IMPL-1":
            for _ in range(2000):  # at most 20 s, when the feature is broken; a few ms when it works
                if json.loads(self.task_json.read_text(encoding="utf-8"))["status"] == "completed":
                    self.saw_first_written = True
                    break
                await asyncio.sleep(0.01)
        await session.finish(summary="done")


def test_a_completion_is_written_while_the_other_tasks_still_run(tmp_path: Path) -> None:
    """A task's files are written as soon as its completion is journaled, while the other tasks still run,
    not when the run settles."""
    session_dir = _generated(tmp_path, 2, seed=1, max_deps=0)
    executor = _WaitsForFirst(session_dir)
    run = _run(tmp_path, session_dir, executor, concurrency=2)
    assert run.status.value == "completed"
    assert executor.saw_first_written
    assert all(_agree(session_dir, ["IMPL-1", "IMPL-2"]).values())


def test_write_files_replaces_each_file_with_its_own_bytes_or_leaves_it_old(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file of a batch gets its own bytes (never another's), written again and again under the same temp
    names; a batch stopped midway leaves every file old or new, never torn, and no temp file behind."""
    import os

    from stepline.ccw._state import write_files

    folder = tmp_path / "folder"
    folder.mkdir()
    for name in ("a.json", "b.json", "c.json"):
        (folder / name).write_text("old " + name, encoding="utf-8")
    write_files([(folder / "a.json", b"a1")])
    write_files([(folder / "a.json", b"a2")])
    write_files([(folder / "a.json", b"a3"), (folder / "b.json", b"b3")])
    assert [(folder / n).read_bytes() for n in ("a.json", "b.json", "c.json")] == [b"a3", b"b3", b"old c.json"]
    real_replace = os.replace
    renamed: list[str] = []

    def replace(src: str | Path, dst: str | Path) -> None:
        if len(renamed) == 1:
            raise OSError(5, "Input/output error")
        renamed.append(str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="Input/output"):
        write_files([(folder / "a.json", b"a4"), (folder / "b.json", b"b4"), (folder / "c.json", b"c4")])
    assert [(folder / n).read_bytes() for n in ("a.json", "b.json", "c.json")] == [b"a4", b"b3", b"old c.json"]
    assert not list(folder.glob(".*.tmp"))


def test_replacing_a_linked_file_leaves_its_other_names_intact(tmp_path: Path) -> None:
    """A file with a second hard link, or a symlink, is replaced as a rename replaces it: the link's other
    name keeps the old content."""
    from stepline.ccw._state import write_files

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "hard.json").write_text("old hard", encoding="utf-8")
    (tmp_path / "other-name.json").hardlink_to(folder / "hard.json")
    (tmp_path / "real.json").write_text("old real", encoding="utf-8")
    (folder / "soft.json").symlink_to(tmp_path / "real.json")
    write_files([(folder / "hard.json", b"new hard"), (folder / "soft.json", b"new soft")])
    assert (folder / "hard.json").read_bytes() == b"new hard" and (folder / "soft.json").read_bytes() == b"new soft"
    assert not (folder / "soft.json").is_symlink()
    assert (tmp_path / "other-name.json").read_text(encoding="utf-8") == "old hard"
    assert (tmp_path / "real.json").read_text(encoding="utf-8") == "old real"
    assert not list(folder.glob("*.tmp"))


def test_a_run_removes_the_temp_files_a_killed_writer_left_and_leaves_none_of_its_own(tmp_path: Path) -> None:
    """A temp file of a process that no longer exists is deleted at the next execute; a run leaves no temp
    file of its own, and every task's three files agree."""
    session_dir = _generated(tmp_path, 12, seed=2, max_deps=1)
    stale = [session_dir / ".task" / ".IMPL-3.json.999999999.tmp", session_dir / ".TODO_LIST.md.999999999.tmp"]
    for path in stale:
        path.write_bytes(b"half a file")
    run = _run(tmp_path, session_dir, Recorder(delay=0.02), concurrency=3)
    assert run.status.value == "completed"
    assert not [path for path in session_dir.rglob("*.tmp")]
    assert all(_agree(session_dir, [f"IMPL-{i}" for i in range(1, 13)]).values())


def test_the_final_manifest_holds_the_spec_once_and_the_steps_counted_by_status(tmp_path: Path) -> None:
    """The final manifest is the whole workflow spec the run ran (redacted) and its steps counted by status:
    no record per step (the journal is the truth, the manifest does not restate it)."""
    from stepline.guardrails import redact

    project = _copy(tmp_path, "ccw", "project-active")
    engine = Engine(config=ALLOW_PLAN_COMMANDS, project_root=project, executor=Recorder(), concurrency=4)
    run = asyncio.run(execute_session(engine, project / ".workflow" / "active" / "WFS-auth-system"))
    assert run.status.value == "completed"
    manifest = json.loads((engine.store.root / run.run_id / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["workflow"] == json.loads(redact(run.workflow.model_dump_json(exclude_defaults=True)))
    assert manifest["steps_by_status"] == {"completed": len(run.workflow.steps)}
    assert "steps" not in manifest
    assert manifest["journal_seq"] == run.journal_seq


def test_the_writer_reuses_the_index_parse_of_todo_list_but_not_after_a_hand_edit(tmp_path: Path) -> None:
    """The writer takes TODO_LIST.md's lines from the parse the session index made; a hand edit after the
    index read the file is kept when the writer ticks a box (it re-reads the new version)."""
    from stepline.ccw._session import read_ccw_session

    project = _copy(tmp_path, "ccw", "project-active")
    session_dir = project / ".workflow" / "active" / "WFS-auth-system"
    read_ccw_session(session_dir)  # the index's read, as execute makes before the run
    todo = session_dir / "TODO_LIST.md"
    todo.write_text(todo.read_text(encoding="utf-8") + "\nA note added by hand.\n", encoding="utf-8")
    history = ({"from": "pending", "to": "in_progress", "changed_at": "2026-01-01T00:00:00+00:00"},
               {"from": "in_progress", "to": "completed", "changed_at": "2026-01-01T00:01:00+00:00"})
    SessionWriter(session_dir).write([Completion(task_id="IMPL-2", task_json=".task/IMPL-2.json", history=history,
                                                 summary_path=".summaries/IMPL-2-summary.md", summary="done\n")])
    text = todo.read_text(encoding="utf-8")
    assert text.endswith("\nA note added by hand.\n")
    assert "- [x] **IMPL-2**" in text


class _WaitsForDone(Executor):
    """IMPL-1 and IMPL-2 finish at once; IMPL-3 finishes only once the journal holds their done records."""

    name = "waits-for-done"
    pure = True

    def __init__(self) -> None:
        self.saw_done = False

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.step_id == "IMPL-3":
            runs = Path(request.context["project_root"]) / ".stepline" / "runs"
            for _ in range(2000):  # at most 20 s, when the feature is broken; a few ms when it works
                lines = [line for path in runs.glob("*/journal.jsonl")
                         for line in path.read_text(encoding="utf-8").split("\n") if line.startswith("{")]
                done = {record["data"]["args"]["task_id"] for record in map(json.loads, lines)
                        if record["type"] == "CallRecorded" and record["data"].get("op") == "ccw_complete"}
                if {"IMPL-1", "IMPL-2"} <= done:
                    self.saw_done = True
                    break
                await asyncio.sleep(0.01)
        await session.finish(summary="done")


def test_completions_are_journaled_done_while_the_run_goes_on(tmp_path: Path) -> None:
    """Completions that came together are made durable and journaled done while another task still runs,
    not only when the run settles."""
    session_dir = _generated(tmp_path, 3, seed=1, max_deps=0)
    executor = _WaitsForDone()
    engine = Engine(config=ALLOW_PLAN_COMMANDS, project_root=tmp_path, executor=executor, concurrency=3)
    run = asyncio.run(asyncio.wait_for(execute_session(engine, session_dir), 60))
    assert run.status.value == "completed"
    assert executor.saw_done
    assert all(_agree(session_dir, ["IMPL-1", "IMPL-2", "IMPL-3"]).values())


def test_the_session_is_marked_active_even_when_no_task_is_left_to_run(tmp_path: Path) -> None:
    """The session is marked once the first tasks are under way, or when the run settles: a session whose
    tasks are all done already is marked too."""
    session_dir = _generated(tmp_path, 3, seed=1, max_deps=0)
    assert _run(tmp_path, session_dir, Recorder()).status.value == "completed"
    meta_path = session_dir / "workflow-session.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta_path.write_text(json.dumps({**meta, "status": "planning"}), encoding="utf-8")
    executor = Recorder()
    assert _run(tmp_path, session_dir, executor).status.value == "completed"
    assert executor.started == []
    assert json.loads(meta_path.read_text(encoding="utf-8"))["status"] == "active"


class _BreaksSessionFile(Executor):
    """Each task breaks workflow-session.json before it finishes (after the index read it)."""

    name = "breaks-session-file"
    pure = True

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        path = Path(request.context["session"]["workflow_session"])
        path.write_text("{not json", encoding="utf-8")
        await asyncio.sleep(0.01)
        await session.finish(summary="done")


def test_a_session_file_that_cannot_be_marked_stops_the_run_with_one_clear_error(tmp_path: Path) -> None:
    """Marking the session is part of the run's writes: when it fails, the run stops as a failed write
    does (resumable), and the error names the session and the file."""
    session_dir = _generated(tmp_path, 2, seed=1, max_deps=0)
    with pytest.raises(RunStateError) as caught:
        _run(tmp_path, session_dir, _BreaksSessionFile(), concurrency=2)
    message = str(caught.value)
    assert "could not be written" in message and "workflow-session.json" in message


class _EditsNextTask(Executor):
    """IMPL-1's agent rewrites IMPL-2's task JSON (new requirements) before it finishes."""

    name = "edits-next-task"
    pure = True

    def __init__(self, session_dir: Path) -> None:
        self.task_json = session_dir / ".task" / "IMPL-2.json"
        self.prompts: dict[str, str] = {}

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.prompts[request.step_id] = request.content
        if request.step_id == "IMPL-1":
            data = json.loads(self.task_json.read_text(encoding="utf-8"))
            data["context"]["requirements"] = ["Do the edited thing, which is longer than before"]
            self.task_json.write_text(json.dumps(data, indent=2), encoding="utf-8")
        await session.finish(summary="done")


def test_a_task_json_is_read_as_it_is_when_its_task_starts(tmp_path: Path) -> None:
    """A task JSON an earlier task's agent changed (IMPL-2's, by IMPL-1's agent) gives the prompt its new
    content; the run's completion keeps that content and adds the status."""
    session_dir = _generated(tmp_path, 3, seed=1, max_deps=0)
    executor = _EditsNextTask(session_dir)
    run = _run(tmp_path, session_dir, executor, concurrency=1)
    assert run.status.value == "completed"
    assert "Do the edited thing" in executor.prompts["IMPL-2"]
    data = json.loads((session_dir / ".task" / "IMPL-2.json").read_text(encoding="utf-8"))
    assert data["context"]["requirements"] == ["Do the edited thing, which is longer than before"]
    assert data["status"] == "completed"


class _Prompts(Executor):
    """Records each task's prompt and finishes after a little while."""

    name = "prompts"
    pure = True

    def __init__(self) -> None:
        self.prompts: dict[str, str] = {}

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.prompts[request.step_id] = request.content
        await asyncio.sleep(0.03)
        await session.finish(summary=f"did {request.step_id}")


def test_a_prompt_holds_its_dependencies_summaries_and_no_secret(tmp_path: Path) -> None:
    """Each task's prompt holds the summaries its dependencies' completions wrote; a secret in a task JSON
    is redacted before the agent sees it."""
    secret = "sk-proj-" + "a1b2c3d4e5f6g7h8i9j0"
    session_dir = _generated(tmp_path, 6, seed=4, max_deps=2)
    task = session_dir / ".task" / "IMPL-5.json"
    data = json.loads(task.read_text(encoding="utf-8"))
    data["context"]["requirements"] = [f"call the API with api_key = {secret}", "x" * 600]
    task.write_text(json.dumps(data, indent=2), encoding="utf-8")
    executor = _Prompts()
    assert _run(tmp_path, session_dir, executor, concurrency=2).status.value == "completed"
    checked = 0
    for sid, text in executor.prompts.items():
        depends_on = json.loads((session_dir / ".task" / f"{sid}.json").read_text())["context"]["depends_on"]
        assert all(f"did {dep}" in text for dep in depends_on), sid
        checked += len(depends_on)
    assert checked >= 3
    assert secret not in executor.prompts["IMPL-5"] and "[REDACTED:openai]" in executor.prompts["IMPL-5"]
