"""Atomic JSON snapshots: write to a temporary file, fsync it, rename it over the old one, fsync the folder."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

import orjson

from stepline.errors import JournalError, StorageError

__all__ = ["atomic_write_bytes", "atomic_write_json", "read_json", "stale_temp_files", "sweep_temp_files"]


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file, never a mix.

    ``durable=False`` skips the two fsyncs (the file's and its folder's), for a file derived from others and
    rebuilt from them: a power cut may then lose the new version, or on some file systems leave it empty.

    The temporary file (``.<name>.<pid>.tmp`` beside ``path``) is removed when anything fails; a failure of the
    disk (full, read-only) is a :class:`StorageError` naming ``path`` and the cause, and leaves the old file.
    Only a killed process leaves its temporary file behind: :func:`sweep_temp_files` removes those.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise StorageError.from_os(exc, path) from exc
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise StorageError.from_os(exc, path) from exc
        raise
    if durable:
        try:
            fsync_path(path.parent)
        except OSError as exc:
            raise StorageError.from_os(exc, path) from exc


_TEMP = re.compile(r"^\..+\.(\d+)\.tmp$")


def sweep_temp_files(folder: Path, *, any_pid: bool = False) -> list[Path]:
    """Remove the temporary files (``.<name>.<pid>.tmp``) that killed writers left in ``folder``; return them.

    A file is left by a dead process, or, with ``any_pid`` (the caller holds the lock of the run ``folder``
    is, so no other process writes there), by any process but this one. Files that cannot be removed (a
    read-only disk) stay, and are not returned.
    """
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        found = _TEMP.match(name)
        if found is None:
            continue
        pid = int(found[1])
        if pid == os.getpid() or (not any_pid and _alive(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(folder / name)
            removed.append(folder / name)
    return removed


def stale_temp_files(folder: Path) -> list[Path]:
    """The temporary files in ``folder`` whose writer is gone (what :func:`sweep_temp_files` would remove)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [folder / name for name in sorted(names)
            if (found := _TEMP.match(name)) is not None and not _alive(int(found[1]))]


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def fsync_path(path: Path) -> None:
    """fsync a file or a folder by its path (a folder: so that the names in it are durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: Path, value: Any, *, indent: bool = True, durable: bool = True) -> None:
    """Write ``value`` as JSON atomically, indented by two spaces unless ``indent`` is false (large documents);
    ``durable`` as for :func:`atomic_write_bytes`."""
    option = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE | (orjson.OPT_INDENT_2 if indent else 0)
    atomic_write_bytes(path, orjson.dumps(value, default=str, option=option), durable=durable)


def read_json(path: Path, default: Any = None) -> Any:
    """Read JSON from ``path``; ``default`` when it does not exist; :class:`JournalError` when it is damaged
    (or is not a file that can be read)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return default
    except OSError as exc:
        raise JournalError(f"cannot be read ({exc.strerror or exc})", path=str(path),
                           hint="restore the file or delete the run") from exc
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise JournalError(f"not valid JSON ({exc})", path=str(path),
                           hint="restore the file or delete the run") from exc


#: The folder of a project that holds stepline's own state (runs, the sprint loop's, the dashboard's token).
STATE_FOLDER = ".stepline"


def state_folder(path: Path) -> Path | None:
    """Make git ignore the ``.stepline`` folder ``path`` lies in (``path`` itself or an ancestor): a ``.gitignore``
    holding ``*``, written when it is missing, so ``git status`` never lists stepline's state. A storage root
    the user put elsewhere is theirs to commit or ignore: None, nothing written."""
    folder = next((p for p in (path, *path.parents) if p.name == STATE_FOLDER), None)
    if folder is None:
        return None
    ignore = folder / ".gitignore"
    if not ignore.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with ignore.open("x", encoding="utf-8") as file:
                file.write("# stepline's run state: never committed\n*\n")
        except FileExistsError:
            pass  # another process wrote it first
        except OSError as exc:
            raise StorageError.from_os(exc, ignore, "create") from exc
    return folder
