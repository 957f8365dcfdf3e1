"""Atomic JSON snapshots: write to a temporary file, fsync it, rename it over the old one, fsync the folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from stepline.errors import JournalError

__all__ = ["atomic_write_bytes", "atomic_write_json", "read_json"]


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file, never a mix.

    ``durable=False`` skips the two fsyncs (the file's and its folder's), for a file derived from others and
    rebuilt from them: a power cut may then lose the new version, or on some file systems leave it empty.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
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
    if durable:
        fsync_path(path.parent)


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
    """Read JSON from ``path``; ``default`` when it does not exist; :class:`JournalError` when it is damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return default
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise JournalError(f"{path}: not valid JSON ({exc})", hint="restore the file or delete the run") from exc
