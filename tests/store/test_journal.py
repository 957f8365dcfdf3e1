"""The journal (torn tails, damage), atomic snapshots, the run lock, run ids."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def test_zeros_after_the_records_are_read_past_and_cut_off(tmp_path: Path) -> None:
    """A journal written by an older version, which grew its file ahead in zeros, and was killed: readers stop
    at the zeros, and the next writer cuts them off (a torn record after them is not a record either)."""
    path = tmp_path / "j.jsonl"
    records = b"".join(_event(seq).to_bytes() + b"\n" for seq in range(1, 4))
    path.write_bytes(records + bytes(4096) + _event(4).to_bytes()[:20])
    assert [e.seq for e in read_journal(path)] == [1, 2, 3]
    reopened = Journal(path)
    assert reopened.last_seq == 3
    reopened.append(_event(4))
    reopened.close()
    assert [e.seq for e in read_journal(path)] == [1, 2, 3, 4]
    assert b"\0" not in path.read_bytes()


def test_a_synced_append_is_fsynced_before_append_returns_and_an_unsynced_one_by_the_next_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sync=True`` syncs at once; ``sync=False`` records wait for the next sync, which covers them all."""
    from stepline.store import _journal

    synced: list[int] = []
    real = _journal.datasync
    monkeypatch.setattr(_journal, "datasync", lambda fd: (synced.append(len(read_journal(path))), real(fd)))
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.append(_event(1))
    assert synced == [1]
    journal.append(_event(2), sync=False)
    journal.append(_event(3), sync=False)
    assert synced == [1]
    journal.sync()
    assert synced == [1, 3]
    journal.sync()  # nothing new: no second fsync
    journal.close()
    assert synced == [1, 3]


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
