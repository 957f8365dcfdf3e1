"""Reading a journal's bytes: every line checked as it is read, the one torn tail a crash may leave set apart.

A journal is one JSON object per line (:meth:`stepline.model.Event.from_dict` is the model of a line), ``seq``
1, 2, 3 … with no gap, every record of its own run, its ``time`` an ISO 8601 time. A crash in the middle of an
append leaves at most one torn line at the end, perhaps followed by the zeros the file was grown by (see
:mod:`stepline.store._journal`): that tail is not damage, it is set apart (:attr:`JournalScan.tail`) and cut
off by the next writer. Anything else that is wrong is damage, reported as the first line where it is seen
(:attr:`JournalScan.problem`); the records before it are :attr:`JournalScan.events`, the last good state of
the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import orjson

from stepline.model import Event

__all__ = ["JournalScan", "json_problem", "scan_journal"]


@dataclass(slots=True)
class JournalScan:
    """What a journal's bytes hold."""

    #: The good records, in order: every line before the first damaged one.
    events: list[Event] = field(default_factory=list)
    #: Byte length of the good records (up to the newline of the last one).
    good: int = 0
    #: What is wrong at :attr:`line` (1-based), or None when the journal is whole.
    problem: str | None = None
    line: int | None = None
    #: Complete lines from the damaged one to the end of the file (the damaged one included).
    lines_after: int = 0
    #: Bytes after the last complete line (a torn record and/or the zeros the file was grown by): ignored by
    #: readers and cut off by the next writer. Never counted when there is a problem.
    tail: int = 0
    #: Whether :attr:`tail` holds anything but zeros (a record a crash tore).
    torn: bool = False


def scan_journal(data: bytes, run_id: str | None = None) -> JournalScan:
    """Check a journal's bytes line by line; ``run_id``: the run every record must belong to (None: any one)."""
    scan = JournalScan()
    events = scan.events
    start = 0
    size = len(data)
    while start < size:
        end = data.find(b"\n", start)
        if end == -1:  # no newline: the last write was cut short (or these are the zeros the file grew by)
            break
        line = data[start:end]
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if data.find(b"\n", end + 1) == -1 and not data[end + 1:].strip(b" \t\r\n\0"):
                break  # the very last line is torn although its newline made it: treat as torn
            return _damaged(scan, data, start, f"not valid JSON ({json_problem(exc)})", record=False)
        try:
            event = Event.from_dict(raw)
        except ValueError as exc:
            return _damaged(scan, data, start, str(exc))
        if not _is_time(event.time):
            return _damaged(scan, data, start, f"time is {event.time[:40]!r}, not an ISO 8601 time with its offset")
        expected = len(events) + 1
        if event.seq != expected:
            what = ("a record is missing before it" if event.seq > expected else
                    "a record is repeated or out of order")
            return _damaged(scan, data, start, f"seq {event.seq} where {expected} was expected ({what})")
        if run_id is not None and event.run_id != run_id:
            return _damaged(scan, data, start, f"run_id is {event.run_id!r}: a record of another run, not of {run_id}")
        events.append(event)
        start = end + 1
    scan.good = start
    scan.tail = size - start
    scan.torn = bool(data[start:].strip(b"\0"))
    return scan


def _is_time(text: str) -> bool:
    """Whether ``text`` is a time as :mod:`stepline.time` writes it (ISO 8601, with its UTC offset)."""
    try:
        return datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


def json_problem(exc: orjson.JSONDecodeError) -> str:
    """What the JSON parser found wrong, and at which column (the caller names the file and the line)."""
    return f"{exc.msg} at column {exc.colno}"


def _damaged(scan: JournalScan, data: bytes, start: int, problem: str, *, record: bool = True) -> JournalScan:
    scan.good = start
    scan.problem = f"bad record: {problem}" if record else problem
    scan.line = len(scan.events) + 1
    scan.lines_after = data.count(b"\n", start)
    return scan
