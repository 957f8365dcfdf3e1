"""Following a journal as another process appends to it: only the bytes after the last complete record are read.

The journal's writer may be in the middle of a line (and an older version's grew the file ahead in zeros), so
a read takes the complete lines only (up to the last newline) and keeps its offset there; the rest (a line
being written, the zeros) is read again next time, once the file's size or modification time says it changed. The
reader never takes the run's lock and never writes.

Each line is checked as :func:`stepline.store.read_journal` checks it (the model of a record, ``seq`` one more
than the last, the run's own id); a journal that got shorter than what was read (cut back by ``stepline doctor
--truncate-to-last-good``) or a damaged record ends the tail with :class:`TailReset` or a :class:`JournalError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from stepline.errors import JournalError
from stepline.model import Event

__all__ = ["JournalTail", "TailReset"]


class TailReset(Exception):
    """The journal is no longer a continuation of what was read (it was cut back or replaced)."""


@dataclass
class JournalTail:
    """The new records of one journal, read from the byte offset where the last read stopped."""

    path: Path
    run_id: str
    #: Byte offset just after the last complete line read.
    offset: int = 0
    #: ``seq`` of the last record read.
    last_seq: int = 0
    _seen: tuple[int, int] | None = field(default=None, repr=False)

    def read_new(self) -> list[Event]:
        """The records appended since the last call (none when the file has not changed since).

        Raises:
            TailReset: the file is shorter than the offset already read, or its first new record does not
                follow the last one read.
            JournalError: a new record is damaged (naming the line).
        """
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            if self.offset:
                raise TailReset(f"{self.path} is gone") from None
            return []
        seen = (stat.st_size, stat.st_mtime_ns)
        if seen == self._seen:
            return []
        if stat.st_size < self.offset:
            raise TailReset(f"{self.path} is shorter than what was read")
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n")
        events: list[Event] = []
        if end >= 0:
            for line in data[: end + 1].splitlines():
                events.append(self._check(line))
                self.offset += len(line) + 1
        self._seen = seen
        return events

    def _check(self, line: bytes) -> Event:
        where = f"{self.path}: record after seq {self.last_seq}"
        try:
            event = Event.from_dict(orjson.loads(line))
        except (orjson.JSONDecodeError, ValueError) as exc:
            if not line.strip(b"\0 \t\r"):
                raise TailReset(f"{where} is blank") from None
            raise JournalError(f"bad record: {exc}", path=str(self.path),
                               hint=f"`stepline doctor {self.run_id}` explains it") from None
        if event.seq != self.last_seq + 1:
            raise TailReset(f"{where} has seq {event.seq}")
        if event.run_id != self.run_id:
            raise JournalError(f"seq {event.seq} is a record of run {event.run_id!r}", path=str(self.path),
                               hint=f"`stepline doctor {self.run_id}` explains it")
        self.last_seq = event.seq
        return event
