"""The journal (torn tails, damage), atomic snapshots, the run lock, run ids."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepline.errors import JournalError, NotFoundError, RunLockedError
from stepline.model import Event
from stepline.store import Journal, RunLock, RunStore, atomic_write_json, new_run_id, read_journal, read_json


def _event(seq: int) -> Event:
    return Event(seq=seq, type="WorkflowStepCompleted", run_id="run-x", time="2026-11-27T10:00:00+00:00",
                 step_id=f"s{seq}")


def test_appended_records_read_back_in_order(tmp_path: Path) -> None:
    """What is appended is read back, in order, with its fields."""
    journal = Journal(tmp_path / "j.jsonl")
    for seq in range(1, 6):
        journal.append(_event(seq), sync=seq % 2 == 0)
    journal.close()
    events = read_journal(tmp_path / "j.jsonl")
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert events[2].step_id == "s3"


def test_a_deferred_record_is_written_with_the_next_one_or_by_a_sync(tmp_path: Path) -> None:
    """``sync="deferred"`` holds a record back until the next append (in order, one write) or a sync."""
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.append(_event(1), sync="deferred")
    assert journal.last_seq == 1
    assert read_journal(path) == []  # not written yet: a crash now loses it, and only it
    journal.append(_event(2), sync=False)
    assert [e.seq for e in read_journal(path)] == [1, 2]
    journal.append(_event(3), sync="deferred")
    journal.sync()
    assert [e.seq for e in read_journal(path)] == [1, 2, 3]
    journal.append(_event(4), sync="deferred")
    journal.append(_event(5), sync="deferred")
    journal.close()
    assert [e.seq for e in read_journal(path)] == [1, 2, 3, 4, 5]


def test_torn_last_line_is_ignored_then_truncated_before_appending(tmp_path: Path) -> None:
    """A crash mid-write leaves a partial last line: readers skip it and the next writer cuts it off."""
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.append(_event(1))
    journal.close()
    whole = _event(2).to_json().encode()
    with path.open("ab") as handle:
        handle.write(whole[: len(whole) // 2])
    assert [e.seq for e in read_journal(path)] == [1]
    reopened = Journal(path)
    assert reopened.last_seq == 1
    reopened.append(_event(2))
    reopened.close()
    assert [e.seq for e in read_journal(path)] == [1, 2]
    assert path.read_bytes().count(b"\n") == 2


def test_damage_before_the_last_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    """Corruption in the middle of the journal is not silently skipped."""
    path = tmp_path / "j.jsonl"
    path.write_text(_event(1).to_json() + "\n{broken\n" + _event(3).to_json() + "\n", encoding="utf-8")
    with pytest.raises(JournalError, match=r"j\.jsonl:2:"):
        read_journal(path)


def test_atomic_write_replaces_whole_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    """A snapshot is either the old or the new document, and no temp file remains."""
    path = tmp_path / "manifest.json"
    atomic_write_json(path, {"v": 1})
    atomic_write_json(path, {"v": 2})
    assert read_json(path) == {"v": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_second_process_gets_a_clear_lock_error_naming_the_holder(tmp_path: Path) -> None:
    """While one process holds a run's lock, another is refused with the holder's pid."""
    lock_path = tmp_path / "lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; from pathlib import Path; from stepline.store import RunLock;"
         f"l=RunLock(Path({str(lock_path)!r}), 'run-x'); l.acquire(); print('ok', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        with pytest.raises(RunLockedError, match=f"driven by process {holder.pid}"):
            RunLock(lock_path, "run-x").acquire()
    finally:
        holder.kill()
        holder.wait()
    lock = RunLock(lock_path, "run-x")
    lock.acquire()  # the kernel released the dead holder's lock
    assert lock_path.read_text() == str(os.getpid())
    lock.release()


def test_run_ids_have_the_documented_shape() -> None:
    """Run ids are run-YYYYmmddHHMMSS-<8 hex>."""
    assert re.fullmatch(r"run-\d{14}-[0-9a-f]{8}", new_run_id())


def test_unknown_run_suggests_a_close_one(tmp_path: Path) -> None:
    """Opening a run that does not exist names it and suggests the closest id."""
    store = RunStore(tmp_path)
    made = store.create("run-20260101000000-abcdef12")
    atomic_write_json(made.path / "manifest.json", {})
    assert store.open("abcdef12").run_id == made.run_id  # a unique part is enough
    with pytest.raises(NotFoundError, match="did you mean run-20260101000000-abcdef12"):
        store.open("run-20260101000000-abcdef13")


def test_the_file_grows_ahead_in_zeros_that_readers_skip_and_closing_cuts_off(tmp_path: Path) -> None:
    """While a run is live (or after a crash) the journal ends in zeros: readers stop at them, a writer
    appends where the records end, and closing leaves exactly the records."""
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    for seq in range(1, 4):
        journal.append(_event(seq))
    assert path.stat().st_size == Journal.GROW_BY  # grown ahead, so a record's sync changes no size
    assert [e.seq for e in read_journal(path)] == [1, 2, 3]
    crashed = path.read_bytes()  # as a killed process leaves it
    journal.close()
    assert path.read_bytes() == crashed.rstrip(b"\0") and path.read_bytes().endswith(b"\n")
    path.write_bytes(crashed + _event(4).to_bytes()[:20])  # a torn record after the zeros is not a record
    reopened = Journal(path)
    assert reopened.last_seq == 3
    reopened.append(_event(4))
    reopened.close()
    assert [e.seq for e in read_journal(path)] == [1, 2, 3, 4]
    assert b"\0" not in path.read_bytes()


def test_a_torn_record_before_the_zeros_is_cut_off(tmp_path: Path) -> None:
    """Killed halfway through a record: the part written, then zeros; the next writer starts over it."""
    path = tmp_path / "j.jsonl"
    whole = _event(2).to_bytes() + b"\n"
    path.write_bytes(_event(1).to_bytes() + b"\n" + whole[: len(whole) // 2] + bytes(4096))
    assert [e.seq for e in read_journal(path)] == [1]
    journal = Journal(path)
    journal.append(_event(2))
    journal.close()
    assert [e.seq for e in read_journal(path)] == [1, 2]


def test_background_appends_move_their_fsync_to_a_helper_process_that_sync_waits_for(tmp_path: Path) -> None:
    """Past ``HELPER_AFTER`` background appends a helper process syncs them; ``sync`` and ``close`` wait for
    it, and it is gone once the journal is closed."""
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    for seq in range(1, Journal.HELPER_AFTER + 1):
        journal.append(_event(seq), sync="background")
    flusher = journal._flusher
    assert flusher is not None
    deadline = time.monotonic() + 30
    while not flusher.ready() and time.monotonic() < deadline:  # records are synced in place meanwhile
        time.sleep(0.01)
    for seq in range(Journal.HELPER_AFTER + 1, Journal.HELPER_AFTER + 11):
        journal.append(_event(seq), sync="background")
    journal.sync()
    assert flusher.durable == journal._written  # the helper answered for every record appended since
    journal.append(_event(Journal.HELPER_AFTER + 11), sync="background")
    journal.close()
    assert flusher._process.returncode == 0
    assert [e.seq for e in read_journal(path)] == list(range(1, Journal.HELPER_AFTER + 12))


def test_a_helper_started_up_front_syncs_the_first_background_append(tmp_path: Path) -> None:
    """``start_helper`` (a long run of pure steps ahead): no waiting for ``HELPER_AFTER`` appends."""
    journal = Journal(tmp_path / "j.jsonl")
    journal.start_helper()
    flusher = journal._flusher
    assert flusher is not None
    deadline = time.monotonic() + 30
    while not flusher.ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    journal.append(_event(1), sync="background")  # the file's first block: its fsync covers the record
    assert journal._requested == 0 and journal._durable == 1
    journal.append(_event(2), sync="background")
    assert journal._requested == 2  # handed to the helper, not synced in place
    journal.close()
    assert flusher.durable == 2
    assert [e.seq for e in read_journal(tmp_path / "j.jsonl")] == [1, 2]


def test_the_helper_syncs_once_per_request_even_when_requests_queue_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each background record gets its own fsync: queued requests are not merged into one."""
    import threading

    from stepline.store import _flusher

    synced: list[int] = []
    monkeypatch.setattr(_flusher, "datasync", lambda fd: synced.append(fd))
    req_r, req_w = os.pipe()
    ack_r, ack_w = os.pipe()
    for count in (1, 2, 3):  # all three waiting before the helper reads the first
        os.write(req_w, _flusher._MESSAGE.pack(count))
    os.close(req_w)
    helper = threading.Thread(target=_flusher._serve, args=(7, req_r, ack_w))
    helper.start()
    helper.join(10)
    answers = os.read(ack_r, 1024)
    for end in (req_r, ack_r, ack_w):
        os.close(end)
    assert synced == [7, 7, 7]
    assert [_flusher._MESSAGE.unpack_from(answers, i)[0] for i in range(0, len(answers), 8)] == [0, 1, 2, 3]


def test_at_most_depth_background_syncs_wait_in_the_helpers_queue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer goes on while the helper syncs, but never more than ``DEPTH`` records ahead of it; before the
    helper says it is ready, records are synced in place."""
    from stepline.store import _journal

    class SlowHelper:
        """Answers a request only when the writer waits for it."""

        def __init__(self) -> None:
            self.durable = 0
            self.requested: list[int] = []
            self.most_unanswered = 0
            self.started = False

        def ready(self) -> bool:
            return self.started

        def request(self, count: int) -> None:
            self.requested.append(count)
            self.most_unanswered = max(self.most_unanswered, sum(c > self.durable for c in self.requested))

        def wait(self, count: int) -> None:
            self.durable = max(self.durable, count)

        def close(self) -> None:
            pass

    helper = SlowHelper()
    monkeypatch.setattr(_journal.Flusher, "start", classmethod(lambda cls, fd: helper))
    journal = Journal(tmp_path / "j.jsonl")
    for seq in range(1, Journal.HELPER_AFTER + 5):
        journal.append(_event(seq), sync="background")
    assert helper.requested == [] and journal._durable == journal._written  # not ready: synced in place
    helper.started = True
    for seq in range(Journal.HELPER_AFTER + 5, Journal.HELPER_AFTER + 25):
        journal.append(_event(seq), sync="background")
    assert helper.most_unanswered == Journal.DEPTH
    journal.sync()
    assert helper.durable == journal._written == Journal.HELPER_AFTER + 24
    journal.close()


def test_a_failing_fsync_in_the_helper_is_an_error_in_the_writer() -> None:
    """fsync on a pipe fails (EINVAL): the helper reports it rather than pretending the data is durable."""
    from stepline.store._flusher import Flusher

    read_end, write_end = os.pipe()
    flusher = Flusher.start(write_end)
    assert flusher is not None
    try:
        flusher.request(1)
        with pytest.raises(OSError, match="Invalid argument"):
            flusher.wait(1)
    finally:
        flusher.close()
        os.close(read_end)
        os.close(write_end)


def test_the_helper_exits_when_its_writer_is_killed(tmp_path: Path) -> None:
    """SIGKILL the process that drives a journal: its helper sees the pipe close and exits by itself."""
    code = (
        "import os, signal, sys\nfrom pathlib import Path\n"
        "from stepline.model import Event\n"
        "from stepline.store import Journal\n"
        f"journal = Journal(Path({str(tmp_path / 'j.jsonl')!r}))\n"
        "for seq in range(1, Journal.HELPER_AFTER + 3):\n"
        "    journal.append(Event(seq=seq, type='StepRetry', run_id='r', time='2026-11-27T10:00:00+00:00'),\n"
        "                   sync='background')\n"
        "print(journal._flusher._process.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert child.returncode == -9, child.stderr
    helper = int(child.stdout.strip())
    deadline = time.monotonic() + 30
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper)
    assert len(read_journal(tmp_path / "j.jsonl")) == Journal.HELPER_AFTER + 2


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited (its parent just never reaped it)


def test_a_journal_whose_helper_was_killed_syncs_in_place_and_loses_nothing(tmp_path: Path) -> None:
    """The helper killed from outside (OOM killer, a stray kill): appends go on, synced by the writer."""
    import signal

    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    total = Journal.HELPER_AFTER + 5
    for seq in range(1, total + 1):
        journal.append(_event(seq), sync="background")
    flusher = journal._flusher
    assert flusher is not None
    os.kill(flusher._process.pid, signal.SIGKILL)
    flusher._process.wait()
    for seq in range(total + 1, total + 6):
        journal.append(_event(seq), sync="background")
    assert journal._flusher is None  # noticed, and syncing in place now
    journal.append(_event(total + 6))
    journal.close()
    assert [e.seq for e in read_journal(path)] == list(range(1, total + 7))


def test_a_helper_found_dead_while_its_queue_is_full_is_never_written_to_again(tmp_path: Path) -> None:
    """The writer waits for the oldest queued sync and finds the helper dead (killed before it answered): from
    that append on it syncs in place. It used to go on to write its request to the closed pipe (EBADF, or
    8 bytes into whichever file had been given the descriptor's number since)."""
    import signal

    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.start_helper()
    flusher = journal._flusher
    assert flusher is not None
    deadline = time.monotonic() + 30
    while not flusher.ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    journal.append(_event(1), sync="background")  # the first block's fsync covers it
    os.kill(flusher._process.pid, signal.SIGSTOP)  # it reads no request from here on
    for seq in range(2, 2 + Journal.DEPTH):
        journal.append(_event(seq), sync="background")
    assert len(journal._in_flight) == Journal.DEPTH  # the queue is full, none of it answered
    os.kill(flusher._process.pid, signal.SIGKILL)
    flusher._process.wait()
    journal.append(_event(2 + Journal.DEPTH), sync="background")  # waits for the oldest: the helper is gone
    assert journal._flusher is None and journal._durable == journal._written
    with pytest.raises(OSError, match="stopped"):
        flusher.request(99)  # a closed helper's pipe is never written to
    journal.append(_event(3 + Journal.DEPTH), sync="background")
    journal.close()
    assert [e.seq for e in read_journal(path)] == list(range(1, 4 + Journal.DEPTH))
