"""The engine's step lifecycle: order, variables, retries, timeouts, blocking, resume, gates, DAG waves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from stepline import Engine
from stepline.engine import RuntimeConfig
from stepline.engine._config import HitlPolicy
from stepline.errors import RunStateError
from stepline.executors import Executor, StepRequest, StepSession
from stepline.families import load_workflow
from stepline.model import RetryPolicy, StepSpec, WorkflowSpec
from stepline.service import RunService


def _run(engine: Engine, workflow: WorkflowSpec) -> Any:
    return asyncio.run(engine.start(workflow))


def _events(engine: Engine, run_id: str) -> list[Any]:
    return engine.store.open(run_id).events()


class FlakyExecutor(Executor):
    """Fails the first ``failures`` requests, then finishes."""

    name = "flaky"
    pure = True

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"boom {self.calls}")
        await session.finish(summary="ok")


def test_steps_run_in_order_and_share_variables(project: Path, write_workflow: Callable[..., Path],
                                                write_script: Callable[..., Path]) -> None:
    """A scripted native workflow runs every step once, in order, and a variable set early is seen later."""
    path = write_workflow([
        {"id": "first", "body": "set the name"},
        {"id": "second", "body": "greet {{who}}", "outputs": ["out/{who}.txt"]},
    ])
    script = write_script({
        "first": [{"set_var": {"name": "who", "value": "ada"}}, {"finish": {}}],
        "second": [{"write_output": {"content": "hello ada\n"}}, {"finish": {"summary": "greeted"}}],
    })
    engine = Engine(project_root=project, executor="scripted", executor_options={"script": str(script)})
    run = _run(engine, load_workflow(path))
    assert run.status.value == "completed"
    assert (project / "out" / "ada.txt").read_text() == "hello ada\n"
    started = [e.step_id for e in _events(engine, run.run_id) if e.type == "WorkflowStepStarted"]
    assert started == ["first", "second"]
    artifacts = json.loads((engine.store.root / run.run_id / "artifacts.json").read_text())
    assert artifacts[0]["path"] == "out/ada.txt" and len(artifacts[0]["sha256"]) == 64


def test_retries_follow_the_step_policy_with_exponential_jittered_backoff(project: Path) -> None:
    """A failing step is retried retries.max times with delays backoff*2**n ± jitter, then succeeds."""
    delays: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)

    executor = FlakyExecutor(failures=2)
    workflow = WorkflowSpec(id="w", steps=[StepSpec(id="s", retries=RetryPolicy(max=2, backoff_seconds=1.0,
                                                                                jitter=0.2))])
    engine = Engine(project_root=project, executor=executor, sleep=fake_sleep)
    run = _run(engine, workflow)
    assert run.status.value == "completed"
    assert run.steps["s"].attempts == 3
    assert len(delays) == 2
    assert 0.8 <= delays[0] <= 1.2 and 1.6 <= delays[1] <= 2.4
    retries = [e for e in _events(engine, run.run_id) if e.type == "StepRetry"]
    assert [e.data["attempt"] for e in retries] == [2, 3]


def test_runtime_max_retries_is_the_fallback_and_exhaustion_fails_the_run(project: Path) -> None:
    """Without StepSpec.retries the runtime's max_retries applies; when spent, the step and run fail."""
    config = RuntimeConfig.model_validate({"runtime": {"max_retries": 1}})
    executor = FlakyExecutor(failures=5)
    run = _run(Engine(project_root=project, executor=executor, config=config),
               WorkflowSpec(id="w", steps=[StepSpec(id="s"), StepSpec(id="after")]))
    assert executor.calls == 2
    assert run.status.value == "failed"
    assert run.steps["s"].status.value == "failed" and "boom 2" in (run.steps["s"].error or "")
    assert run.steps["after"].status.value == "pending"


class HangingExecutor(Executor):
    """Never finishes; records that it was cancelled."""

    name = "hanging"
    pure = True
    cancelled: ClassVar[list[str]] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(request.step_id)
            raise


def test_timeout_cancels_the_running_executor_and_fails_the_step(project: Path) -> None:
    """The step timeout is enforced while the step runs: the executor is cancelled and the step fails."""
    HangingExecutor.cancelled.clear()
    workflow = WorkflowSpec(id="w", steps=[StepSpec(id="slow", timeout_seconds=0.2)])
    run = _run(Engine(project_root=project, executor=HangingExecutor()), workflow)
    assert HangingExecutor.cancelled == ["slow"]
    assert run.status.value == "failed"
    assert "timed out after 0.2s" in (run.steps["slow"].error or "")


def test_a_question_blocks_a_non_interactive_run_and_the_answer_resumes_it(
        project: Path, write_workflow: Callable[..., Path], write_script: Callable[..., Path]) -> None:
    """ask() blocks the run; `answer` records the reply; resume replays earlier calls and uses the answer."""
    path = write_workflow([{"id": "s", "outputs": ["log.txt"]}, {"id": "t"}])
    script = write_script({"s": [
        {"write_output": {"content": "before\n"}},
        {"ask": {"question": "Which colour?"}},
        {"write_output": {"content": "after\n"}},
        {"finish": {}},
    ]})
    options = {"script": str(script)}
    engine = Engine(project_root=project, executor="scripted", executor_options=options, mode="non-interactive")
    run = _run(engine, load_workflow(path))
    assert run.status.value == "blocked"
    assert "Which colour?" in (run.blocked_reason or "")
    assert (project / "log.txt").read_text() == "before\n"
    RunService(project).answer(run.run_id, "blue", by="ada")
    resumed = asyncio.run(Engine(project_root=project).resume(run.run_id))
    assert resumed.status.value == "completed"
    assert (project / "log.txt").read_text() == "before\nafter\n"  # the first write was replayed, not redone
    asks = [e for e in _events(engine, run.run_id) if e.type == "CallRecorded" and e.data["op"] == "ask"]
    assert [a.data["result"] for a in asks] == ["blue"]


def test_a_changed_script_on_resume_is_a_nondeterminism_failure(
        project: Path, write_workflow: Callable[..., Path], write_script: Callable[..., Path]) -> None:
    """If a resumed step makes a different call than the journal recorded, the step fails clearly."""
    path = write_workflow([{"id": "s", "outputs": ["log.txt"]}])
    script = write_script({"s": [{"write_output": {"content": "x\n"}}, {"ask": {"question": "ok?"}},
                                 {"finish": {}}]})
    engine = Engine(project_root=project, executor="scripted", executor_options={"script": str(script)},
                    mode="non-interactive")
    run = _run(engine, load_workflow(path))
    RunService(project).answer(run.run_id, "yes", by="ada")
    write_script({"s": [{"set_var": {"name": "v", "value": 1}}, {"ask": {"question": "ok?"}}, {"finish": {}}]})
    resumed = asyncio.run(Engine(project_root=project).resume(run.run_id))
    assert resumed.status.value == "failed"
    assert "was 'write_output' when the run was interrupted but is 'set_var' now" in (resumed.steps["s"].error or "")


def test_resuming_a_completed_run_is_refused(project: Path) -> None:
    """A completed run cannot be resumed; completed steps never run again."""
    engine = Engine(project_root=project)
    run = _run(engine, WorkflowSpec(id="w", steps=[StepSpec(id="s")]))
    with pytest.raises(RunStateError, match="already completed"):
        asyncio.run(Engine(project_root=project).resume(run.run_id))


def test_resuming_a_completed_run_whose_driver_was_killed_on_its_way_out_finishes_its_snapshot(
        project: Path) -> None:
    """Killed after the journal's last record, before the final manifest, the timeline and the journal's closing
    cut: a resume leaves the run directory as a clean end would and reports the run completed (issue 28 item 6);
    a second resume is refused as for any completed run."""
    engine = Engine(project_root=project)
    run = _run(engine, WorkflowSpec(id="w", steps=[StepSpec(id="a"), StepSpec(id="b")]))
    run_dir = engine.store.root / run.run_id
    clean = {name: (run_dir / name).read_bytes() for name in ("journal.jsonl", "manifest.json")}
    stale = json.loads(clean["manifest.json"])
    stale["status"], stale["journal_seq"] = "running", 1  # the first manifest, as the killed process left it
    (run_dir / "manifest.json").write_text(json.dumps(stale), encoding="utf-8")
    (run_dir / "timeline.json").unlink()
    with (run_dir / "journal.jsonl").open("ab") as journal:
        journal.write(bytes(4096))  # the zeros the journal was grown by
    assert [s.status for s in engine.store.summaries()] == ["running"]
    assert asyncio.run(Engine(project_root=project).resume(run.run_id)).status.value == "completed"
    assert (run_dir / "journal.jsonl").read_bytes() == clean["journal.jsonl"]
    assert json.loads((run_dir / "manifest.json").read_bytes()) == json.loads(clean["manifest.json"])
    assert json.loads((run_dir / "timeline.json").read_bytes())["events"]
    assert [s.status for s in engine.store.summaries()] == ["completed"]
    with pytest.raises(RunStateError, match="already completed"):
        asyncio.run(Engine(project_root=project).resume(run.run_id))


def test_required_gate_blocks_until_approved_and_records_who(project: Path) -> None:
    """human_gate: required blocks before the step runs; an approval with a name lets it run."""
    executor = FlakyExecutor(failures=0)
    workflow = WorkflowSpec(id="w", steps=[StepSpec(id="a"), StepSpec(id="b", human_gate="required", phase="P2")])
    engine = Engine(project_root=project, executor=executor, mode="non-interactive")
    run = _run(engine, workflow)
    assert run.status.value == "blocked" and executor.calls == 1
    run_dir = engine.store.root / run.run_id
    gates = json.loads((run_dir / "gates.json").read_text())
    assert gates[0]["gate_id"] == "step:b" and gates[0]["status"] == "pending" and gates[0]["phase"] == "P2"
    RunService(project).decide(run.run_id, "step:b", approved=True, by="grace", notes="looks right")
    resumed = asyncio.run(Engine(project_root=project, executor=executor).resume(run.run_id))
    assert resumed.status.value == "completed" and executor.calls == 2
    approvals = json.loads((run_dir / "approvals.json").read_text())
    assert approvals[0]["approver"] == "grace" and approvals[0]["notes"] == "looks right"
    assert json.loads((run_dir / "drr.json").read_text())[0]["signoff"] == "grace"


def test_rejected_gate_fails_the_step_without_running_it(project: Path) -> None:
    """A rejected gate fails its step; the executor never runs it."""
    executor = FlakyExecutor(failures=0)
    engine = Engine(project_root=project, executor=executor, mode="non-interactive")
    run = _run(engine, WorkflowSpec(id="w", steps=[StepSpec(id="b", human_gate="required")]))
    RunService(project).decide(run.run_id, None, approved=False, by="grace", notes="no")
    resumed = asyncio.run(Engine(project_root=project, executor=executor).resume(run.run_id))
    assert resumed.status.value == "failed" and executor.calls == 0
    assert "rejected by grace" in (resumed.steps["b"].error or "")


GATE_CASES = [
    # (human_gate, phase, workflow id, policy, blocks?)
    ("required", "", "w", {}, True),
    ("optional", "", "w", {}, False),
    (None, "", "w", {}, False),
    ("conditional", "", "w", {}, False),
    ("conditional", "", "w", {"conditional_required": True}, True),
    ("recommended", "", "w", {}, False),
    ("recommended", "", "w", {"recommended_required": True}, True),
    ("optional", "Phase 2", "w", {"required_phases": ["Phase 2"]}, True),
    ("optional", "Phase 3", "w", {"required_phases": ["Phase 2"]}, False),
    ("optional", "Phase 3", "w", {"conditional_phases": ["Phase 3"]}, False),
    ("optional", "Phase 3", "w", {"conditional_phases": ["Phase 3"], "conditional_required": True}, True),
    ("optional", "", "prod-deploy", {"high_risk_keywords": ["deploy"]}, True),
    ("optional", "", "docs", {"high_risk_keywords": ["deploy"]}, False),
    ("optional", "", "db-migrate", {"conditional_keywords": ["migrate"]}, False),
    ("optional", "", "db-migrate", {"conditional_keywords": ["migrate"], "conditional_required": True}, True),
]


@pytest.mark.parametrize(("gate", "phase", "workflow_id", "policy", "blocks"), GATE_CASES)
def test_gate_decision_table(gate: Any, phase: str, workflow_id: str, policy: dict[str, Any], blocks: bool) -> None:
    """human_gate combined with the HITL policy decides whether a step waits for a person."""
    from stepline.engine import gate_reason

    reason = gate_reason(StepSpec(id="s", human_gate=gate, phase=phase), workflow_id, HitlPolicy(**policy))
    assert (reason is not None) == blocks


class ConcurrencyProbe(Executor):
    """Counts how many steps run at once; fails the step named ``bad``."""

    name = "probe"
    pure = True

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(0.02)
            if request.step_id == "bad":
                raise RuntimeError("bad step")
            await session.finish()
        finally:
            self.active -= 1


def test_dag_runs_independent_steps_concurrently_and_skips_dependents_of_a_failure(project: Path) -> None:
    """Steps with satisfied dependencies run together up to the limit; a failure skips only its dependents."""
    steps = [StepSpec(id=f"w{i}") for i in range(6)] + [
        StepSpec(id="bad", retries=RetryPolicy(max=0)),
        StepSpec(id="child", depends_on=["bad"]), StepSpec(id="grandchild", depends_on=["child"]),
        StepSpec(id="join", depends_on=["w0", "w1"]),
    ]
    probe = ConcurrencyProbe()
    run = _run(Engine(project_root=project, executor=probe, concurrency=3),
               WorkflowSpec(id="w", steps=steps, meta={"scheduling": "dag"}))
    assert probe.peak == 3
    status = {sid: s.status.value for sid, s in run.steps.items()}
    assert status["child"] == status["grandchild"] == "skipped"
    assert status["join"] == "completed" and status["bad"] == "failed"
    assert run.status.value == "failed"


def test_rejected_gate_with_on_reject_skip_goes_on_without_the_step(project: Path) -> None:
    """on_reject: skip completes the gated step without its work, and the run carries on."""
    executor = FlakyExecutor(failures=0)
    workflow = WorkflowSpec(id="w", steps=[StepSpec(id="b", human_gate="required", on_reject="skip"),
                                           StepSpec(id="c")])
    engine = Engine(project_root=project, executor=executor, mode="non-interactive")
    run = _run(engine, workflow)
    RunService(project).decide(run.run_id, None, approved=False, by="grace", notes="not now")
    resumed = asyncio.run(Engine(project_root=project, executor=executor).resume(run.run_id))
    assert resumed.status.value == "completed" and executor.calls == 1  # only step c ran
    assert "rejected by grace (on_reject: skip)" in (resumed.steps["b"].summary or "")


def test_an_append_landed_before_the_crash_is_found_at_its_recorded_size_and_nothing_else_is(tmp_path: Path) -> None:
    """A redo writes nothing only when the content sits whole at the size its intent recorded; other steps'
    lines there, or a file not there, mean the append is still to do (a redo journals a new intent for it)."""
    from stepline.engine._session import _landed_at

    log = tmp_path / "effects.log"
    assert not _landed_at(log, "b\n", 0)
    log.write_text("a\nb\nc\n")
    assert _landed_at(log, "b\n", 2)  # whole, then another step's line after it
    assert not _landed_at(log, "b\n", 4)  # another step's line where it would have landed
    assert not _landed_at(log, "d\n", 6)  # at the end: never written


def _append_intent(seq: int, key: str, path: str, pre_size: int | None, *, recorded: bool) -> list[Any]:
    from stepline.model import Event

    args = {"path": path, "mode": "append", "section": None}
    events = [Event(seq=seq, type="CallStarted", run_id="r", time="t", step_id=key.split("/")[0],
                    data={"key": key, "op": "write_output", "args": {**args, "pre_size": pre_size}})]
    if recorded:
        events.append(Event(seq=seq + 1, type="CallRecorded", run_id="r", time="t", step_id=key.split("/")[0],
                            data={"key": key, "op": "write_output", "args": args, "result": path}))
    return events


def test_resume_cuts_off_an_append_the_crash_tore_before_any_step_appends_again(tmp_path: Path) -> None:
    """The last append intent of a file without a record tore it: cut back to its size. An earlier
    unrecorded intent is not the last write to the file, so what follows it is other steps' lines."""
    from stepline.engine._session import repair_torn_appends

    (tmp_path / "log.txt").write_text("a\nb\nIMPL", encoding="utf-8")  # b's step appended, then c's was torn
    (tmp_path / "other.txt").write_text("x\ny\n", encoding="utf-8")  # x's intent unrecorded, but y's came after
    events = [*_append_intent(1, "a/1/0/1", "log.txt", None, recorded=True),
              *_append_intent(3, "b/1/0/1", "log.txt", 2, recorded=True),
              *_append_intent(5, "c/1/0/1", "log.txt", 4, recorded=False),
              *_append_intent(6, "x/1/0/1", "other.txt", 0, recorded=False),
              *_append_intent(7, "y/1/0/1", "other.txt", 2, recorded=True)]
    repair_torn_appends(events, tmp_path)
    assert (tmp_path / "log.txt").read_text(encoding="utf-8") == "a\nb\n"
    assert (tmp_path / "other.txt").read_text(encoding="utf-8") == "x\ny\n"


class _ManifestWatcher(Executor):
    """Notes, at each call, whether the run's manifest exists yet; then waits a little and finishes."""

    name = "manifest-watcher"
    pure = True

    def __init__(self, store_root: Path) -> None:
        self.store_root = store_root
        self.seen: list[bool] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.seen.append(any(self.store_root.glob("*/manifest.json")))
        await asyncio.sleep(0.01)
        await session.finish(summary="ok")


def _watch_journal_writes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The journals written to while their run had no manifest yet (filled in as runs go)."""
    from stepline.store import Journal

    written_without_manifest: list[Path] = []
    real_write = Journal._write

    def write(self: Journal, data: bytes) -> None:
        if not (self.path.parent / "manifest.json").is_file():
            written_without_manifest.append(self.path)
        real_write(self, data)

    monkeypatch.setattr(Journal, "_write", write)
    return written_without_manifest


@pytest.mark.parametrize("dag", [False, True])
def test_a_new_runs_first_steps_start_before_its_manifest_but_nothing_is_journaled_before_it(
        project: Path, monkeypatch: pytest.MonkeyPatch, dag: bool) -> None:
    """The first manifest is written once the first steps wait (it costs them no time), and in any case
    before the first journal bytes reach the file: no record is on disk in a run that could not be loaded."""
    written_without_manifest = _watch_journal_writes(monkeypatch)
    steps = [StepSpec(id=f"s{i}", depends_on=[] if dag or i == 0 else [f"s{i - 1}"]) for i in range(6)]
    workflow = WorkflowSpec(id="w", steps=steps, meta={"scheduling": "dag"} if dag else {})
    engine = Engine(project_root=project, executor=_ManifestWatcher(project / ".stepline" / "runs"), concurrency=2)
    watcher = engine.executor
    assert isinstance(watcher, _ManifestWatcher)
    run = _run(engine, workflow)
    assert run.status.value == "completed"
    assert not written_without_manifest
    assert watcher.seen[0] is False  # the first step did not wait for the manifest
    assert watcher.seen[-1] is True  # written while the first steps waited
    manifest = json.loads((engine.store.root / run.run_id / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["workflow"]["id"] == "w"


def test_a_run_that_stops_before_its_first_step_waits_still_leaves_a_loadable_run(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step failing at once (no wait) journals its failure before the deferred manifest's moment: the
    manifest is written first all the same, and the run loads."""
    written_without_manifest = _watch_journal_writes(monkeypatch)
    workflow = WorkflowSpec(id="w", steps=[StepSpec(id="only", retries=RetryPolicy(max=0))])
    engine = Engine(project_root=project, executor=FlakyExecutor(failures=99))
    run = _run(engine, workflow)
    assert run.status.value == "failed"
    assert not written_without_manifest
    loaded = engine.load(engine.store.open(run.run_id))
    assert loaded.status.value == "failed" and loaded.workflow.id == "w"


def test_the_manifest_is_the_runs_dump_without_step_records_redacted_with_the_spec_scanned_once(
        project: Path) -> None:
    """The manifest is written from the spec's text and the rest's, the spec redacted once per run: it is the
    run dumped and redacted, less the step records (the journal's), plus the steps counted by status; a
    secret in the spec never lands."""
    from stepline.guardrails import redact

    secret = "sk-proj-" + "a1b2c3d4e5f6g7h8i9j0"
    workflow = WorkflowSpec(id="w", variables={"who": "ada"},
                            steps=[StepSpec(id="a", body=f"call with api_key = {secret}"), StepSpec(id="b")])
    engine = Engine(project_root=project, executor=FlakyExecutor(failures=0))
    run = _run(engine, workflow)
    assert run.status.value == "completed"
    text = (engine.store.root / run.run_id / "manifest.json").read_text(encoding="utf-8")
    whole = json.loads(redact(run.model_dump_json(exclude_defaults=True)))
    assert whole.pop("steps")
    assert json.loads(text) == {**whole, "steps_by_status": {"completed": 2}}
    assert secret not in text and "[REDACTED:openai]" in text
    assert json.loads(text)["workflow"]["steps"][0]["id"] == "a"
    assert text.endswith("}\n") and "\n" not in text[:-1]  # one line: no indentation to store and scan


def test_a_run_whose_manifest_holds_step_records_still_loads_and_lists(project: Path) -> None:
    """A manifest written before the step records were left out (indented, a record per step) still loads:
    the journal rebuilds the steps, and ``stepline list`` counts them from the records."""
    engine = Engine(project_root=project)
    run = _run(engine, WorkflowSpec(id="w", steps=[StepSpec(id="a"), StepSpec(id="b")]))
    (engine.store.root / run.run_id / "manifest.json").write_text(
        run.model_dump_json(indent=2, exclude_defaults=True), encoding="utf-8")
    loaded = engine.load(engine.store.open(run.run_id))
    assert loaded.status.value == "completed"
    assert {sid: step.status.value for sid, step in loaded.steps.items()} == {"a": "completed", "b": "completed"}
    [summary] = engine.store.summaries()
    assert (summary.status, summary.steps_done, summary.steps_total) == ("completed", 2, 2)


def test_a_long_texts_redaction_is_kept_and_still_redacted(project: Path) -> None:
    """Engine.redact keeps the redaction of long texts (a prompt made ahead is scanned once): asked again,
    the same text comes back redacted, and the kept texts stay few."""
    from stepline.engine import _runner

    secret = "sk-proj-" + "a1b2c3d4e5f6g7h8i9j0"
    engine = Engine(project_root=project, executor=FlakyExecutor(failures=0))
    text = f"use api_key = {secret}\\n" + "padding " * 100
    first = engine.redact(text)
    assert secret not in first and "[REDACTED:openai]" in first
    assert engine.redact(text) is first
    for number in range(_runner._REDACTED_KEPT + 10):
        engine.redact(f"{number} " + "more text " * 60)
    assert len(engine._redacted) == _runner._REDACTED_KEPT
    assert engine.redact("short sk-proj-" + "z9" * 10) == "short [REDACTED:openai]"


def test_timeline_json_is_the_order_of_the_events_and_show_rebuilds_them_whole(project: Path) -> None:
    """timeline.json lists each public event's seq, time, kind and step (its data is the journal's record with
    that seq) next to the audit records; build_timeline, what show and export print, has the data and spans."""
    from stepline.engine import build_timeline

    engine = Engine(project_root=project)
    run = _run(engine, WorkflowSpec(id="w", steps=[StepSpec(id="a"), StepSpec(id="b")]))
    run_dir = engine.store.open(run.run_id)
    written = json.loads((run_dir.path / "timeline.json").read_bytes())
    whole = build_timeline(run_dir)
    assert written["events"] == [{k: e[k] for k in ("seq", "time", "type", "step_id")} for e in whole["events"]]
    assert [e["type"] for e in written["events"]] == ["WorkflowStarted"] + [
        "WorkflowStepStarted", "WorkflowStepCompleted"] * 2 + ["WorkflowCompleted"]
    assert "steps" not in written and [s["step_id"] for s in whole["steps"]] == ["a", "b"]
    assert {k: v for k, v in written.items() if k != "events"} == {
        k: v for k, v in whole.items() if k not in ("events", "steps")}
