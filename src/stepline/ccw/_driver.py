"""Running CCW sessions: the task flow, the task driver, and starting, resuming and completing a session.

* :class:`CcwFlow` releases tasks incrementally with the semantics of :func:`stepline.ccw._waves.plan_waves`:
  a task starts once its ``depends_on`` are done; a container's subtasks start once the container's own
  dependencies are, and the container completes (its step runs, without an agent) once all its subtasks
  have; ``sequential``/``tdd`` run one task at a time in document order; ``phased`` puts a barrier after
  each ``Phase N``; a serialization requirement lets one of its tasks run at a time. Ready tasks start
  critical path first, then by execution group, then in document order; in a resumed run, the tasks a
  crash interrupted start before all others. A failure returns the tasks that really depend on the failed
  one (``depends_on`` and containment, never phases or serialization), which the engine journals as
  skipped. Cost is O(1) per release, so a 10,000-task session schedules in linear time.
* :func:`run_ccw_task` runs one task: its ``pre_analysis`` steps (``bash(...)``, plain commands, ``Read``,
  ``Glob``, ``Grep``/``Search``, with ``[var]`` substitution and ``on_error``), then one ``work`` request to
  the executor with the prompt built from the task JSON (read now, or just before while the tasks ahead of
  it ran, if the file is unchanged since: :meth:`_Committer.task`), then the completion as one
  journaled change (:mod:`stepline.ccw._state`). Completions that become ready together share one
  journal fsync; the task's slot is free once that intent is durable, and its files are written, flushed
  and journaled done by a background writer, in batches (see :class:`_Committer`).
* ``pre_analysis`` commands come from the plan, not from the agent, so they run through the tool pipeline
  with the configured allow/blocklist and timeout but without the risk gate (a ``bash(...)`` step would
  otherwise stop every task for approval). Their results are journaled; a resumed task replays them. A
  command interrupted by a crash is run again: they gather context, they do not change the project.
* :func:`execute_session` checks a session, resumes its interrupted or blocked run (the journal replays
  every call), or marks the session started and starts a new run; :func:`complete_session` archives it.
"""

from __future__ import annotations

import asyncio
import fnmatch
import heapq
import os
import re
import shlex
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from stepline import time
from stepline.ccw._prompt import TaskView, build_task_prompt, render_container_summary, render_summary
from stepline.ccw._session import CcwSession, read_ccw_session
from stepline.ccw._state import (
    Completion,
    SessionWriter,
    SpareFiles,
    archive_session,
    flush_files,
    mark_session_started,
    remove_stale_temp_files,
)
from stepline.ccw._task import CcwTask, read_task_file
from stepline.ccw._waves import plan_workflow_waves
from stepline.engine._runner import register_driver
from stepline.engine._signals import StepBlocked
from stepline.errors import ReaderError, RunLockedError, RunStateError, StepFailed, SteplineError
from stepline.formats._files import file_version
from stepline.model import EventType, Run, RunStatus, StepSpec, StepStatus, ToolCall, WorkflowSpec
from stepline.store import datasync

if TYPE_CHECKING:
    from stepline.engine._context import StepContext
    from stepline.engine._runner import Engine
    from stepline.tools import ToolPipeline

__all__ = ["CcwFlow", "complete_session", "execute_session", "prepare_session", "run_ccw_task", "session_run"]

_SEQUENTIAL = frozenset({"sequential", "tdd"})
_T = TypeVar("_T")
#: Written completions are flushed (made durable, then journaled done) when this many wait, after this long,
#: once a burst of them is written (see _Committer._until_flush), or when the run settles.
_FLUSH_COUNT, _FLUSH_SECONDS = 2000, 0.2
#: A flush after a burst needs one completion to flush per this many lines of TODO_LIST.md: rewriting the file
#: is O(tasks), and a burst too small for a large session waits for the flush by time or count.
_FLUSH_LINES_PER_COMPLETION = 10
#: Journaled intents are made durable together once none has come for this long (at most _INTENT_MAX after the
#: first), or at once when a task waits for a dependency's files, a slot has no task to start, or the run
#: settles. Completions come in bursts (the agents of a wave end together); the pipeline's work then runs in
#: the quiet after the burst, not in the middle of the next one, where it would delay the tasks starting.
_INTENT_QUIET, _INTENT_MAX = 0.005, 0.05
#: A batch's task JSONs and summaries are written in pieces of about this many bytes.
_CHUNK_BYTES = 1 << 20
_LEAF, _START, _END, _BARRIER = 0, 1, 2, 3


class CcwFlow:
    """Which CCW tasks may start now (see the module docstring for the rules)."""

    def __init__(self, workflow: WorkflowSpec, run: Run) -> None:
        steps = workflow.steps
        meta = workflow.meta
        model = meta.get("execution_model")
        self.sequential = model in _SEQUENTIAL
        self.ids = [step.id for step in steps]
        self.index = index = {sid: position for position, sid in enumerate(self.ids)}
        count = len(steps)
        self.kind = [_LEAF] * count
        self.owner = list(range(count))
        exit_node = list(range(count))
        for position, step in enumerate(steps):
            if step.meta.get("container"):
                self.kind[position] = _START
                exit_node[position] = self._node(_END, position)
        self.succ: list[list[int]] = [[] for _ in self.kind]
        for position, step in enumerate(steps):
            for dep in dict.fromkeys(step.depends_on):
                self.succ[exit_node[index[dep]]].append(position)
            parent = step.meta.get("parent")
            if parent in index and self.kind[index[parent]] == _START:
                self.succ[parent_entry := index[parent]].append(position)
                self.succ[exit_node[position]].append(exit_node[parent_entry])
            if self.kind[position] == _START:
                self.succ[position].append(exit_node[position])
        phases: Mapping[str, int] = meta.get("phases") or {}
        if model == "phased" and phases:
            numbers = sorted({number for sid, number in phases.items() if sid in index})
            barrier = {number: self._node(_BARRIER, -1) for number in numbers}
            self.succ += [[] for _ in numbers]
            for sid, number in phases.items():
                if sid in index:
                    self.succ[exit_node[index[sid]]].append(barrier[number])
                    earlier = [n for n in numbers if n < number]
                    if earlier:
                        self.succ[barrier[earlier[-1]]].append(index[sid])
        self.exit_node = exit_node
        self.indegree = [0] * len(self.kind)
        for successors in self.succ:
            for nxt in successors:
                self.indegree[nxt] += 1
        rank = {sid: place for place, sid in enumerate(meta.get("critical_path") or ())}
        group_first: dict[str, int] = {}
        for position, step in enumerate(steps):
            if step.execution_group is not None:
                group_first.setdefault(step.execution_group, position)
        status = {sid: (run.steps[sid].status if sid in run.steps else StepStatus.PENDING) for sid in self.ids}
        # Tasks a crash interrupted go first: each finishes (replaying its journal) before a new one starts, so
        # no new task's effect lands between an interrupted effect and its redo.
        self.key = [(0 if status[sid] == StepStatus.RUNNING else 1,
                     rank.get(sid, len(rank)) if not self.sequential else 0,
                     group_first.get(steps[p].execution_group or "", p) if not self.sequential else p, p)
                    for p, sid in enumerate(self.ids)]
        self.exclusive: dict[int, int] = {}
        if not self.sequential:
            for number, names in enumerate(meta.get("serialization") or ()):
                for name in names:
                    if name in index:
                        for leaf in self._leaves(index[name]):
                            self.exclusive.setdefault(leaf, number)
        self.busy: set[int] = set()
        self.running = 0
        self.ready: list[tuple[tuple[int, int, int, int], int]] = []
        self.dead: set[int] = set()
        self.done_before = {p for p, step in enumerate(steps) if step.meta.get("status") == "completed"}
        self.finished_in_run = {p for p, sid in enumerate(self.ids)
                                if status[sid] in (StepStatus.COMPLETED, StepStatus.SKIPPED)}
        self._resolve([node for node in range(len(self.kind)) if self.indegree[node] == 0])

    def _node(self, kind: int, position: int) -> int:
        self.kind.append(kind)
        self.owner.append(position)
        return len(self.kind) - 1

    def _leaves(self, position: int) -> list[int]:
        if self.kind[position] == _LEAF:
            return [position]
        children = [nxt for nxt in self.succ[position] if nxt < len(self.ids)]
        return [leaf for child in children for leaf in self._leaves(child)]

    def _runnable(self, node: int) -> int | None:
        """The task position whose step runs when ``node`` is reached (None for starts and barriers)."""
        kind = self.kind[node]
        return self.owner[node] if kind in (_LEAF, _END) else None

    def _resolve(self, nodes: list[int]) -> None:
        """Pass every node in ``nodes`` (whose indegree is 0): release, or resolve what needs no run."""
        stack = list(nodes)
        while stack:
            node = stack.pop()
            task = self._runnable(node)
            if task is not None:
                if task in self.dead:
                    continue
                if task not in self.finished_in_run:
                    heapq.heappush(self.ready, (self.key[task], node))
                    if task not in self.done_before:
                        continue  # done when the engine says so; completed-before tasks pass right away
            for nxt in self.succ[node]:
                self.indegree[nxt] -= 1
                if self.indegree[nxt] == 0:
                    stack.append(nxt)

    def take_ready(self, limit: int) -> list[str]:
        """Up to ``limit`` task ids that may start now."""
        taken: list[str] = []
        held: list[tuple[tuple[int, int, int, int], int]] = []
        while self.ready and len(taken) < limit:
            if self.sequential and self.running:
                break
            item = heapq.heappop(self.ready)
            task = self.owner[item[1]]
            if task in self.dead:
                continue
            group = self.exclusive.get(task)
            if group is not None and group in self.busy:
                held.append(item)
                continue
            if group is not None:
                self.busy.add(group)
            self.running += 1
            taken.append(self.ids[task])
        for item in held:
            heapq.heappush(self.ready, item)
        return taken

    def upcoming(self, limit: int) -> list[str]:
        """The next ``limit`` ready task ids in the order they would start (no state changes; for reading
        ahead, which asks in a quiet moment: O(ready))."""
        return [self.ids[self.owner[node]] for _, node in heapq.nsmallest(limit, self.ready)
                if self.owner[node] not in self.dead]

    def finished(self, step_id: str, status: StepStatus) -> list[str]:
        """Record how a task ended; a failed task's dependents are returned (to be skipped)."""
        position = self.index[step_id]
        self.running -= 1
        self.busy.discard(self.exclusive.get(position, -1))
        if status in (StepStatus.COMPLETED, StepStatus.SKIPPED):
            self.finished_in_run.add(position)
            if position not in self.done_before:
                self._resolve_after(self.exit_node[position])
            return []
        if status != StepStatus.FAILED:
            return []
        doomed: list[str] = []
        stack = [self.exit_node[position]]
        seen = set(stack)
        while stack:
            for nxt in self.succ[stack.pop()]:
                if self.kind[nxt] == _BARRIER or nxt in seen:
                    continue
                seen.add(nxt)
                stack.append(nxt)
                task = self._runnable(nxt)
                if task is not None and task != position and task not in self.dead:
                    self.dead.add(task)
                    doomed.append(self.ids[task])
        return doomed

    def _resolve_after(self, node: int) -> None:
        for nxt in self.succ[node]:
            self.indegree[nxt] -= 1
            if self.indegree[nxt] == 0:
                self._resolve([nxt])


# --- one task ------------------------------------------------------------------------------------------


class _Committer:
    """The run's completion pipeline, one per run (kept on the engine like its tool pipeline).

    1. **Intent** (group commit): :meth:`commit` journals the task's ``CallStarted`` with the whole
       :class:`Completion` and returns, so the task's step completes (journaled behind its intent) and its
       concurrency slot is free at once. The intents that arrive in the same loop turn, or while the previous
       batch's fsync runs, are made durable with one fsync of the journal (in a worker thread). From then on
       the completion is guaranteed, because a run redoes every intent that has no *done* record:
       :meth:`_seed` reads them from the journal when the run's committer is made and writes them before any
       task of the new process goes on, whether or not their steps were journaled as completed
       (:func:`settle` makes the committer even when no task is left to run).
    2. **Files**, in the background: the task JSONs and summaries of the intents made durable since the last
       batch, each replaced atomically (temp file + rename), not yet fsynced. The temp files are made ahead
       (:class:`SpareFiles`, in a worker thread while the agents run): creating a file is the costly part.
       Completions that arrive while a batch is written form the next one. A task that needs a dependency's
       files that no batch has taken yet writes them itself, at once (:meth:`visible`). Once a slot finds
       no task to start (:func:`slot_idle`), nothing is starting that the pipeline could delay: intents are
       then made durable at once instead of after the quiet, so the run's last completions are written as
       they come rather than all after its last agent.
    3. **Flush**, every ``_FLUSH_SECONDS`` or ``_FLUSH_COUNT`` completions, in the quiet after a burst of them
       (:meth:`_until_flush`: then the run's end is left only its last burst) and when the run settles:
       TODO_LIST.md is rewritten once for all the completions written since the last flush (it is O(tasks)
       to rewrite: never per task, and after a burst only for one completion per ten lines at least),
       everything is made durable with one :func:`flush_files`
       (``syncfs``), and only then are the *done* records (``CallRecorded``) journaled. A *done* record
       therefore never names a file change that could still be lost.

    Crash argument: nothing is written to the session before its intent is durable, so a crash before that
    leaves the session's files as they were, and the journal either without the intent (and then without
    the step's completion, which comes after it: the task runs again, its agent call replayed from the
    journal) or with it (redone); a crash after it leaves each of the three files old or new (never torn),
    and the next run rewrites all three (idempotently) before any task of it goes on. The run's last record
    (completed, failed, blocked) is journaled only once the pipeline is idle (:func:`settle`), so a finished
    run has no completion left to redo. If the pipeline fails (a file or the journal cannot be written), the run stops
    as a crash would (:class:`_Stopped`), rather than failing tasks, and resumes the same way.

    A task waits until the task JSONs and summaries of its dependencies (in sequential and phased sessions:
    of every earlier completion) are on disk before its pre_analysis and its agent run, so they find them
    there as before; TODO_LIST.md follows within a flush interval.
    """

    def __init__(self, engine: Engine, run: Run) -> None:
        from stepline.store import RunDir

        self.engine = engine
        self.run = run
        paths = run.workflow.meta["paths"]
        self.writer = SessionWriter(Path(paths["session_dir"]))
        # Enough for the completions of every slot at once, and for TODO_LIST.md.
        self.spares = self.writer.spares = SpareFiles({Path(paths["task_dir"]): engine.concurrency,
                                                       Path(paths["summaries_dir"]): engine.concurrency,
                                                       Path(paths["session_dir"]): 1})
        self.spare_task: asyncio.Future[None] | None = None
        # The pipeline's system calls run in a pool of its own, let go when the run settles: the loop's
        # default pool would grow to six threads, and closing the loop joins them one by one (about 1 ms).
        self.pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="stepline-ccw")
        self.journal_path = RunDir(engine.store.root / run.run_id).journal_path
        self.sequential = run.workflow.meta.get("execution_model") in (*_SEQUENTIAL, "phased")
        self.intents: list[_Pending] = []  # journaled, for the next fsync
        self.committing: dict[str, _Pending] = {}  # by task id: intent journaled, not yet durable
        self.pending: dict[str, _Pending] = {}  # by task id: intent durable, done not yet journaled
        self.unwritten: dict[str, _Pending] = {}  # by task id: for the writer's next batch
        self.writing: set[str] = set()  # task ids of the batch the writer is writing
        self.unflushed: list[tuple[list[_Pending], list[Path]]] = []
        self.tick: asyncio.Future[None] | None = None  # resolved after each written batch
        self.error: BaseException | None = None
        self.intent_task: asyncio.Task[None] | None = None
        self.intent_kick: asyncio.Future[None] | None = None  # resolved to sync the intents now
        self.intent_last = 0.0  # loop time of the latest intent
        self.writer_task: asyncio.Task[None] | None = None
        self.flush_task: asyncio.Task[None] | None = None
        self.unflushed_count = 0
        self.flush_kick: asyncio.Future[None] | None = None  # resolved to flush now (settling, or many waiting)
        self.flush_due = False  # flush without waiting (many waiting, or a burst written)
        self.settling = False
        #: Completions this run may still commit: the tasks not done yet (an upper bound; spares beyond what
        #: is left to write are not made).
        self.remaining = sum(step.status not in (StepStatus.COMPLETED, StepStatus.SKIPPED)
                             for step in run.steps.values())
        self.wanted = 0  # tasks waiting for the intents of their dependencies to be durable
        self.hurried = False  # a slot had no task to start: the next intents are made durable at once
        # Task JSONs read in the quiet ahead of their tasks, by path (see read_ahead_later).
        self.specs = {step.id: step for step in run.workflow.steps}
        self.ahead: dict[str, _Ahead] = {}
        self.ahead_timer: asyncio.TimerHandle | None = None
        self.session_marked = False
        self._seed()
        self._refill()
        asyncio.get_running_loop().call_soon(self.mark_session)  # once the first tasks wait for their agents

    # -- the pipeline ------------------------------------------------------------------------------------
    def _seed(self) -> None:
        """Queue every intent of this run without a done record (a crash came between the two)."""
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return
        if b'"ccw_complete"' not in data:
            return
        intents: dict[str, _Pending] = {}
        for line in data.splitlines():
            if b'"ccw_complete"' not in line:
                continue
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:  # a torn last line
                continue
            record = event.get("data") or {}
            if record.get("op") != "ccw_complete":
                continue
            if event.get("type") == EventType.CALL_STARTED.value:
                completion = Completion.from_json(record["args"]["completion"])
                intents[record["key"]] = _Pending(str(event.get("step_id")), record["key"], completion, redo=True)
            else:
                intents.pop(record["key"], None)
        if not intents:
            return
        # Redone at once, before any task of this process runs: a crash leaves few of them, and no task then
        # waits for a file of the previous process (so an interrupted task goes on as it did before it).
        _sync_file(self.journal_path)  # read back maybe from the page cache of a killed process: durable first
        batch = list(intents.values())
        flush_files(self.writer.put(self.writer.prepare([item.completion for item in batch])))
        self._done(batch)

    def commit(self, step_id: str, key: str, completion: Completion, *, journaled: bool = False) -> None:
        """Journal ``completion``'s intent (``journaled``: it is in the journal already) and return; the intent
        is made durable, its files written and its done record journaled in the background.

        The task's step is journaled completed after this, so behind its intent: no crash keeps the step's
        completion and loses the intent. The task's slot is free at once; a task that needs this one's files
        waits for them (:meth:`visible`).
        """
        if self.error is not None:
            raise _Stopped(self.error)
        if journaled and completion.task_id in self.pending:  # seeded from the journal: durable, queued
            return
        item = _Pending(step_id, key, completion, redo=journaled)
        self.remaining -= 1
        if not journaled:
            self.engine.emit(EventType.CALL_STARTED, {"key": key, "op": "ccw_complete",
                                                      "args": {"completion": completion.to_json()}}, step_id=step_id)
        self.intents.append(item)
        self.intent_last = asyncio.get_running_loop().time()
        self.committing[completion.task_id] = item
        if self.intent_task is None:
            self.intent_task = asyncio.ensure_future(self._journal_intents())

    async def _journal_intents(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.intents and self.error is None:
                await asyncio.sleep(0)  # at least the completions of this loop turn share the fsync
                deadline = loop.time() + _INTENT_MAX
                while not (self.settling or self.wanted or self.hurried) and self.error is None:
                    quiet = self.intent_last + _INTENT_QUIET
                    if quiet >= deadline or loop.time() >= quiet:
                        break
                    self.intent_kick = loop.create_future()
                    await asyncio.wait([self.intent_kick], timeout=quiet - loop.time())
                    self.intent_kick = None
                batch, self.intents = self.intents, []
                self.hurried = False
                try:
                    # One fsync for the batch (and for a redo read back), in a worker thread so the loop goes
                    # on. It syncs the journal file through a descriptor of its own: that makes every record
                    # appended before it durable, whatever the journal's own bookkeeping says.
                    await self._off_loop(_sync_file, self.journal_path)
                except Exception as exc:
                    self._fail(exc)  # the journal is in doubt: stop, as a crash would
                    return
                for item in batch:
                    task_id = item.completion.task_id
                    if self.committing.get(task_id) is item:
                        del self.committing[task_id]
                    if task_id not in self.pending:
                        self._enqueue(item)
                self._wake()
        finally:
            self.intent_task = None

    def _enqueue(self, item: _Pending) -> None:
        task_id = item.completion.task_id
        self.pending[task_id] = item
        self.unwritten[task_id] = item
        if self.writer_task is None and self.error is None:
            self.writer_task = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        """Write the task JSONs and summaries of the intents made durable so far, batch after batch."""
        try:
            while self.unwritten and self.error is None:
                batch = list(self.unwritten.values())
                self.unwritten = {}
                self.writing = set(item.completion.task_id for item in batch)
                try:
                    # The bytes are computed here: Python work holds the GIL wherever it runs, and in a thread
                    # it would stall the loop for a switch interval at each of its system calls. The thread
                    # only makes the system calls (open, write, rename), which release the GIL. A batch is
                    # written in pieces of at most _CHUNK_BYTES, so memory does not grow with task JSON size.
                    paths: list[Path] = []
                    files: list[tuple[Path, bytes]] = []
                    size = 0
                    for number, item in enumerate(batch, start=1):
                        more = self.writer.prepare([item.completion], todo=False)
                        files += more
                        size += sum(len(data) for _, data in more)
                        if size >= _CHUNK_BYTES or number == len(batch):
                            paths += await self._off_loop(self.writer.put, files)
                            files, size = [], 0
                except Exception as exc:
                    self._fail(exc)
                    return
                finally:
                    self.writing = set()
                self._wake()
                self._written(batch, paths)
                self._refill()
        finally:
            self.writer_task = None

    def _write_now(self, batch: list[_Pending]) -> None:
        """Write a few completions' task JSONs and summaries here and now (a task needs them on disk)."""
        try:
            paths = self.writer.put(self.writer.prepare([item.completion for item in batch], todo=False))
        except Exception as exc:
            self._fail(exc)
            raise _Stopped(exc) from exc
        self._written(batch, paths)

    def _written(self, batch: list[_Pending], paths: list[Path]) -> None:
        self.unflushed.append((batch, paths))
        self.unflushed_count += len(batch)
        if self.unflushed_count >= _FLUSH_COUNT:
            self.flush_due = True
        self._kick_flush()  # the flusher looks again: due, or a burst all written
        if self.flush_task is None and self.error is None:
            self.flush_task = asyncio.ensure_future(self._flush())

    async def _until_flush(self) -> None:
        """Wait until the written completions are to be flushed: ``_FLUSH_SECONDS`` after the first, when
        ``_FLUSH_COUNT`` wait, when the run settles, or once a burst of them is all written (none is on its
        way to the writer) and no intent has come for ``_INTENT_QUIET``. Flushed then, in the quiet before the
        next burst, they are not left for the run's end to make durable and journal done. A burst flushes
        only with one completion per ``_FLUSH_LINES_PER_COMPLETION`` lines of TODO_LIST.md, which is
        rewritten whole; completions that keep coming are flushed by time or count."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _FLUSH_SECONDS
        while not (self.settling or self.flush_due) and self.error is None:
            now = loop.time()
            wake = deadline
            if not (self.unwritten or self.committing) and \
                    self.unflushed_count * _FLUSH_LINES_PER_COMPLETION >= self.writer.todo_lines:
                wake = min(wake, self.intent_last + _INTENT_QUIET)
            if now >= wake:
                return
            self.flush_kick = loop.create_future()
            await asyncio.wait([self.flush_kick], timeout=wake - now)
            self.flush_kick = None

    async def _flush(self) -> None:
        """Tick the written completions in TODO_LIST.md, make everything durable, journal the done records."""
        try:
            while self.unflushed and self.error is None:
                # Task JSONs and summaries are on disk already; TODO_LIST.md and the done records wait, so that
                # one rewrite of TODO_LIST.md (O(tasks)) and one flush cover many batches, and flushes do not
                # keep holding up the intents' journal fsyncs.
                await self._until_flush()
                while self.settling and (upstream := [task for task in (self.intent_task, self.writer_task)
                                                      if task is not None]):
                    await asyncio.wait(upstream)  # the run's last completions: all in one flush
                written, self.unflushed = self.unflushed, []
                self.unflushed_count = 0
                self.flush_due = False
                try:
                    batches = [batch for batch, _ in written]
                    todo = self.writer.prepare([item.completion for batch in batches for item in batch], files=False)
                    paths = [path for _, paths in written for path in paths]
                    paths += await self._off_loop(self.writer.put, todo)
                    await self._off_loop(flush_files, paths)
                    for batch in batches:
                        self._done(batch)
                except Exception as exc:
                    self._fail(exc)
                    return
        finally:
            self.flush_task = None

    def _done(self, batch: list[_Pending]) -> None:
        """Journal the done records of a batch whose files are durable."""
        steps = self.run.steps
        for item in batch:
            self.engine.emit(EventType.CALL_RECORDED, {"key": item.key, "op": "ccw_complete",
                                                       "args": {"task_id": item.completion.task_id, "redo": item.redo},
                                                       "result": item.completion.summary_path}, step_id=item.step_id)
            self.pending.pop(item.completion.task_id, None)
            step = steps.get(item.step_id)
            if step is not None and step.status == StepStatus.COMPLETED:
                self.engine.calls.recorded.pop(item.key, None)  # finished: never replayed, no need to keep it

    async def _off_loop(self, call: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking call (fsync, file writes) in a worker thread, so the tasks' loop goes on; once the
        run settles no task is left to go on, and the call runs here, without two thread hand-offs (each a
        wake-up that costs a few hundred µs on a VM)."""
        if self.settling:
            return call(*args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, call, *args)

    def _refill(self) -> None:
        """Make spare temp files for the next completions, in a worker thread (not once the run settles: no
        completion is left to use them)."""
        if self.spare_task is None and not self.settling and self.error is None:
            self.spares.limit = max(self.remaining, 0) + len(self.unwritten) + len(self.committing)
            self.spare_task = asyncio.get_running_loop().run_in_executor(self.pool, self.spares.fill)
            self.spare_task.add_done_callback(self._refilled)

    def _refilled(self, task: asyncio.Future[None]) -> None:
        self.spare_task = None
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._fail(error)

    def close(self) -> None:
        """Delete the spare temp files not used and let the pool's threads go (the run has settled, or
        stopped); its threads end by themselves, nobody waits for them."""
        self.spares.discard()
        self.pool.shutdown(wait=False)
        if self.ahead_timer is not None:
            self.ahead_timer.cancel()

    def hurry(self) -> None:
        """Make the intents journaled so far durable now, not after the quiet: no task is starting to delay
        (a slot found none ready), and the run's last completions then reach the disk as they come rather
        than all at the end."""
        if self.intents:
            self.hurried = True
            self._kick_intents()

    def _kick_intents(self) -> None:
        if self.intent_kick is not None and not self.intent_kick.done():
            self.intent_kick.set_result(None)

    def _kick_flush(self) -> None:
        if self.flush_kick is not None and not self.flush_kick.done():
            self.flush_kick.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        """Stop the pipeline: the intents not done stay in the journal, for the next run to redo."""
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        tick, self.tick = self.tick, None
        if tick is not None and not tick.done():
            tick.set_result(None)

    # -- reading task JSONs ahead -----------------------------------------------------------------------
    def read_ahead_later(self) -> None:
        """Read the task JSONs of the next tasks once no task has started for ``_INTENT_QUIET`` (tasks start
        in bursts, as the agents of a wave end together): in the quiet, where the reading delays nothing, and
        not as each task starts, when it delays every slot's hand-over behind it. A task without
        ``pre_analysis`` gets its prompt made (and scanned for secrets) then too."""
        if self.ahead_timer is not None:
            self.ahead_timer.cancel()
        self.ahead_timer = asyncio.get_running_loop().call_later(_INTENT_QUIET, self._read_ahead)

    def _read_ahead(self) -> None:
        self.ahead_timer = None
        flow = self.engine.flow
        if self.settling or self.error is not None or not isinstance(flow, CcwFlow):
            return
        for task_id in flow.upcoming(self.engine.concurrency):
            spec = self.specs.get(task_id)
            path = spec.meta.get("task_json") if spec is not None else None
            if spec is None or not path or path in self.ahead or spec.meta.get("container"):
                continue
            try:
                task = read_task_file(Path(path))
            except (OSError, SteplineError):
                continue  # the task reads it itself when it starts, and reports what is wrong
            view = TaskView(task.data)
            if view.pre_analysis:  # the prompt holds their outputs: made when the task has run them
                self.ahead[path] = _Ahead(task)
                continue
            prompt, dependencies = _task_prompt(self, spec, view, {})
            self.engine.redact(prompt)  # the engine keeps the redacted text: the task's request finds it
            self.ahead[path] = _Ahead(task, prompt, dependencies)
        while len(self.ahead) > 2 * self.engine.concurrency:  # those whose tasks did not start after all
            self.ahead.pop(next(iter(self.ahead)))

    def task(self, path: str) -> _Ahead:
        """The task JSON at ``path``, read and validated: what was read ahead if the file is still the
        version read (inode, size, mtime), else read now."""
        known = self.ahead.pop(path, None)
        if known is not None:
            try:
                if file_version(os.stat(path)) == known.task.version:
                    return known
            except OSError:
                pass
        return _Ahead(read_task_file(Path(path)))

    # -- for tasks and the engine ------------------------------------------------------------------------
    def mark_session(self) -> None:
        """Mark the session active (``execution_started_at`` the first time) and delete the temp files a
        killed writer left. Run once the first tasks wait for their agents, not before the first starts
        (it was a millisecond of every start), and at the latest when the run settles; failing, it stops the
        run as a failed write does."""
        if self.session_marked or self.error is not None:
            return
        self.session_marked = True
        try:
            remove_stale_temp_files(self.writer.session_dir)
            mark_session_started(self.writer.session_dir, time.now_iso())
        except Exception as exc:
            self._fail(exc)

    def summary_of(self, task_id: str) -> str | None:
        """The summary of a completion not yet done (None when there is none)."""
        item = self.pending.get(task_id) or self.committing.get(task_id)
        return item.completion.summary if item is not None else None

    async def visible(self, task_ids: tuple[str, ...] | list[str]) -> None:
        """Wait until the files of ``task_ids`` (in sequential and phased sessions: of every completion so
        far) are written."""
        while True:
            if self.error is not None:
                raise _Stopped(self.error)
            if self.sequential:
                wanted = set(self.pending) | set(self.committing)
            else:
                wanted = {t for t in task_ids if t in self.pending or t in self.committing}
            if not wanted & self.committing.keys():
                break
            self.wanted += 1  # their intents are not durable yet (no file may be written before): now
            self._kick_intents()
            try:
                await self._tick()
            finally:
                self.wanted -= 1
        now = [self.unwritten.pop(t) for t in wanted if t in self.unwritten]
        if now:  # not taken by the writer yet: written at once rather than waiting for its next batch
            self._write_now(now)
        while wanted & self.writing:
            if self.error is not None:
                raise _Stopped(self.error)
            await self._tick()

    async def _tick(self) -> None:
        """Wait for the pipeline's next step (an intent batch made durable, a batch written, a failure)."""
        if self.tick is None:
            self.tick = asyncio.get_running_loop().create_future()
        await self.tick

    async def drain(self) -> None:
        """Wait until every completion is written, durable and done; raise what stopped the pipeline."""
        self.settling = True
        self.spares.limit = 0  # a fill under way makes no more: the spares there are enough for what is left
        self.mark_session()
        self._kick_intents()
        self._kick_flush()
        while True:
            busy = [task for task in (self.intent_task, self.writer_task, self.flush_task) if task is not None]
            if not busy:
                break
            await asyncio.wait(busy)
        self.close()
        if self.error is not None:
            raise _Stopped(self.error)


class _Stopped(BaseException):
    """The completion pipeline failed (the session's files or the journal could not be written).

    Raised in the tasks and by :func:`settle`, it stops the run the way a crash would, rather than failing
    the task (which would skip its dependents for good): the run stays resumable, and the next execute
    redoes every completion that has no done record. Not an :class:`Exception`, so that the engine does not
    take it for a failure of the task; :func:`execute_session` turns it into a :class:`RunStateError`.
    """

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _sync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        datasync(fd)  # the journal grows ahead in fsync'd blocks: its data is all there is to sync
    finally:
        os.close(fd)


@dataclass(slots=True, eq=False)
class _Pending:
    step_id: str
    key: str
    completion: Completion
    redo: bool


@dataclass(frozen=True, slots=True)
class _Ahead:
    """A task JSON read ahead of its task, with the prompt made from it (None: made when the task runs)."""

    task: CcwTask
    prompt: str | None = None
    dependencies: dict[str, str] = field(default_factory=dict)


def _committer(engine: Engine, run: Run) -> _Committer:
    """The run's committer (one run is driven at a time by an engine); a new one reads the run's journal."""
    cached: _Committer | None = getattr(engine, "_ccw_committer", None)
    if cached is None or cached.run is not run:
        cached = _Committer(engine, run)
        engine._ccw_committer = cached  # type: ignore[attr-defined]
    return cached


def slot_idle(engine: Engine, run: Run) -> None:
    """The engine's hook when a slot finds no task to start: the pending intents need not wait."""
    _committer(engine, run).hurry()


async def settle(engine: Engine, run: Run) -> None:
    """The engine's hook before a ccw run finishes: every completion written, durable and journaled done."""
    await _committer(engine, run).drain()


async def run_ccw_task(ctx: StepContext) -> None:
    """Run one CCW task (or complete one container), ending with its journaled completion."""
    spec = ctx.spec
    committer = _committer(ctx.engine, ctx.run)
    key = f"{spec.id}/ccw/complete"
    calls = ctx.engine.calls
    if key in calls.recorded:
        ctx.step.summary = ctx.step.summary or "completed"
        return
    started = calls.started.get(key)
    if started is not None:  # the intent made it to the journal, maybe not all three files: redo it
        committer.commit(spec.id, key, Completion.from_json(started["args"]["completion"]), journaled=True)
        ctx.step.summary = "completion redone after an interruption"
        return
    if spec.meta.get("status") == "completed":
        ctx.step.summary = "already completed in the session"
        return
    if spec.meta.get("container"):
        completion = _container_completion(ctx)
        ctx.step.summary = "all subtasks completed"
    else:
        completion = await _task_completion(ctx, committer)
    committer.commit(spec.id, key, completion)


def _session_relative(ctx: StepContext, path: str) -> str:
    session_dir = str(ctx.run.workflow.meta["paths"]["session_dir"])
    prefix = session_dir.rstrip(os.sep) + os.sep
    if path.startswith(prefix) and os.sep == "/":  # the common case, without building paths (per task)
        return path[len(prefix):]
    return Path(path).relative_to(session_dir).as_posix()


def _history(from_status: object, started_at: str | None, now: str) -> tuple[dict[str, str], ...]:
    entries = []
    before = from_status if isinstance(from_status, str) else "pending"
    if before not in ("in_progress", "active"):
        entries.append({"from": before, "to": "in_progress", "changed_at": started_at or now})
    entries.append({"from": "in_progress", "to": "completed", "changed_at": now})
    return tuple(entries)


def _container_completion(ctx: StepContext) -> Completion:
    spec = ctx.spec
    task_json = spec.meta.get("task_json")
    from_status: object = "container"
    if task_json:
        from_status = read_task_file(Path(task_json)).data.get("status", "container")
    now = time.now_iso()
    history = ({"from": str(from_status), "to": "completed", "changed_at": now},)
    return Completion(task_id=spec.id, task_json=_session_relative(ctx, task_json) if task_json else None,
                      history=history, summary_path=f".summaries/{spec.id}-summary.md",
                      summary=render_container_summary(spec.id, spec.name, spec.meta.get("children") or []))


async def _task_completion(ctx: StepContext, committer: _Committer) -> Completion:
    spec = ctx.spec
    paths: dict[str, Any] = ctx.run.workflow.meta["paths"]
    task_json = str(spec.meta["task_json"])
    ahead = committer.task(task_json)  # lazily, now that the task runs (or in the quiet just before)
    committer.read_ahead_later()
    task = ahead.task
    view = TaskView(task.data)
    await committer.visible(spec.depends_on)  # their files are on disk for pre_analysis and the agent
    flow_context = await _pre_analysis(ctx, view)
    if ahead.prompt is not None and not flow_context:
        prompt, dependencies = ahead.prompt, ahead.dependencies
    else:
        prompt, dependencies = _task_prompt(committer, spec, view, flow_context)
    agent = str(spec.meta.get("agent"))
    outcome = await ctx.invoke("work", title=f"{spec.id}: {spec.name}", content=prompt,
                               hints={"agent": agent, "task_id": spec.id, "execution_group": spec.execution_group,
                                      "format": "ccw"},
                               context={"task": task.data, "task_json": task_json, "session": paths,
                                        "flow_context": flow_context, "dependencies": dependencies})
    summary_path = f".summaries/{spec.id}-summary.md"
    own_summary = Path(paths["session_dir"]) / summary_path if outcome.written else None
    written = list(dict.fromkeys(outcome.written))
    if own_summary is not None and any(ctx.project_root / rel == own_summary for rel in written):  # agent wrote it
        summary = own_summary.read_text(encoding="utf-8")
    else:
        summary = render_summary(view, task_id=spec.id, title=spec.name, agent_summary=outcome.summary,
                                 files_modified=written)
    ctx.step.summary = next(iter((outcome.summary or "").strip().splitlines()), "")[:200] or None
    return Completion(task_id=spec.id, task_json=_session_relative(ctx, task_json),
                      history=_history(task.data.get("status"), ctx.step.started_at, time.now_iso()),
                      summary_path=summary_path, summary=summary)


def _task_prompt(committer: _Committer, spec: StepSpec, view: TaskView,
                 flow_context: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The agent's prompt for a task, and the summaries of its dependencies that it holds."""
    paths: dict[str, Any] = committer.run.workflow.meta["paths"]
    dependencies = {dep: _dependency_summary(committer, paths["summaries_dir"], dep) for dep in spec.depends_on}
    prompt = build_task_prompt(view, task_id=spec.id, title=spec.name, agent=str(spec.meta.get("agent")),
                               execution_group=spec.execution_group, paths=paths,
                               task_json=str(spec.meta["task_json"]), dependencies=dependencies,
                               flow_context=flow_context)
    return prompt, dependencies


def _dependency_summary(committer: _Committer, summaries: str, task_id: str) -> str:
    pending = committer.summary_of(task_id)
    return pending if pending is not None else _read_text(os.path.join(summaries, f"{task_id}-summary.md"))


def _read_text(path: Path | str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (FileNotFoundError, UnicodeDecodeError):
        return ""


# --- pre_analysis --------------------------------------------------------------------------------------

_CALL = re.compile(r"^\s*(?P<name>bash|Bash|Read|Glob|Grep|Search)\s*\((?P<arg>.*)\)\s*$", re.DOTALL)
_VAR = re.compile(r"\[([A-Za-z_][\w-]*)\]")
_KEYWORD = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^,]+))""")
_SKIP = frozenset({"skip_optional", "skip"})


@dataclass(frozen=True, slots=True)
class _Result:
    ok: bool
    output: str
    error: str | None = None


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _search_args(arg: str) -> tuple[str, str]:
    """``pattern, path`` or ``pattern="…", path="…"`` (path defaults to the project root)."""
    named = {m[1]: m[2] if m[2] is not None else (m[3] if m[3] is not None else m[4].strip())
             for m in _KEYWORD.finditer(arg)}
    if "pattern" in named:
        return named["pattern"], named.get("path", ".")
    pattern, comma, path = arg.rpartition(",")
    if not comma or not pattern.strip():
        return _unquote(arg), "."
    return _unquote(pattern), _unquote(path) or "."


def _glob_base(pattern: str) -> str:
    parts = []
    for part in pattern.split("/"):
        if any(ch in part for ch in "*?["):
            break
        parts.append(part)
    return "/".join(parts[:-1] if len(parts) == len(pattern.split("/")) else parts) or "."


def _pre_pipeline(engine: Engine) -> ToolPipeline:
    """The pipeline for plan-declared commands: the configured policy minus the risk gate."""
    from stepline.tools import ToolPipeline, ToolPolicy, default_registry

    cached: ToolPipeline | None = getattr(engine, "_ccw_pre_pipeline", None)
    if cached is None:
        tools = engine.config.tools
        policy = ToolPolicy(allowlist=tools.allowlist, blocklist=tools.blocklist, timeout_seconds=tools.timeout_seconds,
                            high_requires_approval=False, medium_requires_approval=False,
                            default_timezone=engine.config.time.default_timezone)
        cached = ToolPipeline(default_registry(), policy)
        engine._ccw_pre_pipeline = cached  # type: ignore[attr-defined]
    return cached


async def _tool(ctx: StepContext, name: str, args: dict[str, Any]) -> dict[str, Any]:
    events: list[tuple[str, dict[str, Any]]] = []
    result = await _pre_pipeline(ctx.engine).arun(
        ToolCall(name=name, args=args), step_id=ctx.spec.id, project_root=ctx.project_root,
        on_event=lambda kind, data: events.append((kind, data)))
    for kind, data in events:
        ctx.emit(EventType(kind), data)
    record = result.model_dump(mode="json")
    ctx.engine.record_tool_result(record)
    return record


async def _run_command(ctx: StepContext, command: str) -> _Result:
    """Run one pre_analysis command through the tool pipeline and return its text output."""
    match = _CALL.match(command)
    name, arg = (match["name"], match["arg"].strip()) if match else ("bash", command.strip())
    if name in ("bash", "Bash"):
        record = await _tool(ctx, "shell", {"command": arg})
        output = str(record.get("stdout") or "")
    elif name == "Read":
        record = await _tool(ctx, "readFile", {"path": _unquote(arg), "max_bytes": 200_000})
        output = str((record.get("result") or {}).get("content", ""))
    elif name == "Glob":
        pattern = _unquote(arg)
        record = await _tool(ctx, "listFiles", {"path": _glob_base(pattern), "recursive": True,
                                                "max_entries": 100_000})
        entries = (record.get("result") or {}).get("entries") or []
        output = "\n".join(e for e in entries if fnmatch.fnmatch(e, pattern)
                           or fnmatch.fnmatch(e, pattern.replace("**/", "")))
    else:
        pattern, path = _search_args(arg)
        record = await _tool(ctx, "shell", {"command": f"grep -rnE -e {shlex.quote(pattern)} -- "
                                                       f"{shlex.quote(path)}; test $? -le 1"})
        output = str(record.get("stdout") or "")
    if record.get("status") != "ok":
        return _Result(False, output, str(record.get("error") or record.get("status")))
    return _Result(True, output)


async def _command(ctx: StepContext, key: str, command: str) -> _Result:
    """Run a command once per attempt: a result already journaled is replayed, not run again."""
    recorded = ctx.engine.calls.recorded.get(key)
    if recorded is not None:
        return _Result(**recorded["result"])
    result = await _run_command(ctx, command)
    ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": "pre_analysis", "args": {"command": command},
                                       "result": {"ok": result.ok, "output": result.output, "error": result.error}})
    return result


def _substitute(text: str, values: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: values.get(m[1], m[0]), text)


async def _pre_analysis(ctx: StepContext, view: TaskView) -> dict[str, str]:
    """Run the task's pre_analysis steps in order; return their ``output_to`` values."""
    outputs: dict[str, str] = {}
    prefix = f"{ctx.spec.id}/{ctx.attempt}/pre"
    for number, step in enumerate(view.pre_analysis):
        if not isinstance(step, dict):
            continue
        name = str(step.get("step") or f"step {number + 1}")
        commands = [str(c) for c in step.get("commands") or ([step["command"]] if step.get("command") else [])]
        on_error = str(step.get("on_error") or "fail")
        texts: list[str] = []
        failure: str | None = None
        for index, raw in enumerate(commands):
            command = _substitute(raw, outputs)
            result = await _command(ctx, f"{prefix}/{number}/{index}", command)
            if not result.ok and on_error == "retry_once":
                result = await _command(ctx, f"{prefix}/{number}/{index}/retry", command)
            if not result.ok:
                failure = f"{command!r}: {result.error}"
                texts.append(result.output)
                break
            texts.append(result.output)
        value = "\n".join(text.rstrip("\n") for text in texts)
        if failure is not None:
            if on_error in _SKIP:
                value = ""
            elif on_error == "manual_intervention":
                _manual_intervention(ctx, number, name, failure)
            elif on_error != "continue":
                raise StepFailed(f"task {ctx.spec.id}: pre_analysis step {name!r} failed: {failure}",
                                 retryable=False, hint=f"on_error is {on_error!r}")
        if step.get("output_to"):
            outputs[str(step["output_to"])] = value
    return outputs


def _manual_intervention(ctx: StepContext, number: int, name: str, failure: str) -> None:
    """Block the task for a person (``on_error: manual_intervention``); approval continues, rejection fails."""
    engine = ctx.engine
    gate_id = f"ccw:{ctx.spec.id}:pre_analysis:{number}"
    decision = engine.calls.decisions.get(gate_id)
    if decision is not None:
        if decision["decision"] == "rejected":
            raise StepFailed(f"task {ctx.spec.id}: pre_analysis step {name!r} failed and gate {gate_id} was "
                             "rejected", retryable=False)
        return
    reason = f"pre_analysis step {name!r} of {ctx.spec.id} needs manual intervention: {failure}"
    existing = engine.gates.get(gate_id)
    if existing is None or existing.status != "pending":
        engine.gates.open(gate_id, kind="human", step_id=ctx.spec.id, reason=reason, phase=ctx.spec.phase)
        ctx.emit(EventType.HUMAN_GATE_REQUIRED, {"gate_id": gate_id, "reason": reason, "phase": ctx.spec.phase})
    raise StepBlocked(f"waiting for approval of gate {gate_id} ({reason})", gate_id)


register_driver("ccw", run_ccw_task, CcwFlow, settle=settle, slot_idle=slot_idle, completion_durable=True)


# --- a session as a whole ------------------------------------------------------------------------------


def prepare_session(session_dir: Path) -> tuple[CcwSession, WorkflowSpec]:
    """Read and check a session for running; nothing is written.

    Raises:
        ReaderError: a file that does not parse, a TODO line or dependency naming a missing task, a
            dependency cycle (all from the reader), IMPL_PLAN.md or TODO_LIST.md missing, or phases that
            contradict the dependencies.
    """
    session = read_ccw_session(session_dir)
    for name in ("IMPL_PLAN.md", "TODO_LIST.md"):
        if not (session.session_dir / name).is_file():
            raise ReaderError(f"{name} is missing; a session needs a plan and a task list to run",
                              path=str(session.session_dir / name),
                              hint="re-run CCW's /workflow:plan, or `stepline ccw check` for every problem")
    spec = session.to_workflow_spec()
    if spec.meta.get("execution_model") == "phased" and spec.meta.get("phases"):
        plan_workflow_waves(spec)  # the one check the reader has not made: phases against dependencies
    spec.meta["scheduling"] = "dag"
    return session, spec


def _journal_status(events: list[Any]) -> RunStatus:
    for event in reversed(events):
        if event.type in (EventType.WORKFLOW_STARTED.value, EventType.WORKFLOW_RESUMED.value):
            return RunStatus.RUNNING
        if event.type == EventType.WORKFLOW_COMPLETED.value:
            return RunStatus.COMPLETED
        if event.type == EventType.WORKFLOW_FAILED.value:
            return RunStatus.FAILED
        if event.type == EventType.WORKFLOW_BLOCKED.value:
            return RunStatus.BLOCKED
    return RunStatus.RUNNING


def session_run(engine: Engine, session_dir: Path) -> tuple[str, RunStatus] | None:
    """The newest run of the session in this project and its status as the journal says (None: no run).

    Raises:
        RunLockedError: a live process is running the session.
    """
    from stepline.store import RunDir, lock_holder, read_json

    for summary in reversed(list(engine.store.summaries())):
        if summary.workflow != session_dir.name:
            continue
        run_dir = RunDir(engine.store.root / summary.run_id)
        manifest = read_json(run_dir.manifest_path, {}) or {}
        paths = ((manifest.get("workflow") or {}).get("meta") or {}).get("paths") or {}
        if paths.get("session_dir") != str(session_dir):
            continue
        holder = lock_holder(run_dir.path / "lock")
        if holder is not None:
            raise RunLockedError(f"session {session_dir.name} is being executed by process {holder} "
                                 f"(run {summary.run_id})", hint="wait for it, or stop that process first")
        return summary.run_id, _journal_status(run_dir.events())
    return None


async def execute_session(engine: Engine, session_dir: Path) -> Run:
    """Run a session to its end: resume its interrupted or blocked run, else start a new one.

    A run that completed or failed is not resumed: a new run starts from the session's files, where the
    completed tasks are ticked (they complete without their agent) and a failed task is tried again.
    """
    session, spec = prepare_session(session_dir)
    previous = session_run(engine, session.session_dir)
    try:
        # The session is marked active by the run's committer, once the first tasks are under way.
        if previous is not None and previous[1] in (RunStatus.RUNNING, RunStatus.BLOCKED):
            return await engine.resume(previous[0])
        return await engine.start(spec)
    except _Stopped as stopped:
        raise RunStateError(f"session {session.session_id}: its files could not be written ({stopped.cause}); "
                            "the run stopped", hint="fix the cause and execute the session again: the run "
                            "resumes and finishes the completions it had journaled") from stopped.cause
    finally:
        committer: _Committer | None = getattr(engine, "_ccw_committer", None)
        if committer is not None:
            committer.close()  # a run that stopped before it settled


def complete_session(session_dir: Path) -> dict[str, Any]:
    """Mark every task completed, then archive the session (``/workflow:session:complete``).

    A task that was never completed is ticked with a summary saying so; every change goes through the same
    idempotent writer, so an interrupted completion is finished by running it again.
    """
    session = read_ccw_session(session_dir)
    parent = session.session_dir.parent
    if session.layout == "active":
        archives = parent.parent / "archives"
    elif session.layout == "archived":
        archives = parent
    elif session.layout == "legacy":
        archives = parent / "archives"
    else:
        raise RunStateError(f"session {session.session_id} is not inside a .workflow folder, so it has no archive",
                            hint="move it to .workflow/active/ first")
    now = time.now_iso()
    completions = []
    for task_id, status in session.status.items():
        if status == "completed":
            continue
        ref = session.tasks[task_id]
        kids = session.children.get(task_id)
        summary = (render_container_summary(task_id, ref.title, kids) if kids else
                   f"# Task: {task_id} {ref.title}\n\n## Implementation Summary\n\nMarked completed when session "
                   f"{session.session_id} was completed; stepline did not run it.\n\n## Status: ✅ Complete\n")
        completions.append(Completion(
            task_id=task_id, task_json=ref.path.relative_to(session.session_dir).as_posix() if ref.path else None,
            history=({"from": ref.status, "to": "completed", "changed_at": now},),
            summary_path=f".summaries/{task_id}-summary.md", summary=summary))
    SessionWriter(session.session_dir).apply(completions)
    if session.layout == "legacy":
        (parent / f".active-{session.session_id}").unlink(missing_ok=True)
    return archive_session(session.session_dir, archives, now, relative_to=session.project_root)
