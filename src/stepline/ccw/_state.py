"""Completing CCW tasks durably: the three files a completion changes, and the run's completion path.

A completion touches three files: the task JSON (``status`` + ``status_history``), TODO_LIST.md (the task's
box ticked, with a link to its summary) and ``.summaries/<id>-summary.md``. Three files cannot change at
once, so a completion is a journaled change (write-ahead), in this order:

1. its *intent* (``CallStarted`` holding the whole :class:`Completion`, and the sha256 of the task JSON's and
   summary's content before it, and of TODO_LIST.md's at a process's first completion, kept in the run's blobs
   for ``stepline fork``) is journaled and fsynced; intents
   that arrive together share one fsync (group commit). Nothing of the session is touched before;
2. the files are written, each replaced atomically and durably (:func:`write_files`: a temp file in the
   same folder made durable, ``os.replace``, fsync of the folder), so a crash leaves each one old or new;
3. only then is its *done* record (``CallRecorded``) journaled.

A run resumed after a crash redoes every intent that has no *done* record before any of its tasks goes on.
:meth:`SessionWriter.write` is idempotent (a part already on disk is left as it is), so after the redo the
three files agree. A completion holds the *change*, not whole files (TODO_LIST.md of a 10,000-task session is
about 1 MB, a task JSON may be 100 KB): the TODO line to tick, the history entries to append and the summary
text; re-applying it to the old or the new file gives the same bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from stepline.ccw._todo import (
    TodoEntry,
    parse_todo_text,
    read_todo_file,
    render_todo_line_completed,
    summary_href_for,
)
from stepline.errors import JournalError
from stepline.formats import FileVersion, decode_text, file_version, parse_json, read_file
from stepline.model import EventType, Run, StepStatus
from stepline.store import RunDir, datasync, fsync_path, keep_blob

if TYPE_CHECKING:
    from stepline.engine import Engine

__all__ = [
    "Committer",
    "Completion",
    "SessionWriter",
    "Stopped",
    "json_bytes",
    "unfinished_completions",
    "write_files",
]

#: TODO_LIST.md is rewritten whole (O(tasks)): its boxes are ticked at most this often (and when the run
#: settles), for all the completions whose other files were written since.
_TICK_SECONDS = 0.2

#: Whether sync(2) waits for the writes to reach the disk (Linux does; POSIX lets it return before).
_SYNC_WAITS = sys.platform == "linux"


@dataclass(frozen=True, slots=True)
class Completion:
    """One task's completion: what changes in each of the three files (paths relative to the session).

    ``task_json`` is None for a container that has no task JSON. The TODO line is not part of it: the writer
    ticks the task's line in the file it finds (a ``▸`` container line has no box and stays as it is).
    """

    task_id: str
    task_json: str | None
    history: tuple[dict[str, str], ...]
    summary_path: str
    summary: str

    def to_json(self) -> dict[str, Any]:
        """The journal form of the intent."""
        return {"task_id": self.task_id, "task_json": self.task_json, "history": list(self.history),
                "summary_path": self.summary_path, "summary": self.summary}

    @classmethod
    def from_json(cls, raw: Any) -> Completion:
        """Rebuild an intent read back from the journal.

        Raises:
            ValueError: ``raw`` is not what :meth:`to_json` writes (a damaged journal), saying which field.
        """
        if not isinstance(raw, dict):
            raise ValueError("the completion is not an object")
        for name in ("task_id", "summary_path", "summary"):
            if not isinstance(raw.get(name), str):
                raise ValueError(f"the completion's {name} is not a string")
        if raw.get("task_json") is not None and not isinstance(raw["task_json"], str):
            raise ValueError("the completion's task_json is not a string or null")
        history = raw.get("history") or ()
        if not isinstance(history, list | tuple) or not all(
                isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values()) for entry in history):
            raise ValueError("the completion's history is not a list of status changes")
        return cls(task_id=raw["task_id"], task_json=raw.get("task_json"),
                   history=tuple(dict(entry) for entry in history),
                   summary_path=raw["summary_path"], summary=raw["summary"])


def write_files(files: list[tuple[Path, bytes]]) -> None:
    """Replace each file with its bytes, atomically and durably: every temp file (``.<name>.<pid>.tmp``, in
    the target's folder) written and made durable, then renamed over its target, then each folder fsynced once.
    A crash leaves every file old or new, never torn (a temp file it leaves behind is deleted at the next
    execute); on an error, the temp files not renamed yet are deleted.

    Several temp files are made durable by one ``sync(2)`` on Linux, where it returns only once the writes are
    on disk ("the same guarantees as fsync() called on every file in the system", sync(2)); elsewhere, and for
    a single file, each is fsynced. A batch of completions writes two files per task, and on a busy disk one
    fsync per file made 3,000 no-op tasks 1.4x slower than one sync per batch (bench/ccw_scale.py).
    """
    batched = _SYNC_WAITS and len(files) > 1
    temps: list[tuple[Path, Path]] = []
    renamed = 0
    try:
        for target, data in files:
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            temps.append((tmp, target))
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if not batched:
                    os.fsync(fd)
            finally:
                os.close(fd)
        if batched:
            os.sync()  # every temp file's bytes, before any rename
        for tmp, target in temps:
            os.replace(tmp, target)
            renamed += 1
    finally:
        for tmp, _ in temps[renamed:]:
            tmp.unlink(missing_ok=True)
    for folder in dict.fromkeys(target.parent for target, _ in files):
        fsync_path(folder)  # the renames (a batch touches two or three folders)


def json_bytes(data: Any, *, floats: bool = True) -> bytes:
    """jq's layout (CCW edits task JSON with jq): two-space indent, UTF-8 kept, final newline.

    Without ``floats`` (the caller knows ``data`` holds none), orjson writes it: the same bytes as
    ``json.dumps(indent=2, ensure_ascii=False)``, in C. Floats are left to the standard encoder (orjson
    writes ``1e16`` for ``1e+16``, null for NaN), and so is whatever orjson refuses (integers beyond 64 bits).
    """
    if not floats:
        try:
            return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            pass
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _has_float(value: Any) -> bool:
    """Whether parsed JSON holds a float anywhere (then :func:`json_bytes` leaves it to the standard encoder)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            return True
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


class SessionWriter:
    """Applies completions to one session folder; keeps TODO_LIST.md's lines in memory between writes.

    The cached lines are re-read whenever the file (inode, size, mtime) is not what this writer left, so a
    hand edit during a run is picked up rather than overwritten.
    """

    def __init__(self, session_dir: Path) -> None:
        self.session_dir = Path(session_dir)
        self.todo_path = self.session_dir / "TODO_LIST.md"
        self._lines: list[str] | None = None
        self._index: dict[str, int] = {}
        self._entries: dict[str, TodoEntry] = {}
        self._version: FileVersion | None = None  # of the TODO_LIST.md the lines are
        self._folders: set[Path] = set()  # summary folders known to exist

    def _todo_lines(self) -> list[str] | None:
        try:
            version = file_version(os.stat(self.todo_path))
        except FileNotFoundError:
            self._lines = None
            return None
        if self._lines is None or self._version != version:
            text, todo, self._version = read_todo_file(self.todo_path)  # parsed already when the index read it
            self._lines = text.splitlines(keepends=True)
            self._entries = todo.by_id
            self._index = {task_id: entry.line - 1 for task_id, entry in self._entries.items()}
        return self._lines

    def _todo_update(self, completions: list[Completion]) -> bytes | None:
        lines = self._todo_lines()
        if lines is None:
            return None
        changed = False
        for completion in completions:
            index = self._index.get(completion.task_id)
            if index is None:
                continue
            old = lines[index]
            entry: TodoEntry | None = self._entries[completion.task_id]
            if entry is None or entry.text != old.rstrip("\r\n"):  # ticked since it was read: parse it again
                parsed = parse_todo_text(old, self.todo_path).entries
                entry = parsed[0] if parsed else None
            if entry is None or entry.task_id != completion.task_id or entry.is_container:
                continue  # no checkbox line (a ``▸`` container)
            new = render_todo_line_completed(entry, summary_href_for(completion.task_id))
            new += old[len(old.rstrip("\r\n")):]  # the line's own ending
            if old != new:
                lines[index] = new
                changed = True
        return "".join(lines).encode("utf-8") if changed else None

    def _task_update(self, completion: Completion) -> bytes | None:
        if completion.task_json is None:
            return None
        path = self.session_dir / completion.task_json
        raw = read_file(path)[0]
        try:
            data = orjson.loads(raw)
            floats = _has_float(data)
        except orjson.JSONDecodeError:
            floats = True  # what orjson refuses but Python reads (NaN), or the error
        if floats:  # Python's parser: orjson reads an integer beyond 64 bits as a float
            data = parse_json(decode_text(raw, path), path, what="task JSON does not parse")
        history = data.get("status_history")
        history = list(history) if isinstance(history, list) else []
        added = list(completion.history)
        if data.get("status") == "completed" and history[len(history) - len(added):] == added:
            return None
        data["status"] = "completed"
        data["status_history"] = history + added
        return json_bytes(data, floats=floats)

    def _summary_update(self, completion: Completion) -> bytes | None:
        summary = self.session_dir / completion.summary_path
        content = completion.summary.encode("utf-8")
        if summary.is_file() and summary.read_bytes() == content:
            return None
        if summary.parent not in self._folders:  # made once per run, not stat'ed per task
            if not summary.parent.is_dir():
                summary.parent.mkdir(parents=True)
                fsync_path(summary.parent.parent)  # the new folder's name is durable before files go in it
            self._folders.add(summary.parent)
        return content

    def write(self, completions: list[Completion], *, files: bool = True, todo: bool = True) -> None:
        """Make every completion true on disk (``files``: the task JSONs and summaries, ``todo``: TODO_LIST.md),
        each changed file replaced once, atomically and durably (:func:`write_files`). Idempotent: what is on
        disk already is not written again."""
        out: list[tuple[Path, bytes]] = []
        try:
            for completion in completions if files else ():
                for path, data in ((completion.task_json, self._task_update(completion)),
                                   (completion.summary_path, self._summary_update(completion))):
                    if data is not None:
                        out.append((self.session_dir / str(path), data))
            ticked = self._todo_update(completions) if todo else None
            if ticked is not None:
                out.append((self.todo_path, ticked))
            write_files(out)
        except BaseException:
            self._lines = None  # the cache may hold lines that never reached the disk
            raise
        if ticked is not None:
            self._version = file_version(os.stat(self.todo_path))


# --- the run's completion path ------------------------------------------------------------------------------


class Stopped(BaseException):
    """The completion path failed (the session's files or the journal could not be written).

    Raised in the tasks and by the engine's ``settle`` hook, it stops the run the way a crash would, rather
    than failing the task (which would skip its dependents for good): the run stays resumable, and the next
    execute redoes every completion that has no done record. Not an :class:`Exception`, so that the engine
    does not take it for a failure of the task; ``execute_session`` turns it into a ``RunStateError``.
    """

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(slots=True, eq=False)
class _Pending:
    step_id: str
    key: str
    completion: Completion
    redo: bool = False


class Committer:
    """The completions of one run (steps 1-3 of the module docstring), one committer per run.

    :meth:`commit` journals a task's intent and returns: the task's step is journaled completed behind it (no
    crash keeps the step's completion and loses its intent), and the task's slot is free. A background worker
    (:meth:`_work`) takes every intent journaled since its last batch, makes them durable with one fsync of the
    journal, writes the batch's task JSONs and summaries, then ticks TODO_LIST.md for the batches written so
    far and journals their done records. A task waits for the task JSONs and summaries of its dependencies (in
    sequential and phased sessions: of every earlier completion) before its pre_analysis and agent run
    (:meth:`visible`). :meth:`drain` waits until every completion is done: the engine calls it before the
    run's last record, since a finished run is never resumed and a completion left then would not be redone.
    """

    def __init__(self, engine: Engine, run: Run) -> None:
        self.engine = engine
        self.run = run
        self.writer = SessionWriter(Path(run.workflow.meta["paths"]["session_dir"]))
        self.journal_path = RunDir(engine.store.root / run.run_id).journal_path
        self.sequential = run.workflow.meta.get("execution_model") in ("sequential", "tdd", "phased")
        self.queue: list[_Pending] = []  # intents journaled, not yet taken by the worker
        self.unwritten: dict[str, _Pending] = {}  # by task id: task JSON and summary not yet on disk
        self.unticked: list[_Pending] = []  # files written; TODO_LIST.md and the done record to come
        self.worker: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.session_marked = self.settling = False  # session_marked: see the driver's _mark_session
        self.todo_kept = False  # whether an intent of this process holds TODO_LIST.md's earlier content
        self.tick_due = 0.0  # loop time from which TODO_LIST.md may be rewritten again
        self._change: asyncio.Future[None] | None = None  # resolved when files are written, or on a failure
        self._arrival: asyncio.Future[None] | None = None  # resolved by an intent, or when the run settles
        self._redo()

    def _redo(self) -> None:
        """Finish every intent of this run that has no done record (a crash came between the two), here and
        now, before any task of this process goes on."""
        intents = unfinished_completions(self.journal_path)
        if intents:
            try:
                _sync_file(self.journal_path)  # read back maybe from a killed process's page cache: durable first
                self.writer.write([item.completion for item in intents])
            except Exception as exc:
                self.error = exc
                return
            self._done(intents)

    def commit(self, step_id: str, key: str, completion: Completion) -> None:
        """Journal ``completion``'s intent and return; the worker makes it durable, writes the files and
        journals the done record."""
        if self.error is not None:
            raise Stopped(self.error)
        self.engine.emit(EventType.CALL_STARTED, {"key": key, "op": "ccw_complete",
                                                  "args": {"completion": completion.to_json(),
                                                           "before": self._before(completion)}}, step_id=step_id)
        item = _Pending(step_id, key, completion)
        self.queue.append(item)
        self.unwritten[completion.task_id] = item
        _resolve(self._arrival)
        if self.worker is None:
            self.worker = asyncio.ensure_future(self._work())

    def _before(self, completion: Completion) -> dict[str, str | None]:
        """The sha256 of what the task JSON and summary (and, at this process's first completion, TODO_LIST.md)
        hold before ``completion`` changes them (None: no file), each content kept in the run's blobs, so that
        ``stepline fork`` can put them back."""
        before: dict[str, str | None] = {}
        rels = [completion.task_json, completion.summary_path]
        if not self.todo_kept:  # TODO_LIST.md changes in batches: kept as this process first found it (the worker
            self.todo_kept = True  # is not writing yet); a fork ticks the completions since again
            rels.append(self.writer.todo_path.name)
        for rel in rels:
            if rel is None:
                continue
            try:
                data = (self.writer.session_dir / rel).read_bytes()
            except FileNotFoundError:
                before[rel] = None
                continue
            before[rel] = keep_blob(self.journal_path.parent, data, holds_secret=self._holds_secret)
        return before

    def _holds_secret(self, data: bytes) -> bool:
        text = data.decode("utf-8", "replace")
        return bool(self.engine.redact(text) != text)

    async def _work(self) -> None:
        """Batch after batch: the intents' fsync and files (:meth:`_write`), then TODO_LIST.md and the done
        records once a tick is due; with only ticks left, it waits for the next intent until then."""
        loop = asyncio.get_running_loop()
        try:
            while (self.queue or self.unticked) and self.error is None:
                if not (self.queue or self.settling) and loop.time() < self.tick_due:
                    self._arrival = loop.create_future()
                    await asyncio.wait([self._arrival], timeout=self.tick_due - loop.time())
                    self._arrival = None
                await asyncio.sleep(0)  # the completions of this loop turn join the batch
                batch, self.queue = self.queue, []
                if batch:
                    await asyncio.to_thread(self._write, batch)
                    for item in batch:
                        del self.unwritten[item.completion.task_id]
                    self.unticked += batch
                    _resolve(self._change)
                if self.unticked and (self.settling or loop.time() >= self.tick_due):
                    ticked, self.unticked = self.unticked, []
                    await asyncio.to_thread(self.writer.write, [item.completion for item in ticked], files=False)
                    self._done(ticked)
                    self.tick_due = loop.time() + _TICK_SECONDS
        except Exception as exc:  # a file or the journal could not be written: stop, as a crash would
            self.error = exc
        finally:
            self.worker = None
            _resolve(self._change)

    def _write(self, batch: list[_Pending]) -> None:
        """The batch's intents made durable with one fsync, then its task JSONs and summaries written (in a
        worker thread: the system calls release the loop)."""
        _sync_file(self.journal_path)  # a descriptor of its own: every record appended so far is then durable
        self.writer.write([item.completion for item in batch], todo=False)

    def _done(self, items: list[_Pending]) -> None:
        """Journal the done records of completions whose three files are durable."""
        steps = self.run.steps
        for item in items:
            self.engine.emit(EventType.CALL_RECORDED, {"key": item.key, "op": "ccw_complete",
                                                       "args": {"task_id": item.completion.task_id, "redo": item.redo},
                                                       "result": item.completion.summary_path}, step_id=item.step_id)
            step = steps.get(item.step_id)
            if step is not None and step.status == StepStatus.COMPLETED:
                self.engine.calls.recorded.pop(item.key, None)  # finished: never replayed, no need to keep it

    async def visible(self, task_ids: tuple[str, ...] | list[str]) -> None:
        """Wait until the task JSONs and summaries of ``task_ids`` (in sequential and phased sessions: of every
        completion so far) are on disk."""
        wanted = set(self.unwritten) if self.sequential else {t for t in task_ids if t in self.unwritten}
        while wanted & self.unwritten.keys():
            if self.error is not None:
                raise Stopped(self.error)
            if self._change is None or self._change.done():
                self._change = asyncio.get_running_loop().create_future()
            await self._change

    async def drain(self) -> None:
        """Wait until every completion is written, durable and done; raise what stopped the path."""
        self.settling = True
        _resolve(self._arrival)
        while self.worker is not None:
            await self.worker
        if self.error is not None:
            raise Stopped(self.error)


def unfinished_completions(journal_path: Path) -> list[_Pending]:
    """The completion intents in a run's journal that have no done record, in journal order.

    Raises:
        JournalError: an intent that is not a completion (a damaged journal), naming its line.
    """
    try:
        data = journal_path.read_bytes()
    except FileNotFoundError:
        return []
    intents: dict[str, _Pending] = {}
    for number, line in enumerate(data.splitlines() if b'"ccw_complete"' in data else (), start=1):
        if b'"ccw_complete"' not in line:
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:  # a torn last line
            continue
        record = event.get("data") if isinstance(event, dict) else None
        if not isinstance(record, dict) or record.get("op") != "ccw_complete":
            continue
        key = record.get("key")
        try:
            if not isinstance(key, str):
                raise ValueError("its key is not a string")
            if event.get("type") == EventType.CALL_STARTED.value:
                args = record.get("args")
                completion = Completion.from_json(args.get("completion") if isinstance(args, dict) else None)
                intents[key] = _Pending(str(event.get("step_id")), key, completion, redo=True)
            else:
                intents.pop(key, None)
        except ValueError as exc:
            raise JournalError(f"bad completion record: {exc}", path=str(journal_path), line=number,
                               hint=f"`stepline doctor {journal_path.parent.name}` explains it and what can be "
                                    "saved") from None
    return list(intents.values())


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


def _sync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        datasync(fd)
    finally:
        os.close(fd)
