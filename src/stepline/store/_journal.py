"""The append-only event journal of a run: one JSON line per record, fsync'd when it must be durable.

Write-ahead rule: a record is made durable before anything that depends on it becomes visible outside the
process — a file written for a step, a tool run, a call to a model, a snapshot, the end of a run. Records that
only describe work done inside the process may be appended without their own sync; the write has already
handed them to the kernel, so a killed process loses none of them, and the next sync makes them durable
against power loss too. :class:`Journal` says how each kind of append is made durable.

A crash in the middle of a write leaves at most one torn line at the end (journals of older versions, grown
ahead in zeros, may also end in zeros). :func:`read_journal` stops there and :class:`Journal` cuts it away
before appending, so the journal always parses. Every other line is checked as it is read
(:mod:`stepline.store._scan`): damage is a :class:`JournalError` naming the file and the line.

A write or sync that fails (a full or read-only disk, an I/O error) is a :class:`StorageError` naming the file,
and the journal refuses every later write: what is on disk stays a whole prefix of the run, with no gap.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Literal

from stepline.errors import JournalError, StorageError
from stepline.model import Event
from stepline.store._scan import scan_journal

__all__ = ["Durability", "Journal", "datasync", "read_journal"]

#: How durable an appended record is when :meth:`Journal.append` returns (see :class:`Journal`).
Durability = bool | Literal["deferred"]


def datasync(fd: int) -> None:
    """``fdatasync`` where the platform has it, else ``fsync``."""
    getattr(os, "fdatasync", os.fsync)(fd)


def _scan(data: bytes, path: Path, run_id: str | None = None) -> tuple[list[Event], int]:
    """Check journal bytes; return the records and the byte length of the intact prefix (a torn tail left out).

    Raises:
        JournalError: a line before the tail is damaged (not JSON, not a record, a gap in seq, another run's).
    """
    scan = scan_journal(data, run_id)
    if scan.problem is not None:
        raise JournalError(scan.problem, path=str(path), line=scan.line, hint=_hint(run_id))
    return scan.events, scan.good


def _hint(run_id: str | None) -> str:
    return f"`stepline doctor {run_id or 'RUN'}` explains it and what can be saved"


def read_journal(path: Path, run_id: str | None = None) -> list[Event]:
    """Read every record of the journal at ``path``, each checked (a torn last line is ignored); ``run_id``:
    the run each record must belong to. A missing file has no records."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise JournalError(f"cannot be read ({exc.strerror or exc})", path=str(path), hint=_hint(run_id)) from exc
    return _scan(data, path, run_id)[0]


class Journal:
    """An open journal for appending; the caller holds the run lock, so one writer at a time.

    Three strengths of append, by what the record guards:

    - ``sync=True``: on disk when :meth:`append` returns (an intent just before its effect, a step's
      completion, the end of a run).
    - ``sync=False``: written, and made durable by whichever sync comes next.
    - ``sync="deferred"``: not even written until the next append or sync, which write it first (one write
      where there would be two). For a record whose loss in a crash loses nothing: a step's start, which
      anything the step does outside the process is preceded by a sync of.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._failed: OSError | None = None  # a write or sync failed: no later one is tried (see _fail)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise StorageError.from_os(exc, path, "open") from exc
        self._end = 0  # where the records end
        self._unsynced = False  # records written since the last sync
        self._deferred: list[bytes] = []  # records not yet written (sync="deferred")
        self._repair_tail()

    def _repair_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        data = self.path.read_bytes()
        records, good = _scan(data, self.path)
        self.last_seq = records[-1].seq if records else 0
        self._end = good
        if good != size:  # a torn record (or an older version's zeros) after the last whole one
            try:
                os.ftruncate(self._fd, good)
                os.fsync(self._fd)
            except OSError as exc:
                os.close(self._fd)
                raise StorageError.from_os(exc, self.path) from exc

    last_seq: int = 0

    def append(self, event: Event, *, sync: Durability = True, line: bytes | None = None) -> None:
        """Append ``event`` as one line (``line``: its JSON bytes, when the caller has them); ``sync`` says how
        durable it is when this returns (see the class)."""
        data = (line or event.to_bytes()) + b"\n"
        self.last_seq = event.seq
        if sync == "deferred":
            self._deferred.append(data)
            return
        self._write(data)
        if sync:
            self.sync()

    def _write(self, data: bytes) -> None:
        """Write ``data`` (one record, after any deferred ones) at the end of the file."""
        if self._failed is not None:
            raise self._fail(self._failed)
        if self._deferred:
            data = b"".join((*self._deferred, data))
            self._deferred.clear()
        view = memoryview(data)
        try:
            while view:  # a write may be short when the disk fills: the next one says why
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            with contextlib.suppress(OSError):  # give back what a full disk let it have: no torn record left
                os.ftruncate(self._fd, self._end)
            raise self._fail(exc) from exc
        self._end += len(data)
        self._unsynced = True

    def _fail(self, exc: OSError) -> StorageError:
        """Remember that a write or sync failed, and say so. No later write is tried: one that fitted after a
        lost one would leave a gap in the journal (a lost deferred record, say). What is on disk up to the last
        whole record stays a run that can be resumed; a record written in part is a torn tail, cut off then."""
        self._failed = exc
        self._deferred.clear()
        return StorageError.from_os(exc, self.path)

    def sync(self) -> None:
        """Make every appended record durable."""
        if self._failed is not None:
            raise self._fail(self._failed)
        if self._deferred:
            self._write(self._deferred.pop())
        if not self._unsynced:
            return
        try:
            datasync(self._fd)
        except OSError as exc:
            raise self._fail(exc) from exc
        self._unsynced = False

    def forget_deferred(self) -> None:
        """Drop the records not written yet (``sync="deferred"``): :meth:`close` will not write them."""
        self._deferred.clear()

    def close(self) -> None:
        """Sync and close the file (closed even when the sync fails, which is then raised)."""
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = -1
