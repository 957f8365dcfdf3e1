"""The append-only event journal of a run: one JSON line per record, fsync'd when it must be durable.

Write-ahead rule: a record is made durable (``sync=True``) before anything that depends on it becomes
visible outside the process — a file written for a step, a tool run, a call to a model. Records that only
describe work done inside the process may be appended without their own fsync; ``os.write`` has already
handed them to the kernel, so a killed process loses none of them, and the next synced append makes them
durable against power loss too.

A crash in the middle of ``os.write`` leaves at most one torn line at the end. :func:`read_journal` ignores
it and :class:`Journal` truncates it away before appending, so the journal always parses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from stepline.errors import JournalError
from stepline.model import Event

__all__ = ["Journal", "read_journal"]


def _scan(data: bytes, path: Path) -> tuple[list[dict[str, Any]], int]:
    """Decode journal bytes; return the records and the byte length of the intact prefix."""
    records: list[dict[str, Any]] = []
    good = 0
    start = 0
    lineno = 0
    size = len(data)
    while start < size:
        end = data.find(b"\n", start)
        lineno += 1
        if end == -1:  # no newline: the last write was cut short
            break
        line = data[start:end]
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            if data.find(b"\n", end + 1) == -1 and not data[end + 1:].strip():
                break  # the very last line is torn although its newline made it: treat as torn
            raise JournalError(f"{path}:{lineno}: journal record is not valid JSON ({exc})",
                               hint="the run directory was edited or damaged; restore it from a backup") from exc
        start = end + 1
        good = start
    return records, good


def read_journal(path: Path) -> list[Event]:
    """Read every intact record of the journal at ``path`` (a torn last line is ignored)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records, _ = _scan(data, path)
    return [Event.from_dict(raw) for raw in records]


class Journal:
    """An open journal for appending; the caller holds the run lock, so one writer at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._dirty = False
        self._repair_tail()

    def _repair_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        data = os.pread(self._fd, size, 0)
        records, good = _scan(data, self.path)
        self.last_seq = int(records[-1]["seq"]) if records else 0
        if good != size:
            os.ftruncate(self._fd, good)
            os.fsync(self._fd)

    last_seq: int = 0

    def append(self, event: Event, *, sync: bool = True, line: bytes | None = None) -> None:
        """Append ``event`` as one line (``line``: its JSON bytes, when the caller has them); with ``sync`` it is
        on disk when this returns."""
        os.write(self._fd, (line or event.to_bytes()) + b"\n")
        self.last_seq = event.seq
        if sync:
            os.fsync(self._fd)
            self._dirty = False
        else:
            self._dirty = True

    def sync(self) -> None:
        """Make every appended record durable."""
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        """Sync and close the file."""
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1
