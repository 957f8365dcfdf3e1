"""The engine: the only code that changes run state.

One run is driven by one process holding the run's lock. The loop asks the workflow's flow which steps may
start, runs each through the step lifecycle (gate → attempt → driver with a timeout → complete, or retry,
block, fail), and journals every state change before it is acted on. State is never kept anywhere but in
the journal and its fold (:mod:`stepline.engine._state`); ``manifest.json`` is a snapshot written when the
run starts and whenever the process stops driving it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stepline import time
from stepline.engine._checks import check_step_inputs, check_step_outputs, run_validation_gates
from stepline.engine._config import RuntimeConfig
from stepline.engine._context import StepContext
from stepline.engine._deadlines import Deadlines
from stepline.engine._flow import Flow, make_schedule
from stepline.engine._gates import GateBook, gate_reason
from stepline.engine._human import HumanChannel
from stepline.engine._retry import retry_delay
from stepline.engine._session import JournaledSession, Outcome, repair_torn_appends, run_tool_once, sha256_file
from stepline.engine._signals import StepBlocked
from stepline.engine._state import CallLog, apply, fold, stamp
from stepline.engine._telis import close_context, resolve_step_context
from stepline.errors import (
    ExecutorError,
    JournalError,
    NondeterminismError,
    RunStateError,
    StepFailed,
    SteplineError,
    StorageError,
    ToolError,
)
from stepline.executors import Executor, Ledger, StepRequest, create_executor
from stepline.model import (
    Artifact,
    Event,
    EventType,
    Risk,
    Run,
    RunMode,
    RunStatus,
    StepSpec,
    StepStatus,
    WorkflowSpec,
    dump_data,
)
from stepline.store import (
    MANIFEST_COUNTS,
    Diagnosis,
    Durability,
    Journal,
    RunDir,
    RunLock,
    RunStore,
    diagnose,
    keep_artifact,
    sweep_temp_files,
    truncate_to_last_good,
)

if TYPE_CHECKING:
    from stepline.context import ContextResolver

__all__ = ["Engine", "EventListener", "RunObserver", "StepDriver", "register_driver", "register_observer"]

#: Called with every event the engine journals (progress displays, the web dashboard's live feed).
EventListener = Callable[[Event], None]
#: Runs one attempt of one step of a given workflow format.
StepDriver = Callable[[StepContext], Awaitable[None]]
#: Builds the flow (which step runs next) for a workflow format.
FlowFactory = Callable[[WorkflowSpec, Run], Flow]
#: Awaited before a run of a workflow format finishes (work its driver left running in the background).
Settle = Callable[["Engine", Run], Awaitable[None]]

_drivers: dict[str, StepDriver] = {}
_flows: dict[str, FlowFactory] = {}
_settles: dict[str, Settle] = {}
_self_durable: set[str] = set()
_observers: list[RunObserver] = []
#: Texts at least this long have their redaction kept, the last this many (see Engine.redact).
_REDACTED_MIN, _REDACTED_KEPT = 512, 64


def register_driver(fmt: str, driver: StepDriver, flow: FlowFactory | None = None, *, settle: Settle | None = None,
                    completion_durable: bool = False) -> None:
    """Teach the engine to run steps of workflow format ``fmt`` (and, optionally, how to order them).

    ``settle`` is awaited once no step is left to run, before the run's last record: a driver whose steps
    complete before their work is durable (CCW's completions are journaled intents, written in the
    background) finishes that work there, since a finished run is never resumed to redo it.
    ``completion_durable`` says the driver has made the step's result durable in the journal itself (a
    record that a resumed step replays), so its StepCompleted need not be fsynced on its own: lost, the step
    runs again and replays that record.
    """
    _drivers[fmt] = driver
    if flow is not None:
        _flows[fmt] = flow
    if settle is not None:
        _settles[fmt] = settle
    if completion_durable:
        _self_durable.add(fmt)


class RunObserver(Protocol):
    """Told of every record any engine of the process journals, every kind (what telemetry is built from).

    Unlike a listener it sees the journal-only records too (calls, their results, usage), and each run's
    lifetime in this process: ``opened`` as a process starts (``history`` empty) or resumes a run (``history``
    its journal so far), returning data journaled with that WorkflowStarted or WorkflowResumed record (read
    back from ``history`` on a later resume) or None; ``journaled`` for each record; ``closed`` when the
    process stops driving the run, however it stops (it may be told more than once).
    """

    def opened(self, run: Run, history: list[Event]) -> dict[str, Any] | None: ...

    def journaled(self, run: Run, event: Event) -> None: ...

    def closed(self, run: Run) -> None: ...


def register_observer(observer: RunObserver) -> None:
    """Tell ``observer`` of every run this process drives from now on (idempotent)."""
    if observer not in _observers:
        _observers.append(observer)


def _observed(run: Run, history: list[Event]) -> dict[str, Any]:
    """What the observers add to the record that opens ``run`` in this process."""
    added: dict[str, Any] = {}
    for observer in _observers:
        added.update(observer.opened(run, history) or {})
    return added


_PUBLIC = frozenset(e.value for e in EventType) - {
    EventType.CALL_STARTED.value, EventType.CALL_RECORDED.value, EventType.CURSOR_MOVED.value}


class Engine:
    """Drives runs of workflows. Build one per process; it can start or resume any number of runs in turn.

    Args:
        project_root: the folder a workflow's relative paths and file tools are confined to.
        config: runtime configuration (defaults when omitted).
        executor: an :class:`Executor`, or the registered name of one; None means ``dry-run`` for a new run
            and, on resume, the executor the run was started with.
        executor_options: options for a named executor (``script`` for ``scripted``, …).
        mode: ``normal``, ``yolo`` or ``non-interactive``.
        human: how people are reached (terminal, or blocked runs); built from ``config.hitl`` when omitted.
        sleep: the coroutine used to wait between retries (tests pass a fake).
        listeners: called with every journaled event.
        usage_within: a ledger the usage of every call of the runs this engine drives is added to as well, as it
            is journaled (a sprint loop's, which its stories running at once share).
    """

    def __init__(self, *, project_root: Path | str = ".", config: RuntimeConfig | None = None,
                 executor: Executor | str | None = None, executor_options: dict[str, Any] | None = None,
                 mode: RunMode = "normal", human: HumanChannel | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 listeners: list[EventListener] | None = None, concurrency: int | None = None,
                 usage_within: Ledger | None = None) -> None:
        self.project_root = Path(project_root).resolve()
        self.usage_within = usage_within
        self.config = config or RuntimeConfig()
        self.executor_explicit = executor is not None
        self.executor_name = (executor if isinstance(executor, str) else executor.name) if executor else "dry-run"
        self.executor_options = dict(executor_options or {})
        self._executor = executor if isinstance(executor, Executor) else None
        self.mode: RunMode = mode
        if human is None:
            hitl = self.config.hitl.mode
            human = HumanChannel(interactive=None if hitl == "auto" else hitl == "interactive")
        self.human = human
        self.sleep = sleep
        self.listeners = list(listeners or [])
        self.concurrency = concurrency or self.config.runtime.concurrency
        self.store = RunStore(self.project_root / self.config.runtime.storage_root)
        self._redact = self.config.guardrails.redact_secrets
        self._variables_view: tuple[Any, dict[str, Any]] = (None, {})
        self._spec_text: tuple[WorkflowSpec | None, str | None] = (None, None)  # see _manifest_text
        self._redacted: dict[str, str] = {}  # long texts and their redaction: see redact
        self._scanner = self.config.guardrails.scanner()
        # Per-run state, set by _open.
        self.calls = self._new_calls()
        self._run: Run | None = None
        self._completed_on_disk = False
        self._dir: RunDir | None = None
        self._journal: Journal | None = None
        self._manifest_due = False  # a new run's first manifest is not written yet (see start)
        self.flow: Flow | None = None  # of the run being driven: format drivers may ask it what comes next
        self._gates: GateBook | None = None
        self._artifacts: list[dict[str, Any]] = []
        self._tool_results: list[dict[str, Any]] = []
        self._events: list[Event] = []
        self._random = random.Random(0)
        self._deadlines = Deadlines()
        self.telis: ContextResolver | None = None  # the run's TELIS resolver, made when a step first asks (_telis)

    def _new_calls(self) -> CallLog:
        """The journaled-call tables of a run about to be driven or read (its ledger within ``usage_within``)."""
        return CallLog(ledger=Ledger(within=self.usage_within))

    # -- public API -----------------------------------------------------------------------------------------
    @property
    def executor(self) -> Executor:
        """The executor of the run being driven (built on first use)."""
        if self._executor is None:
            options = {**self.config.executors.get(self.executor_name, {}), **self.executor_options}
            record = options.pop("record", None)
            self._executor = create_executor(self.executor_name, options)
            if record:  # R-X6: every exchange of this run goes to a cassette as well
                from stepline.executors import wrap_recording

                self._executor = wrap_recording(self._executor, Path(str(record)))
            if self.config.runtime.backend == "ray":  # R-D1: the executor's work runs on a Ray cluster
                self._executor = _on_ray(self._executor, self.config, (self.executor_name, options), record)
        elif self.config.runtime.backend == "ray" and self._executor.name != "ray":  # an executor object passed in
            self._executor = _on_ray(self._executor, self.config, None, None)
        return self._executor

    @property
    def gates(self) -> GateBook:
        """The gate book of the run being driven."""
        assert self._gates is not None, "no run is being driven"
        return self._gates

    async def start(self, workflow: WorkflowSpec, variables: dict[str, Any] | None = None,
                    *, parent_run_id: str | None = None) -> Run:
        """Create a run of ``workflow`` and drive it until it completes, fails or blocks."""
        run_dir = self.store.create()
        self._events = []
        self.calls = self._new_calls()  # an engine that drove another run first must not answer this one from it
        now = time.now_iso()
        run = Run(run_id=run_dir.run_id, workflow=workflow, status=RunStatus.RUNNING, mode=self.mode,
                  executor=self.executor_name, executor_options=_public_options(self.executor_options),
                  project_root=str(self.project_root),
                  created_at=now, updated_at=now, parent_run_id=parent_run_id,
                  variables=self.redact({**workflow.variables, **(variables or {})}))
        for spec in workflow.steps:
            run.step(spec.id).name = spec.name or spec.id
        lock = run_dir.lock()
        try:
            lock.acquire()
        except BaseException:
            _remove_unstarted(run_dir)
            raise
        try:
            self._open(run_dir, run)
            # The first manifest and the journal's first sync (together some milliseconds) wait until the
            # first steps are under way (_start_durably); anything written to the journal before then
            # writes the manifest first, so no record is on disk in a run that could not be loaded.
            self._manifest_due = True
            self.emit(EventType.WORKFLOW_STARTED, {"workflow": workflow.id, "format": workflow.format,
                                                   "mode": self.mode, "executor": self.executor_name,
                                                   **(_observed(run, []) if _observers else {})},
                      sync="deferred")
            return await self._drive_and_close(lock)
        except BaseException as exc:
            error = self._stopped(exc, lock, run_dir, new=True)
            if error is exc:
                raise
            raise error from exc

    async def resume(self, run_id: str) -> Run:
        """Continue a run from the first step that is not completed; completed steps never run again."""
        run_dir = self.store.open(run_id)
        lock = run_dir.lock()
        lock.acquire()
        try:
            run = self.load(run_dir)
            sweep_temp_files(run_dir.path, any_pid=True)  # a killed writer's, or one a full disk stopped
            if run.status == RunStatus.COMPLETED:
                if self._finish_closing(run_dir, run):  # the run's last process could not write them (a full disk)
                    lock.release()
                    return run
                raise RunStateError(f"run {run.run_id} is already completed", hint="start a new run instead")
            self.mode = run.mode
            if not self.executor_explicit:
                self.executor_name = run.executor
                self.executor_options = {**run.executor_options, **self.executor_options}
                self._executor = None
            try:
                repair_torn_appends(self._events, self.project_root)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise JournalError(f"a recorded file append cannot be checked ({type(exc).__name__}: {exc})",
                                   path=str(run_dir.journal_path), hint=run_dir.doctor_hint()) from None
            self._open(run_dir, run)
            self.emit(EventType.WORKFLOW_RESUMED, {"from_status": run.status.value,
                                                   **(_observed(run, self._events) if _observers else {})}, sync=True)
            return await self._drive_and_close(lock)
        except BaseException as exc:
            error = self._stopped(exc, lock, run_dir, new=False)
            if error is exc:
                raise
            raise error from exc

    def _stopped(self, exc: BaseException, lock: RunLock, run_dir: RunDir, *, new: bool) -> BaseException:
        """Close the run ``exc`` stopped; return what to raise: ``exc``, or the storage error closing met (a
        full disk is what the user must hear of first), its hint saying how the run goes on.

        A new run whose first manifest never reached the disk recorded nothing (no journal byte is written
        before it): its folder is removed. Any other run stays as its journal says, resumable.
        """
        error = exc
        try:
            self._close(lock)
        except StorageError as closing:
            if not isinstance(exc, StorageError):
                error = closing
        if isinstance(error, StorageError):
            cause = error.remedy
            if new and self._manifest_due:
                error.hint = f"{cause}; run {run_dir.run_id} recorded nothing (its folder is removed): start it again"
            elif self._completed_on_disk:
                error.hint = (f"{cause}; run {run_dir.run_id} completed (its journal holds every step) but its final "
                              f"snapshot is not written: `stepline resume {run_dir.run_id}` writes it")
            else:
                error.hint = f"{cause}; then `stepline resume {run_dir.run_id}` continues the run"
        if new and self._manifest_due:
            _remove_unstarted(run_dir)
        return error

    def _finish_closing(self, run_dir: RunDir, run: Run) -> bool:
        """Do what the process that completed ``run`` may have been killed (or stopped by a full disk) before
        doing (the caller holds the lock): its journal's last record was on disk, but the final manifest, the
        timeline or the journal's torn tail may not be. The journal says what
        the snapshot must say. Returns whether the snapshot had to be written (the run's end was unfinished)."""
        run_dir.open_journal().close()  # opening cuts a torn record after the last one off
        manifest = run_dir.read("manifest.json") or {}
        if manifest.get("status") == run.status.value and manifest.get("journal_seq") == run.journal_seq:
            return False
        self._snapshot(run_dir, run)
        from stepline.engine._timeline import write_timeline

        write_timeline(run_dir, self._events)
        return True

    def load(self, run_dir: RunDir) -> Run:
        """Rebuild a run from its manifest's spec and its whole journal (the journal is the truth).

        Every record is checked as it is read and as it is folded in.

        Raises:
            JournalError: the run directory is damaged (the message names the file, the line, what is wrong).
        """
        run = run_dir.manifest()
        self.calls = self._new_calls()
        self._events = run_dir.records(run.journal_seq)
        fold(run, self._events, self.calls, path=str(run_dir.journal_path), hint=run_dir.doctor_hint())
        stamp(run, self._events[-1] if self._events else None)
        run_dir.check_audit()  # what show, export and a resume read back: damage is said now, not later
        return run

    def diagnose(self, run_dir: RunDir) -> Diagnosis:
        """What is wrong with a run's directory (``stepline doctor``): each file checked, the records folded as
        :meth:`load` folds them; never raises for damage."""
        return diagnose(run_dir, _check_fold, self.project_root)

    def truncate_to_last_good(self, run_dir: RunDir) -> tuple[Path, Diagnosis]:
        """Cut a damaged run back to its last good record, everything kept in a backup folder (``stepline
        doctor --truncate-to-last-good``); return the folder and the diagnosis after the repair."""
        return truncate_to_last_good(run_dir, _check_fold)

    def decide_gate(self, run_id: str, gate_id: str | None, *, approved: bool, by: str, notes: str | None = None,
                    answer: str | None = None) -> str:
        """Decide a gate of a run that is not being driven (it waits for a person); return the gate id.

        Takes the run's lock, records the decision in gates.json, approvals.json and drr.json and in the journal
        (where a resumed run reads it), and leaves the run blocked: ``resume`` continues it. ``answer`` answers a
        question gate; without it the gate must be an approval (a human gate or a risky tool).
        """
        run_dir = self.store.open(run_id)
        with run_dir.lock():
            run = self.load(run_dir)
            sweep_temp_files(run_dir.path, any_pid=True)
            if run.status in (RunStatus.COMPLETED, RunStatus.FAILED):
                raise RunStateError(f"run {run.run_id} is {run.status.value}; its gates can no longer be decided")
            self._open(run_dir, run)
            try:
                gate = self.gates.choose(gate_id, kinds=("question",) if answer is not None else ("human", "tool"))
                if answer is None and gate.kind == "question":
                    raise RunStateError(f"gate {gate.gate_id} is a question",
                                        hint=f"use `stepline answer {run.run_id}`")
                if answer is not None and gate.kind != "question":
                    raise RunStateError(f"gate {gate.gate_id} needs approve or reject, not an answer")
                self.record_decision(gate.gate_id, approved=approved, by=by, notes=notes, answer=answer)
                stamp(run, self._events[-1] if self._events else None)
                self._snapshot(run_dir, run)
            finally:
                if self._journal is not None:
                    self._journal.close()
                    self._journal = None
        return gate.gate_id

    # -- journal --------------------------------------------------------------------------------------------
    def _holds_secret(self, content: bytes) -> bool:
        text = content.decode("utf-8", "replace")
        return self._scanner.may_contain(text) and self._scanner.redact(text) != text

    def emit(self, kind: EventType, data: dict[str, Any], *, step_id: str | None = None,
             sync: Durability = False) -> Event:
        """Append an event to the journal, fold it into the run, and tell the listeners."""
        run, journal = self._run, self._journal
        assert run is not None and journal is not None, "no run is being driven"
        if self._manifest_due and sync != "deferred":
            self._write_first_manifest()
        event = Event(seq=journal.last_seq + 1, type=kind.value, run_id=run.run_id, time=time.now_iso(),
                      step_id=step_id, data=data)
        payload = dump_data(data)  # the envelope is the runtime's own: only the data can carry a secret
        if self._redact and self._scanner.may_contain(payload.decode("utf-8")):
            event.data = self._scanner.redact_obj(data)  # secrets never reach the journal (R-S1)
            payload = dump_data(event.data)
        journal.append(event, sync=sync, line=event.to_bytes(payload))
        if kind is EventType.ARTIFACT_READY and self._dir is not None:  # its content, for fork/replay/diff
            keep_artifact(self._dir.path, self.project_root, str(data["path"]), str(data["sha256"]),
                          holds_secret=self._holds_secret if self._redact else None)
        apply(run, event, self.calls)
        self._events.append(event)
        if self.listeners and event.type in _PUBLIC:
            for listener in self.listeners:
                listener(event)
        for observer in _observers:
            observer.journaled(run, event)
        return event

    def _snapshot(self, run_dir: RunDir, run: Run) -> None:
        """Write manifest.json atomically, secrets redacted (the workflow spec and variables may carry some).

        The manifest is what a reader needs before the journal: the workflow spec (resume rebuilds the run
        from it), the run's own fields and its steps counted by status (what ``stepline list`` shows). It
        holds no step records: the journal is the truth about each step, and its fold rebuilds them. Fields
        at their default are left out (a spec's steps are mostly defaults), and the JSON is not indented:
        both would make a long run's manifest several times larger, to write and to scan. Redaction works on
        the serialised text: one pass, and its replacements never break the JSON.
        """
        run_dir.write_text("manifest.json", self._manifest_text(run))

    def _manifest_text(self, run: Run) -> str:
        """The manifest's text: ``run.model_dump_json(exclude_defaults=True)`` without the step records, then
        ``steps_by_status``, redacted. The workflow spec, most of the text, is serialised and redacted on its
        own, then put where the whole dump has it: after ``run_id``. Once the run's flow is built the spec no
        longer changes (:meth:`_drive`), so its text is made once per run: dumping and scanning a 100-task
        spec were two milliseconds of each run's end."""
        fixed, spec = self._spec_text
        if fixed is not run.workflow or spec is None:
            spec = run.workflow.model_dump_json(exclude_defaults=True)
            if self._redact:
                spec = self._scanner.redact(spec)
            if fixed is run.workflow:
                self._spec_text = (fixed, spec)
        rest = run.model_dump_json(exclude_defaults=True, exclude={"workflow", "steps"})
        if self._redact:
            rest = self._scanner.redact(rest)
        counts: dict[str, int] = {}
        for step in run.steps.values():
            counts[step.status.value] = counts.get(step.status.value, 0) + 1
        by_status = ",".join(f'"{status}":{count}' for status, count in counts.items())  # the words are ours
        after_run_id = rest.index(",") + 1  # rest is '{"run_id":"run-…","status":…}' (a run id has no comma)
        return f'{rest[:after_run_id]}"workflow":{spec},{rest[after_run_id:-1]},"{MANIFEST_COUNTS}":{{{by_status}}}}}\n'

    def redacted_variables(self) -> dict[str, Any]:
        """The run's variables as executors may see them (secrets redacted), recomputed only when they change."""
        run = self._run
        assert run is not None
        key = (id(run), self.calls.variables_version)
        if self._variables_view[0] != key:
            self._variables_view = (key, self.redact(dict(run.variables)))
        return dict(self._variables_view[1])

    def redact(self, value: Any) -> Any:
        """``value`` with secrets replaced, when the guardrail policy redacts (for prompts, files, snapshots).

        A long text's redaction is kept (the last ``_REDACTED_KEPT``): a prompt made ahead of its step is
        scanned in a quiet moment, and its step's request, which redacts it again, finds it done."""
        if not self._redact:
            return value
        if isinstance(value, str) and len(value) >= _REDACTED_MIN:
            known = self._redacted.get(value)
            if known is None:
                known = self._redacted[value] = self._scanner.redact(value)
                if len(self._redacted) > _REDACTED_KEPT:
                    del self._redacted[next(iter(self._redacted))]
            return known
        return self._scanner.redact_obj(value)

    def journal_sync(self) -> None:
        """Make every journaled record durable (before an effect leaves the process)."""
        if self._manifest_due:
            self._write_first_manifest()
        if self._journal is not None:
            self._journal.sync()

    def _write_first_manifest(self) -> None:
        """Write a new run's first manifest (every step pending, as the spec says). Until it is on disk, no
        journal record is written (a failure leaves it due, and :meth:`_close` drops the unwritten records)."""
        assert self._dir is not None and self._run is not None
        self._snapshot(self._dir, self._run)
        self._manifest_due = False

    def _start_durably(self) -> None:
        """Schedule the new run's first manifest and journal sync for when its first steps are under way
        (each has run until it waits, for its executor, say): they then cost the run no time."""
        if self._manifest_due:
            asyncio.get_running_loop().call_soon(self._sync_soon)

    def _sync_soon(self) -> None:
        with contextlib.suppress(StorageError):  # a full or read-only disk: the next write meets it, and stops
            self.journal_sync()

    def _open(self, run_dir: RunDir, run: Run) -> None:
        self._artifacts = run_dir.audit("artifacts.json")
        self._tool_results = run_dir.audit("tool_results.json")
        run_dir.audit("gates.json")  # checked: the gate book reads it
        gates = GateBook(run_dir, run.workflow.id, self._scanner.redact if self._redact else str)
        self._dir, self._run = run_dir, run
        self._completed_on_disk = False  # set once the run's completion is synced (a snapshot may still fail)
        self._journal = run_dir.open_journal()
        self._gates = gates
        self._random = random.Random(int(hashlib.sha256(run.run_id.encode()).hexdigest()[:8], 16))

    def _close(self, lock: RunLock) -> None:
        for observer in _observers:
            if self._run is not None:
                observer.closed(self._run)
        try:
            if self._manifest_due:  # a run that stopped before its first step waited
                self._write_first_manifest()
        finally:
            try:
                if self._journal is not None:
                    if self._manifest_due:  # not written (a full disk): no record may reach the disk without it
                        self._journal.forget_deferred()
                    journal, self._journal = self._journal, None
                    journal.close()
            finally:
                lock.release()

    async def _drive_and_close(self, lock: RunLock) -> Run:
        run, run_dir = self._run, self._dir
        assert run is not None and run_dir is not None and self._journal is not None
        failure: BaseException | None = None
        try:
            await self._drive(run)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self._deadlines.close()
            try:
                # The journal first: a snapshot never says more than the journal holds on disk (a failed
                # sync, a full disk, raises here and no snapshot is written).
                self.journal_sync()
                self._completed_on_disk = run.status == RunStatus.COMPLETED
                stamp(run, self._events[-1] if self._events else None)
                self._snapshot(run_dir, run)
                from stepline.engine._timeline import write_timeline

                write_timeline(run_dir, self._events)
            except StorageError:
                if not isinstance(failure, StorageError):
                    raise
                # The disk that stopped the run refuses the snapshot too: the user hears of the first file.
            finally:
                try:
                    await close_context(self)  # the run's language servers end with it
                    if self._executor is not None:
                        await self._executor.aclose()
                finally:
                    self._close(lock)
        return run

    # -- the loop -------------------------------------------------------------------------------------------
    async def _drive(self, run: Run) -> None:
        workflow = run.workflow
        flow_factory = _flows.get(workflow.format)
        flow: Flow = flow_factory(workflow, run) if flow_factory else make_schedule(workflow, run)
        self._spec_text = (workflow, None)  # a flow may add steps as it is built (micro-file), never after
        self.flow = flow
        driver = _drivers.get(workflow.format)
        if driver is None:
            raise RunStateError(f"no step driver registered for workflow format {workflow.format!r}",
                                hint="import stepline.families and call register_drivers() before driving runs")
        specs = {spec.id: spec for spec in workflow.steps}
        dag = workflow.meta.get("scheduling") == "dag"  # a DAG skips a failed step's dependents at any limit
        limit = self.concurrency if dag else 1
        ended: set[StepStatus] = set()
        if not dag:
            self._start_durably()  # runs once the first step waits
        while not dag:  # sequential: no tasks to juggle, one step at a time in flow order
            ready = flow.take_ready(1)
            if not ready or StepStatus.FAILED in ended:
                break
            sid = ready[0]
            status = await self._run_step(run, specs.get(sid) or self._dynamic_spec(workflow, sid), driver)
            ended.add(status)
            if status != StepStatus.FAILED:  # later steps of a failed sequence stay pending: resume retries
                self._skip(run, flow, sid, status)
        if dag:
            await self._run_dag(run, flow, specs, driver, limit, ended)
        settle = _settles.get(workflow.format)
        if settle is not None:
            await settle(self, run)
        self._finish(run, blocked=StepStatus.BLOCKED in ended, failed=StepStatus.FAILED in ended)

    async def _run_dag(self, run: Run, flow: Flow, specs: dict[str, StepSpec], driver: StepDriver, limit: int,
                       ended: set[StepStatus]) -> None:
        """Run the flow's steps as they become ready, at most ``limit`` at a time.

        One worker per slot, each taking the next ready step as soon as its own ends: the next step starts
        in the same turn of the loop as the last one ended, ahead of the background work that ending
        queued (a task per step, collected with ``asyncio.wait``, started it several turns later). A worker
        with nothing ready waits for another to end a step; all leave once nothing is ready or running.
        """
        running = 0
        change: asyncio.Future[None] | None = None

        async def worker() -> None:
            nonlocal running, change
            while True:
                ready = flow.take_ready(1)
                if not ready:
                    if running == 0:
                        return
                    if change is None:
                        change = asyncio.get_running_loop().create_future()
                    await asyncio.shield(change)  # another worker ends a step: maybe something is ready
                    continue
                sid = ready[0]
                running += 1
                try:
                    status = await self._run_step(run, specs.get(sid) or self._dynamic_spec(run.workflow, sid),
                                                  driver)
                finally:
                    running -= 1
                ended.add(status)
                self._skip(run, flow, sid, status)
                waiting, change = change, None
                if waiting is not None:
                    waiting.set_result(None)

        workers = [asyncio.ensure_future(worker()) for _ in range(max(1, limit))]
        self._start_durably()  # runs after each worker's first step has run until it waits
        try:
            done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a step's driver raised: that ends the run here, as a crash would
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    def _skip(self, run: Run, flow: Flow, sid: str, status: StepStatus) -> None:
        """Tell the flow how ``sid`` ended and skip the steps that can never run because it failed."""
        for doomed in flow.finished(sid, status):
            if run.step(doomed).status == StepStatus.PENDING:
                self.emit(EventType.STEP_SKIPPED, {"reason": f"dependency {sid} failed"}, step_id=doomed)

    def _dynamic_spec(self, workflow: WorkflowSpec, sid: str) -> StepSpec:
        # Flows that revisit steps (goto loops) name visits "<step>@<n>"; they run the base step's spec.
        base = sid.split("@", 1)[0]
        return workflow.step(base).model_copy(update={"id": sid})

    def _finish(self, run: Run, *, blocked: bool, failed: bool) -> None:
        if failed:
            failures = [s for s in run.steps.values() if s.status == StepStatus.FAILED]
            error = "; ".join(f"{s.step_id}: {s.error}" for s in failures) or "a step failed"
            self.emit(EventType.WORKFLOW_FAILED, {"error": error}, sync=True)
        elif blocked:
            reasons = [f"{s.step_id}: {s.blocked_reason}" for s in run.steps.values()
                       if s.status == StepStatus.BLOCKED]
            self.emit(EventType.WORKFLOW_BLOCKED, {"reason": "; ".join(reasons)}, sync=True)
        else:
            self.emit(EventType.WORKFLOW_COMPLETED, {"steps": len(run.steps)}, sync=True)

    # -- one step -------------------------------------------------------------------------------------------
    async def _run_step(self, run: Run, spec: StepSpec, driver: StepDriver) -> StepStatus:
        step = run.step(spec.id)
        if step.status in (StepStatus.COMPLETED, StepStatus.SKIPPED):
            return step.status
        policy = spec.retries
        max_attempts = 1 + (policy.max if policy is not None else self.config.runtime.max_retries)
        timeout = spec.timeout_seconds or self.config.runtime.step_timeout_seconds
        replays: int | None = None  # the attempt whose journaled calls this one replays (after a lost worker)
        while True:
            if step.status == StepStatus.RUNNING:  # interrupted mid-attempt: continue it, replaying its calls
                attempt = step.attempts
                replays = self._replayed_attempt(spec.id, attempt)
            elif step.status == StepStatus.BLOCKED:
                attempt = step.attempts
                replays = self._replayed_attempt(spec.id, attempt)
                self.emit(EventType.STEP_STARTED, {"attempt": attempt, "name": spec.name, "resumed": True},
                          step_id=spec.id)
            else:
                attempt = step.attempts + 1
                # Deferred: written with the step's next record, or before anything it does outside the process.
                self.emit(EventType.STEP_STARTED, {"attempt": attempt, "name": spec.name,
                                                   "inputs": spec.inputs or None,
                                                   **({"replays": replays} if replays else {})},
                          step_id=spec.id, sync="deferred")
            ctx = StepContext(self, run, spec, step, attempt)
            ctx.calls_attempt = replays or attempt
            try:  # seed 004: the step is running (started_at set) when its human gate is enforced
                if not await self._pass_gate(ctx):  # rejected, and the step says to go on without it
                    self._complete(ctx)
                    return StepStatus.COMPLETED
            except StepBlocked as blocked:
                return self._block(spec, blocked)
            except StepFailed as rejected:
                self.emit(EventType.STEP_FAILED, {"error": rejected.message, "final": True}, step_id=spec.id,
                          sync=True)
                return StepStatus.FAILED
            try:
                with self._deadlines.limit(timeout):  # cancels the step's work when time is up
                    await self._attempt(ctx, driver)
            except StepBlocked as blocked:
                return self._block(spec, blocked)
            except StorageError:
                raise  # a full or read-only disk is not the step's failure: the run stops, resumable
            except (TimeoutError, SteplineError, Exception) as exc:
                if isinstance(exc, JournalError) and not isinstance(exc, NondeterminismError):
                    raise  # a damaged run directory a driver read (exit 6): not the step's failure either
                if isinstance(exc, OSError) and exc.errno in StorageError.REFUSALS:  # a step's file on a full disk
                    raise StorageError.from_os(exc, exc.filename or f"a file of step {spec.id}") from exc
                error, retryable = _describe_failure(exc, timeout)
                final = not retryable or attempt >= max_attempts
                # A lost Ray worker's calls were all performed and journaled here: the next attempt replays them.
                replays = ctx.calls_attempt if getattr(exc, "replays_calls", False) else None
                self.emit(EventType.STEP_FAILED, {"error": error, "attempt": attempt, "final": final},
                          step_id=spec.id, sync=final)
                if final:
                    return StepStatus.FAILED
                delay = retry_delay(policy, attempt, self._random)
                self.emit(EventType.STEP_RETRY, {"attempt": attempt + 1, "delay_seconds": round(delay, 3),
                                                 "error": error}, step_id=spec.id)
                if delay > 0:
                    await self.sleep(delay)
                continue
            self._complete(ctx)
            return StepStatus.COMPLETED

    def _replayed_attempt(self, step_id: str, attempt: int) -> int | None:
        """The attempt whose calls ``attempt`` of ``step_id`` replays, as its first StepStarted record says."""
        for event in reversed(self._events):
            if (event.step_id == step_id and event.type == EventType.STEP_STARTED.value
                    and event.data.get("attempt") == attempt and not event.data.get("resumed")):
                replays = event.data.get("replays")
                return replays if isinstance(replays, int) else None
        return None

    async def _attempt(self, ctx: StepContext, driver: StepDriver) -> None:
        """Seed 004's order: input guardrails, tools, the executor, output guardrails, validation gates."""
        check_step_inputs(ctx)
        await self._run_step_tools(ctx)
        await resolve_step_context(self, ctx)  # TELIS (R-C1): the step's context, before its executor runs
        await driver(ctx)
        check_step_outputs(ctx)
        await run_validation_gates(ctx)

    async def _run_step_tools(self, ctx: StepContext) -> None:
        """Run the tool calls the StepSpec declares, through the pipeline, before the executor. A required tool
        that fails fails the step; so does the failure of every tool the step declares (none of the work it
        declared was done)."""
        results: list[dict[str, Any]] = []
        for index, call in enumerate(ctx.spec.tools):
            key = f"{ctx.spec.id}/{ctx.calls_attempt}/tools/{index}"
            if key in self.calls.recorded:
                results.append(self.calls.recorded[key]["result"])
                continue
            args = {k: ctx.render(v) if isinstance(v, str) else v for k, v in call.args.items()}
            result = await run_tool_once(ctx, key, "step_tool", call.name, args, lambda: self.run_tool(
                ctx, call.name, args, required=call.required, risk=call.risk))  # noqa: B023  # awaited at once
            ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": "step_tool", "args": {"name": call.name},
                                               "result": result})
            results.append(result)
        if results and all(result.get("status") != "ok" for result in results):
            failures = "; ".join(f"{r.get('name')} {r.get('status')}: {str(r.get('error') or '')[:200]}"
                                 for r in results)
            raise ToolError(f"every tool step {ctx.spec.id!r} declares failed ({failures})",
                            hint="fix the tools' calls; a step none of whose tools worked did none of its work",
                            retryable=any(r.get("status") in ("error", "timeout") for r in results))

    def _block(self, spec: StepSpec, blocked: StepBlocked) -> StepStatus:
        self.emit(EventType.STEP_BLOCKED, {"reason": blocked.reason, "gate_id": blocked.gate_id},
                  step_id=spec.id, sync=True)
        return StepStatus.BLOCKED

    async def _pass_gate(self, ctx: StepContext) -> bool:
        """Block before a step does any work when its human gate and the HITL policy say so (R-G1).

        Returns whether the step does its work: False when its gate was rejected and ``on_reject: skip``.
        """
        spec = ctx.spec
        reason = gate_reason(spec, ctx.run.workflow.id, self.config.hitl.policy)
        if reason is None:
            return True
        gate_id = f"step:{spec.id}"
        decision = self.calls.decisions.get(gate_id)
        if decision is None:
            answer = await self.human.confirm(ctx, gate_id, reason)
            if answer is None:
                if self.gates.get(gate_id) is None or self.gates.get(gate_id).status != "pending":  # type: ignore[union-attr]
                    self.gates.open(gate_id, kind="human", step_id=spec.id, reason=reason, phase=spec.phase)
                    self.emit(EventType.HUMAN_GATE_REQUIRED, {"gate_id": gate_id, "reason": reason,
                                                              "phase": spec.phase}, step_id=spec.id)
                raise StepBlocked(f"waiting for approval of gate {gate_id} ({reason})", gate_id)
            self.gates.open(gate_id, kind="human", step_id=spec.id, reason=reason, phase=spec.phase)
            self.record_decision(gate_id, approved=answer, by="terminal", notes=None)
            decision = self.calls.decisions[gate_id]
        if decision["decision"] == "rejected":
            if spec.on_reject == "skip":
                ctx.step.summary = f"not done: gate {gate_id} was rejected by {decision.get('by')} (on_reject: skip)"
                return False
            raise StepFailed(f"gate {gate_id} was rejected by {decision.get('by')}", retryable=False)
        return True

    def record_decision(self, gate_id: str, *, approved: bool, by: str, notes: str | None,
                        answer: str | None = None) -> None:
        """Record a person's decision on a gate of the run being driven (books and journal)."""
        gate = self.gates.choose(gate_id)
        if answer is not None:
            answer = self.gates.answer_taken(gate, answer)
        gate, _, drr = self.gates.decide(gate, approved=approved, by=by, notes=notes, answer=answer)
        record_gate_event(self.emit, gate_id, approved=approved, by=by, notes=notes, drr_id=drr.id,
                          step_id=gate.step_id, answer=answer, kind=gate.kind)

    def _complete(self, ctx: StepContext) -> None:
        outputs = list(ctx.written)
        for rel, target in ctx.written.items():
            if target.exists():
                artifact = Artifact(path=rel, sha256=sha256_file(target), step_id=ctx.spec.id,
                                    recorded_at=time.now_iso(), size=target.stat().st_size)
                self._artifacts.append(artifact.model_dump())
                ctx.emit(EventType.ARTIFACT_READY, {"path": rel, "sha256": artifact.sha256})
        if ctx.written:
            assert self._dir is not None
            self._dir.write("artifacts.json", self._artifacts)
        ctx.emit(EventType.STEP_COMPLETED, {"outputs": outputs, "summary": ctx.step.summary,
                                            "choice": ctx.step.choice, "guardrails": ctx.guardrails},
                 sync=ctx.run.workflow.format not in _self_durable)

    # -- executor and tools ---------------------------------------------------------------------------------
    @staticmethod
    def outcome_key(ctx: StepContext, invocation: int) -> str:
        """The journal key of the outcome of a step's ``invocation``-th executor call."""
        return f"{ctx.spec.id}/{ctx.calls_attempt}/{invocation}/outcome"

    async def invoke(self, ctx: StepContext, request: StepRequest, invocation: int) -> Outcome:
        """Call the executor for ``request`` exactly once across crashes: a journaled outcome is replayed."""
        key = self.outcome_key(ctx, invocation)
        recorded = self.calls.recorded.get(key)
        if recorded is not None:
            return Outcome.from_dict(recorded["result"])
        session = JournaledSession(ctx, request, invocation)
        executor = self.executor
        if not executor.pure:
            self.journal_sync()
        await executor.perform(request, session)
        if not session.outcome.finished:
            raise ExecutorError(f"executor {executor.name!r} returned from step {ctx.spec.id!r} without finish",
                                retryable=True)
        if not executor.pure:
            # A pure executor gives the same outcome again for free (its effects are journaled call by call);
            # any other is asked once: its outcome is recorded so a resumed step does not ask again.
            ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": "outcome", "args": {"kind": request.kind},
                                               "result": session.outcome.to_dict()})
        return session.outcome

    def record_tool_result(self, record: dict[str, Any]) -> None:
        """Append a ToolResult to ``tool_results.json``."""
        assert self._dir is not None
        self._tool_results.append(self.redact(record))
        self._dir.write("tool_results.json", self._tool_results)

    def record_evidence(self, ctx: StepContext, raw: dict[str, Any]) -> dict[str, Any]:
        """Validate an evidence record, compute its WLNK, cross-link the step's artifacts, keep it (R-Q1)."""
        from stepline.evidence import score, validate_evidence

        assert self._dir is not None
        record = validate_evidence({**raw, "step_id": ctx.spec.id})
        links = sorted({*record.artifacts, *ctx.written, *ctx.step.outputs})
        record = record.model_copy(update={"wlnk": score(record), "artifacts": links})
        evidence = [e for e in self._dir.read("evidence.json", []) or [] if e.get("id") != record.id]
        evidence.append(record.model_dump(mode="json"))
        self._dir.write("evidence.json", evidence)
        ctx.emit(EventType.EVIDENCE_RECORDED, {"id": record.id, "level": record.level, "wlnk": record.wlnk,
                                               "artifacts": links})
        return record.model_dump(mode="json")

    def evidence_of(self, step_id: str) -> list[dict[str, Any]]:
        """The evidence records a step has recorded in this run."""
        assert self._dir is not None
        return [e for e in self._dir.read("evidence.json", []) or [] if e.get("step_id") == step_id]

    def tool_is_idempotent(self, name: str) -> bool:
        """Whether re-running tool ``name`` after an interruption is safe."""
        from stepline.engine._tools import tool_is_idempotent

        return tool_is_idempotent(name)

    async def run_tool(self, ctx: StepContext, name: str, args: dict[str, Any], *, required: bool = True,
                       risk: Risk | None = None, allowed_by: str | None = None) -> dict[str, Any]:
        """Run a tool through the pipeline for ``ctx``'s step; a required tool that fails fails the step.

        ``allowed_by``: why a call whose risk needs approval may run without a person (an unattended run of
        commands a plan declared, say); the allowance is journaled. Without it such a call blocks on its gate.
        """
        from stepline.engine._tools import run_tool_for_step

        return await run_tool_for_step(self, ctx, name, args, required=required, risk=risk, allowed_by=allowed_by)


def record_gate_event(emit: Callable[..., Event], gate_id: str, *, approved: bool, by: str, notes: str | None,
                      drr_id: str, step_id: str | None, answer: str | None, kind: str) -> None:
    """Journal a gate decision (the form a resumed run reads)."""
    if kind == "question":
        emit(EventType.ANSWER_GIVEN, {"gate_id": gate_id, "answer": answer or "", "by": by}, step_id=step_id,
             sync=True)
        return
    emit(EventType.HUMAN_GATE_APPROVED if approved else EventType.HUMAN_GATE_REJECTED,
         {"gate_id": gate_id, "decision": "approved" if approved else "rejected", "by": by, "notes": notes,
          "drr": drr_id}, step_id=step_id, sync=True)


def _check_fold(run: Run, events: list[Event]) -> None:
    """The fold check :func:`stepline.store.diagnose` runs: :meth:`Engine.load`'s."""
    fold(run, events, CallLog(), path="journal.jsonl")


def _remove_unstarted(run_dir: RunDir) -> None:
    """Remove the folder of a run that recorded nothing (its first manifest, and so any record, never reached
    the disk); left as it is when it cannot be removed (a read-only disk: ``stepline list`` says so)."""
    import shutil

    try:
        if run_dir.journal_path.read_bytes().strip(b"\0"):
            return  # never: the journal gets no byte before the manifest (kept, should it happen)
    except FileNotFoundError:
        pass
    except OSError:
        return
    shutil.rmtree(run_dir.path, ignore_errors=True)


def _describe_failure(exc: BaseException, timeout: float) -> tuple[str, bool]:
    """The error text for RunStep.error and whether another attempt may help."""
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout:g}s (the step was cancelled)", True
    if isinstance(exc, NondeterminismError):
        return exc.format_message(), False
    if isinstance(exc, StepFailed | ExecutorError | ToolError):
        return exc.format_message(), exc.retryable
    if isinstance(exc, SteplineError):
        return exc.format_message(), False
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}", True


def _on_ray(executor: Executor, config: RuntimeConfig, recipe: tuple[str, dict[str, Any]] | None,
           record: Any) -> Executor:
    """``executor`` wrapped to run on Ray (``runtime.backend: ray``); workers build it from ``recipe``."""
    from stepline.distributed import ray_executor
    from stepline.errors import UsageError

    if record:
        raise UsageError("--record writes its cassette in the executor's process, a Ray worker",
                         hint="record with --backend local, then replay on any backend")
    return ray_executor(executor, recipe=recipe, address=config.runtime.ray_address)


def _public_options(options: dict[str, Any]) -> dict[str, Any]:
    """Executor options as the manifest keeps them: secret-named values (api_key, token, …) masked."""
    from stepline.guardrails import redact_obj

    return {k: ("***" if v != redacted else v) for (k, v), redacted in
            zip(options.items(), redact_obj(options).values(), strict=True)}
