"""The append-only event journal of a run: one JSON line per record, fsync'd when it must be durable.

Write-ahead rule: a record is made durable before anything that depends on it becomes visible outside the
process — a file written for a step, a tool run, a call to a model, a snapshot, the end of a run. Records that
only describe work done inside the process may be appended without their own sync; the write has already
handed them to the kernel, so a killed process loses none of them, and the next sync makes them durable
against power loss too. :class:`Journal` says how each kind of append is made durable.

A crash in the middle of a write leaves at most one torn line at the end, perhaps followed by the zeros the
file was grown by. :func:`read_journal` stops there and :class:`Journal` cuts it away before appending, so
the journal always parses. Every other line is checked as it is read (:mod:`stepline.store._scan`): damage is a
:class:`JournalError` naming the file and the line.

A write or sync that fails (a full or read-only disk, an I/O error) is a :class:`StorageError` naming the file,
and the journal refuses every later write: what is on disk stays a whole prefix of the run, with no gap.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from pathlib import Path
from typing import Literal

from stepline.errors import JournalError, StorageError
from stepline.model import Event
from stepline.store._flusher import Flusher, HelperGone, datasync
from stepline.store._scan import scan_journal

__all__ = ["Durability", "Journal", "read_journal"]

#: How durable an appended record is when :meth:`Journal.append` returns (see :class:`Journal`).
Durability = bool | Literal["background", "deferred"]


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


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """``pwrite`` all of ``data`` (a write may be short when the disk fills: the next one says why)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


class Journal:
    """An open journal for appending; the caller holds the run lock, so one writer at a time.

    Four strengths of append, by what the record guards:

    - ``sync=True``: on disk when :meth:`append` returns (an intent, just before its effect).
    - ``sync="background"``: a state change nothing outside the process depends on yet (a pure step's
      completion). Once a run is long enough to repay it, the record's fsync runs in a helper process
      (:class:`Flusher`) while the caller goes on with in-process work. Every such record still gets an
      fsync of its own, at most :attr:`DEPTH` of them wait in the helper's queue, and :meth:`sync`, which
      every effect, snapshot and the end of a run goes through, waits for them all: nothing outside the
      process gets ahead of the journal. A pure step's completion lost in a crash means the step runs again.
    - ``sync=False``: made durable by whichever fsync comes next.
    - ``sync="deferred"``: not even written until the next append or sync, which write it first (one write
      where there would be two). For a record whose loss in a crash loses nothing: a step's start, which
      anything the step does outside the process is preceded by a sync of.

    The file is grown ahead of the records in zero-filled blocks (as a database's write-ahead log is), so a
    record's sync is an ``fdatasync`` of data only: no change of size for the filesystem to journal, which
    makes it about a third cheaper. Closing cuts the zeros off again; readers stop at them in a live or
    crashed run.
    """

    #: Background appends fsync'd in place before the helper process is started (about a millisecond, then
    #: its own start-up, during which records go on being synced in place).
    HELPER_AFTER = 16
    #: Background syncs the helper may have queued. Two, so that the helper finds the next request waiting when
    #: it finishes a sync, instead of the writer and the helper each waking the other once per record (about
    #: 80 µs a record on a VM). Each record still gets its own fsync.
    DEPTH = 2
    #: How far ahead of the records the file is grown (zero-filled, then fsync'd with its new size).
    GROW_BY = 256 * 1024

    def __init__(self, path: Path) -> None:
        self.path = path
        self._failed: OSError | None = None  # a write or sync failed: no later one is tried (see _fail)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError.from_os(exc, path, "open") from exc
        self._end = 0  # where the next record goes; the file is zeros from here to its size
        self._size = 0
        self._written = 0  # records handed to the kernel
        self._durable = 0  # how many of them are known to be on disk
        self._requested = 0  # how many the helper was last asked to make durable
        self._in_flight: deque[int] = deque()  # the record counts of the helper's unanswered requests
        self._background = 0
        self._flusher: Flusher | None = None
        self._deferred: list[bytes] = []  # records not yet written (sync="deferred")
        self._grow_by = self.GROW_BY  # 0 once the disk had no room for a block (see _grow)
        self._repair_tail()

    def _repair_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        data = os.pread(self._fd, size, 0)
        records, good = _scan(data, self.path)
        self.last_seq = records[-1].seq if records else 0
        self._end = self._size = good
        if good != size:  # a torn record, or the zeros a crash left ahead of the records
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
        flusher = self._flusher if sync == "background" else None
        if flusher is not None and not flusher.ready():
            flusher = None  # still starting up: sync in place meanwhile
        if flusher is not None and len(self._in_flight) == self.DEPTH:
            self._await_helper(self._in_flight.popleft())
        self._write(data)
        if flusher is not self._flusher:  # waiting for it (its queue was full, or the file grew) found it gone
            flusher = None
        if self._durable < self._written:  # else the fsync of a new block covered it
            if flusher is not None:
                self._requested = self._written
                self._in_flight.append(self._written)
                try:
                    flusher.request(self._written)
                except HelperGone:
                    self._lose_helper()
            elif sync:
                self.sync()
        if sync == "background" and self._flusher is None:
            self._background += 1
            if self._background == self.HELPER_AFTER:
                self.start_helper()

    def start_helper(self) -> None:
        """Start the sync helper now, when the caller knows many background appends are coming (a long run
        of pure steps): its start-up then overlaps the caller's own. Otherwise it starts by itself after
        :attr:`HELPER_AFTER` of them."""
        if self._flusher is None:
            self._flusher = Flusher.start(self._fd)

    def _write(self, data: bytes) -> None:
        """Write ``data`` (one record, after any deferred ones) where the records end."""
        if self._failed is not None:
            raise self._fail(self._failed)
        records = 1
        if self._deferred:
            records += len(self._deferred)
            data = b"".join((*self._deferred, data))
            self._deferred.clear()
        grow = self._end + len(data) > self._size
        try:
            if grow:
                self._grow(len(data))
            _pwrite_all(self._fd, data, self._end)
            self._end += len(data)
            self._written += records
            if grow:
                os.fsync(self._fd)  # the size changed: a full fsync, once per block, which covers the records too
                self._durable = self._written
        except OSError as exc:
            raise self._fail(exc) from exc

    def _fail(self, exc: OSError) -> StorageError:
        """Remember that a write or sync failed, and say so. No later write is tried: one that fitted after a
        lost one would leave a gap in the journal (a lost deferred record, say). What is on disk up to the last
        whole record stays a run that can be resumed; a record written in part is a torn tail, cut off then."""
        self._failed = exc
        self._deferred.clear()
        return StorageError.from_os(exc, self.path)

    def _grow(self, need: int) -> None:
        """Extend the file with zeros (the caller fsyncs the new size), so later syncs are data-only. On a disk
        too full for a whole block, by what the records need (each record's sync then also syncs the size)."""
        if self._flusher is not None:
            self._await_helper(self._requested)
        grow = max(self._grow_by, need)
        try:
            _pwrite_all(self._fd, bytes(grow), self._size)
        except OSError as exc:
            with contextlib.suppress(OSError):  # give back what a full disk let it have
                os.ftruncate(self._fd, self._size)
            if grow == need or exc.errno not in StorageError.REFUSALS:
                raise
            self._grow_by = 0  # the records may still fit where a block does not: no block from now on
            self._grow(need)
            return
        self._size += grow

    def sync(self) -> None:
        """Make every appended record durable."""
        if self._failed is not None:
            raise self._fail(self._failed)
        if self._deferred:
            last = self._deferred.pop()
            self._write(last)
        target = self._written
        if self._durable >= target:
            return
        try:
            if self._flusher is not None and self._requested >= target:  # the helper's sync covers them
                self._await_helper(target)
            else:
                datasync(self._fd)
        except OSError as exc:
            raise self._fail(exc) from exc
        self._durable = target

    def forget_deferred(self) -> None:
        """Drop the records not written yet (``sync="deferred"``): :meth:`close` will not write them."""
        self._deferred.clear()

    def _await_helper(self, count: int) -> None:
        assert self._flusher is not None
        try:
            self._flusher.wait(count)
        except HelperGone:
            self._lose_helper()

    def _lose_helper(self) -> None:
        """The helper died under us (it is never stopped but by :meth:`close`): sync here from now on."""
        assert self._flusher is not None
        flusher, self._flusher = self._flusher, None
        self._in_flight.clear()
        flusher.close()
        datasync(self._fd)  # covers whatever the helper was asked for and may not have synced
        self._durable = self._written

    def close(self) -> None:
        """Sync, cut the zeros off and close the file (closed even when the sync fails, which is then raised)."""
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                if self._flusher is not None:
                    self._flusher.close()
                    self._flusher = None
                if self._size != self._end:
                    # Not synced: the records are, and zeros left after them by a crash are read past and cut off.
                    with contextlib.suppress(OSError):  # a disk that refuses: the zeros stay, read past
                        os.ftruncate(self._fd, self._end)
                os.close(self._fd)
                self._fd = -1
