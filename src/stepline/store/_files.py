"""Atomic JSON snapshots: write to a temporary file, fsync it, rename it over the old one, fsync the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stepline.errors import JournalError

__all__ = ["atomic_write_bytes", "atomic_write_json", "read_json"]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_json(path: Path, value: Any, *, indent: int | None = 2) -> None:
    """Write ``value`` as JSON atomically (``indent=None`` uses the C encoder: for large documents)."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def read_json(path: Path, default: Any = None) -> Any:
    """Read JSON from ``path``; ``default`` when it does not exist; :class:`JournalError` when it is damaged."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise JournalError(f"{path}: not valid JSON ({exc})", hint="restore the file or delete the run") from exc
