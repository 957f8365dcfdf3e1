"""Writing a CCW session's state: a task's completion as one redo-able change, session start and archive.

A completion touches three files: the task JSON (``status`` + ``status_history``), TODO_LIST.md (the task's
box ticked, with a link to its summary) and ``.summaries/<id>-summary.md``. Three files cannot change at
once, so the engine journals a :class:`Completion` (synced) before touching any of them, writes the files,
makes them durable, then journals that it is done. A run resumed after a crash redoes a completion that has
no *done*; :meth:`SessionWriter.write` is idempotent (a part already on disk is left as it is), so once the
run resumes the three files agree.

Each file is replaced atomically (temp file, rename), so a crash leaves it old or new, never torn. The
engine writes many completions' files as one batch and then makes the whole batch durable with one
:func:`flush_files` (``syncfs(2)`` on Linux: every dirty page and every directory entry of the file system,
renames included, is on disk when it returns), instead of one fsync per file and per folder: the durability
is the same (everything the batch wrote is on disk before its *done* records are journaled), at one flush
per batch instead of two or three per file.

A completion holds the *change*, not whole files: TODO_LIST.md of a 10,000-task session is about 1 MB and a
task JSON may be 100 KB, so it names the TODO line to tick, the history entries to append and the summary
text; re-applying it to the old or the new file gives the same bytes.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import stat
import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stepline.ccw._todo import (
    TodoEntry,
    parse_todo_text,
    read_todo_file,
    render_todo_line_completed,
    summary_href_for,
)
from stepline.errors import ReaderError, RunStateError
from stepline.formats._files import FileVersion, file_version, read_file
from stepline.store import fsync_path

__all__ = [
    "Completion",
    "SessionWriter",
    "SpareFiles",
    "archive_session",
    "flush_files",
    "mark_session_started",
    "remove_stale_temp_files",
    "write_files",
]

SESSION_FILE = "workflow-session.json"
ARCHIVING_MARKER = ".archiving"


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
    def from_json(cls, raw: dict[str, Any]) -> Completion:
        """Rebuild an intent read back from the journal."""
        return cls(task_id=raw["task_id"], task_json=raw.get("task_json"),
                   history=tuple(dict(entry) for entry in raw.get("history") or ()),
                   summary_path=raw["summary_path"], summary=raw["summary"])


class SpareFiles:
    """Empty temp files made ahead, per folder, for :func:`write_files` to write into and rename.

    Creating a file (a new inode) can cost a few hundred µs on a VM's disk, ten times a rename, and every
    completion creates two: its task JSON's temp file and its summary's. Made ahead in a worker thread while
    the agents run (:meth:`fill`), they are there when the completions come, so the run's last completions,
    written after its last agent has finished, do not pay for them. A replacement swaps its temp file into
    place (:func:`_exchange`), which leaves the replaced version under the temp name: it comes back through
    :meth:`recycle`, and the next fill empties it and keeps it as a spare. Named like every temp file of
    this process (``.<name>.<pid>.tmp``), so those a crash leaves are removed by
    :func:`remove_stale_temp_files`.
    """

    def __init__(self, counts: dict[Path, int]) -> None:
        self.counts = counts  # how many to keep ready, by folder
        self._free: dict[Path, deque[Path]] = {folder: deque() for folder in counts}  # deque: thread-safe
        self._used: dict[Path, deque[Path]] = {folder: deque() for folder in counts}  # holding old files
        self._numbers = itertools.count()
        self._lock = threading.Lock()  # fill runs in a worker thread; discard may come while it does
        self._discarded = False
        #: No folder is filled beyond this many (the completions still to write), when set: spares nobody
        #: will use cost a file's creation now and its deletion at the end.
        self.limit: int | None = None

    def take(self, folder: Path) -> Path | None:
        """An empty temp file in ``folder``, or None when there is none ready (the caller creates one)."""
        free = self._free.get(folder)
        try:
            return free.popleft() if free is not None else None
        except IndexError:
            return None

    def recycle(self, path: Path) -> None:
        """Take back a temp file that an exchange left holding a replaced file, to empty and reuse."""
        used = self._used.get(path.parent)
        if used is None:
            path.unlink(missing_ok=True)
        else:
            used.append(path)

    def fill(self) -> None:
        """Top every existing folder up to its count, emptying recycled files first (system calls: for a
        worker thread). A folder where no file can be made gets none: the write that needed it says why."""
        pid = os.getpid()
        for folder, free in self._free.items():
            used = self._used[folder]
            try:
                while used:
                    with self._lock:
                        if self._discarded:
                            return
                        path = used.popleft()
                        if len(free) < self._wanted(folder) and _empty(path):
                            free.append(path)
                        else:
                            path.unlink(missing_ok=True)
                while len(free) < self._wanted(folder) and folder.is_dir():
                    with self._lock:
                        if self._discarded:
                            return
                        path = folder / f".stepline-spare-{next(self._numbers)}.{pid}.tmp"
                        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                        free.append(path)
            except OSError:
                continue

    def _wanted(self, folder: Path) -> int:
        limit = self.limit  # read once: the loop's thread may change it
        return self.counts[folder] if limit is None else min(self.counts[folder], limit)

    def discard(self) -> None:
        """Delete the spare files not used, and make no more. Best effort: the run's work is done, and a
        file that cannot be deleted is left for :func:`remove_stale_temp_files` at the next execute."""
        with self._lock:
            self._discarded = True
            for files in (*self._free.values(), *self._used.values()):
                while files:
                    try:
                        files.popleft().unlink(missing_ok=True)
                    except OSError:
                        continue


def _empty(path: Path) -> bool:
    """Empty a swapped-out file for reuse (freeing its blocks, here rather than in a rename); False when it is
    not a plain file with this one name, which is then left alone."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return False
        os.ftruncate(fd, 0)
        return True
    finally:
        os.close(fd)


def write_files(files: list[tuple[Path, bytes]], *, durable: bool = True, spares: SpareFiles | None = None) -> None:
    """Replace each file with its bytes: all temp files written first, then renamed, so a crash leaves every
    file either old or new. With ``durable`` the temp files are fsynced before the renames and the folders
    after them, so a finished call is durable; without it the caller makes the files durable later
    (:func:`flush_files`) before anything that depends on them is journaled. ``spares``: temp files made
    ahead, used where there is one."""
    temps: list[tuple[Path, Path, bool]] = []  # (temp file, target, whether the temp file is a spare)
    renamed = 0
    try:
        for target, data in files:
            tmp = spares.take(target.parent) if spares is not None else None
            spare = tmp is not None
            if tmp is None:
                tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            else:
                # A spare is empty, so no O_TRUNC: on ext4 that flag also makes close() allocate the file's
                # blocks at once (its guard for truncate-and-rewrite), which waits behind any fsync under way.
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
            temps.append((tmp, target, spare))
            try:
                if spare and os.fstat(fd).st_size:  # a spare someone wrote to after all: emptied, as O_TRUNC would
                    os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
        for tmp, target, spare in temps:
            # Only a spare is swapped in and taken back: a temp file named after its target would join the
            # spares under a name the next write without a spare uses again, and be handed out twice.
            if spares is not None and spare and _exchange(tmp, target):
                spares.recycle(tmp)  # now holding the old file: emptied in the background for reuse
            else:
                os.replace(tmp, target)
            renamed += 1
    finally:
        for tmp, _, _ in temps[renamed:]:  # an error stopped the batch: no temp file is left behind
            tmp.unlink(missing_ok=True)
    if durable:
        for folder in dict.fromkeys(target.parent for target, _ in files):
            fsync_path(folder)


_libc_functions: dict[str, Any] = {}


def _libc(name: str, signature: str) -> Any:
    """The C library's function ``name`` (Linux, through ctypes), or None where there is none; ``signature``
    spells its argument types: ``i`` int, ``I`` unsigned int, ``s`` a path as bytes."""
    if name not in _libc_functions:
        function = None
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                function = getattr(ctypes.CDLL(None, use_errno=True), name)
            except (OSError, AttributeError):
                function = None
            else:
                kinds = {"i": ctypes.c_int, "I": ctypes.c_uint, "s": ctypes.c_char_p}
                function.argtypes = [kinds[code] for code in signature]
                function.restype = ctypes.c_int
        _libc_functions[name] = function
    return _libc_functions[name]


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(tmp: Path, target: Path) -> bool:
    """Swap ``tmp`` and ``target`` in one atomic step (``renameat2`` with ``RENAME_EXCHANGE``): the target
    gets the new file, and ``tmp`` the old one, whose blocks are not freed now (freeing them is most of what
    a replacing rename costs on some disks). False where that cannot be done (no such call or a file system
    without it, or no target yet): the caller renames as usual."""
    renameat2 = _libc("renameat2", "isisI")
    if renameat2 is None:
        return False
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        return False  # a link, a folder, or a file with other names: what a plain rename does to it instead
    if renameat2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE) == 0:
        return True
    if _errno() in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        _libc_functions["renameat2"] = None  # not here: plain renames from now on
    return False


def flush_files(files: list[Path]) -> None:
    """Make ``files`` (written and renamed with ``durable=False``) and their directory entries durable.

    On Linux one ``syncfs(2)`` per file system involved: it returns once every dirty page and every metadata
    change of that file system (the renames and created folders included) is on disk, so it covers the
    whole batch at the cost of one flush. Elsewhere (no ``syncfs``), each file and each folder is fsynced.
    """
    if not files:
        return
    folders = list(dict.fromkeys(path.parent for path in files))
    syncfs = _libc("syncfs", "i")
    if not syncfs:
        for path in files:
            fsync_path(path)
        for folder in folders:
            fsync_path(folder)
        return
    devices: dict[int, Path] = {}
    for folder in folders:
        devices.setdefault(os.stat(folder).st_dev, folder)
    for folder in devices.values():
        fd = os.open(folder, os.O_RDONLY)
        try:
            if syncfs(fd) != 0:
                error = _errno()
                raise OSError(error, os.strerror(error), str(folder))
        finally:
            os.close(fd)


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def _json_bytes(data: Any, *, floats: bool = True) -> bytes:
    """jq's layout (CCW edits task JSON with jq): two-space indent, UTF-8 kept, final newline.

    Without ``floats`` (the caller knows ``data`` holds none), orjson writes it: the same bytes as
    ``json.dumps(indent=2, ensure_ascii=False)``, in C (the standard encoder is pure Python as soon as it
    indents). Floats are left to the standard encoder (orjson writes ``1e16`` for ``1e+16``, null for NaN),
    and so is whatever orjson refuses (integers beyond 64 bits).
    """
    if not floats:
        try:
            return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            pass
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _has_float(value: Any) -> bool:
    """Whether parsed JSON holds a float anywhere (then :func:`_json_bytes` leaves it to the standard encoder).
    A loop over exact types, not recursion: parsers make plain dicts, lists and floats, and this runs for
    every completion."""
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


def _line_entry(text: str) -> TodoEntry | None:
    parsed = parse_todo_text(text, Path("TODO_LIST.md")).entries
    return parsed[0] if parsed else None


class SessionWriter:
    """Applies completions to one session folder; keeps TODO_LIST.md's lines in memory between batches.

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
        self.spares: SpareFiles | None = None  # temp files made ahead, for put

    # -- TODO_LIST.md -----------------------------------------------------------------------------------
    def _todo_lines(self) -> list[str] | None:
        try:
            version = file_version(os.stat(self.todo_path))
        except FileNotFoundError:
            self._lines = None
            return None
        if self._lines is None or self._version != version:
            try:
                text, todo, version = read_todo_file(self.todo_path)  # parsed already when the index read it
            except FileNotFoundError:
                self._lines = None
                return None
            self._lines = text.splitlines(keepends=True)
            self._entries = todo.by_id
            self._index = {task_id: entry.line - 1 for task_id, entry in self._entries.items()}
            self._version = version
        return self._lines

    @property
    def todo_lines(self) -> int:
        """How many lines TODO_LIST.md had when last read or written (0 before that)."""
        return len(self._lines) if self._lines is not None else 0

    def ticked_line(self, task_id: str) -> str | None:
        """The task's TODO line once ticked, or None when the task has no checkbox line (``▸`` containers)."""
        lines = self._todo_lines()
        if lines is None or task_id not in self._index:
            return None
        line = lines[self._index[task_id]]
        entry: TodoEntry | None = self._entries[task_id]
        if entry is None or entry.text != line.rstrip("\r\n"):  # ticked since it was read: parse it again
            entry = _line_entry(line)
        if entry is None or entry.task_id != task_id or entry.is_container:
            return None
        return render_todo_line_completed(entry, summary_href_for(task_id))

    def _todo_update(self, completions: list[Completion]) -> bytes | None:
        lines = self._todo_lines()
        if lines is None:
            return None
        changed = False
        for completion in completions:
            new = self.ticked_line(completion.task_id)
            if new is None:
                continue
            index = self._index[completion.task_id]
            old = lines[index]
            ending = old[len(old.rstrip("\r\n")):]
            if old != new + ending:
                lines[index] = new + ending
                changed = True
        return "".join(lines).encode("utf-8") if changed else None

    # -- task JSON --------------------------------------------------------------------------------------
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
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ReaderError(f"task JSON does not parse: {exc.msg}", path=str(path),
                                  line=exc.lineno) from exc
        history = data.get("status_history")
        history = list(history) if isinstance(history, list) else []
        added = list(completion.history)
        if data.get("status") == "completed" and history[len(history) - len(added):] == added:
            return None
        data["status"] = "completed"
        data["status_history"] = history + added
        return _json_bytes(data, floats=floats)

    # -- all three --------------------------------------------------------------------------------------
    def prepare(self, completions: list[Completion], *, files: bool = True,
                todo: bool = True) -> list[tuple[Path, bytes]]:
        """The files that make every completion true on disk, each changed file once, with their new bytes
        (empty when all of them are on disk already: re-applying is idempotent); ``files``: the task JSONs
        and summaries, ``todo``: TODO_LIST.md. Pass them to :meth:`put` before preparing TODO_LIST.md again:
        its lines are kept in memory between batches."""
        out: list[tuple[Path, bytes]] = []
        try:
            for completion in completions if files else ():
                data = self._task_update(completion)
                if data is not None:
                    out.append((self.session_dir / completion.task_json, data))  # type: ignore[operator]
                summary = self.session_dir / completion.summary_path
                content = completion.summary.encode("utf-8")
                if not summary.is_file() or summary.read_bytes() != content:
                    if summary.parent not in self._folders:  # made once per run, not stat'ed per task
                        summary.parent.mkdir(parents=True, exist_ok=True)
                        self._folders.add(summary.parent)
                    out.append((summary, content))
            ticked = self._todo_update(completions) if todo else None
            if ticked is not None:
                out.append((self.todo_path, ticked))
        except BaseException:
            self._lines = None  # the cache may hold lines that never reached the disk
            raise
        return out

    def put(self, files: list[tuple[Path, bytes]]) -> list[Path]:
        """Replace the files :meth:`prepare` returned, each atomically but not yet durably (:func:`flush_files`
        does that); return their paths. Pure system calls, for a worker thread."""
        try:
            write_files(files, durable=False, spares=self.spares)
        except BaseException:
            self._lines = None
            raise
        if any(path == self.todo_path for path, _ in files):
            self._version = file_version(os.stat(self.todo_path))
        return [path for path, _ in files]

    def write(self, completions: list[Completion]) -> list[Path]:
        """:meth:`prepare` and :meth:`put` in one call."""
        return self.put(self.prepare(completions))

    def apply(self, completions: list[Completion]) -> None:
        """:meth:`write` the completions and make them durable before returning."""
        flush_files(self.write(completions))


# --- the session as a whole ------------------------------------------------------------------------------


def _read_session_file(session_dir: Path) -> dict[str, Any]:
    path = session_dir / SESSION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReaderError(f"{SESSION_FILE} is missing", path=str(path),
                          hint="`stepline ccw check` reports it") from None
    except json.JSONDecodeError as exc:
        raise ReaderError(f"{SESSION_FILE} does not parse: {exc.msg}", path=str(path), line=exc.lineno) from exc
    if not isinstance(data, dict):
        raise ReaderError(f"{SESSION_FILE} must be a JSON object", path=str(path), line=1)
    return data


def mark_session_started(session_dir: Path, now: str) -> None:
    """Set ``status: active`` and, the first time, ``execution_started_at`` in workflow-session.json.

    Replaced atomically but not synced (two fsyncs, a tenth of a short session's start on a slow disk): the
    first flush of completed tasks makes it durable, and every execute, resumed or not, marks it again if a
    power cut lost it.
    """
    data = _read_session_file(session_dir)
    updated = {**data, "status": "active"}
    updated.setdefault("execution_started_at", now)
    if updated != data:
        write_files([(session_dir / SESSION_FILE, _json_bytes(updated))], durable=False)


def remove_stale_temp_files(session_dir: Path) -> None:
    """Delete temp files a killed writer left (``.<name>.<pid>.tmp`` of a process that no longer exists)."""
    for folder in (session_dir, session_dir / ".task", session_dir / ".summaries"):
        try:
            with os.scandir(folder) as entries:  # not glob: this runs at every execute, on big folders too
                names = [entry.name for entry in entries if entry.name[0] == "." and entry.name.endswith(".tmp")]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            pid = name.rsplit(".", 2)[-2]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                (folder / name).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _hours_between(start: object, end: str) -> float | None:
    from datetime import datetime

    if not isinstance(start, str):
        return None
    try:
        delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    except (ValueError, TypeError):
        return None
    return round(delta.total_seconds() / 3600, 2)


def archive_session(session_dir: Path, archives_dir: Path, now: str, *, relative_to: Path | None) -> dict[str, Any]:
    """Mark the session completed, move it into ``archives_dir`` and append its entry to ``manifest.json``.

    Follows ``/workflow:session:complete``: an ``.archiving`` marker first (an interrupted archive is
    finished, not restarted), the session file updated, the folder moved with one rename, the manifest
    entry appended (once: an entry for the same archive path is not added twice), the marker removed.
    ``session_dir`` may already be in ``archives_dir`` when an earlier attempt was interrupted after the move.
    """
    session_id = session_dir.name
    target = archives_dir / session_id
    if session_dir != target and target.exists():
        raise RunStateError(f"{target} already exists; session {session_id} was archived before",
                            hint="move or rename the older archive first")
    (session_dir / ARCHIVING_MARKER).touch()
    data = _read_session_file(session_dir)
    if data.get("status") != "completed":
        data = {**data, "status": "completed", "completed_at": now}
        write_files([(session_dir / SESSION_FILE, _json_bytes(data))])
    tasks = len(list((session_dir / ".task").glob("*.json")))
    summaries = len(list((session_dir / ".summaries").glob("*.md")))
    if session_dir != target:
        archives_dir.mkdir(parents=True, exist_ok=True)
        os.rename(session_dir, target)
    archive_path = target.relative_to(relative_to).as_posix() if relative_to else str(target)
    metrics: dict[str, Any] = {"tasks_completed": tasks, "summaries_generated": summaries}
    hours = _hours_between(data.get("execution_started_at") or data.get("created_at"),
                           str(data.get("completed_at") or now))
    if hours is not None:
        metrics["duration_hours"] = hours
    entry: dict[str, Any] = {"session_id": session_id,
                             "description": str(data.get("description") or data.get("project") or session_id),
                             "archived_at": now, "archive_path": archive_path, "metrics": metrics}
    _append_manifest(archives_dir / "manifest.json", entry)
    (target / ARCHIVING_MARKER).unlink(missing_ok=True)
    return entry


def _append_manifest(path: Path, entry: dict[str, Any]) -> None:
    """Append to a manifest that is a list (CCW 2025-11+) or ``{"archives": [...]}``; once per archive path."""
    try:
        manifest: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        manifest = []
    except json.JSONDecodeError as exc:
        raise ReaderError(f"manifest.json does not parse: {exc.msg}", path=str(path), line=exc.lineno,
                          hint="fix it by hand; the session is already in the archive") from exc
    entries = manifest.get("archives") if isinstance(manifest, dict) else manifest
    if not isinstance(entries, list):
        raise ReaderError("manifest.json is neither a list nor {\"archives\": [...]}", path=str(path), line=1)
    if any(isinstance(old, dict) and old.get("archive_path") == entry["archive_path"] for old in entries):
        return
    entries.append(entry)
    write_files([(path, _json_bytes(manifest))])
