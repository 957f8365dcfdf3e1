"""Following a journal live: the tail reads only new bytes; `stepline serve` streams a run another process
drives (server-sent events), prints its token once and keeps it in a 0600 file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from stepline.interfaces.web._tail import JournalTail, TailReset
from stepline.model import Event
from web.dashboard_project import Server, stepline_command, write_slow_workflow


def _line(seq: int, kind: str = "WorkflowStepStarted", run_id: str = "run-1") -> bytes:
    return Event(seq=seq, type=kind, run_id=run_id, time="2026-01-01T00:00:00+00:00", step_id="s").to_bytes() + b"\n"


class CountingTail(JournalTail):
    """A tail that counts the bytes it reads."""

    read_bytes = 0

    def read_new(self) -> list[Event]:
        before = self.offset
        events = super().read_new()
        self.read_bytes += self.offset - before
        return events


def test_the_tail_reads_only_complete_new_records(tmp_path: Path) -> None:
    """Complete lines only (a line being written and the zeros the journal grows by wait); then only what was
    appended; an unchanged file is not read; a journal cut back is a reset."""
    path = tmp_path / "journal.jsonl"
    first, second, third = _line(1), _line(2), _line(3, "WorkflowStepCompleted")
    path.write_bytes(first + second[:10])
    with open(path, "r+b") as handle:  # grown ahead in zeros, as the journal's writer does
        handle.truncate(4096)
    tail = JournalTail(path, "run-1")
    assert [e.seq for e in tail.read_new()] == [1] and tail.offset == len(first)
    assert tail.read_new() == []
    with open(path, "r+b") as handle:
        handle.seek(len(first))
        handle.write(second + third)
    assert [e.seq for e in tail.read_new()] == [2, 3]
    assert tail.offset == len(first + second + third) and tail.last_seq == 3
    path.write_bytes(first)
    with pytest.raises(TailReset):
        tail.read_new()


def test_a_damaged_or_foreign_record_stops_the_tail(tmp_path: Path) -> None:
    """A record of another run, or a gap in seq, is not taken for the run's."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(_line(1) + _line(2, run_id="run-2"))
    tail = JournalTail(path, "run-1")
    with pytest.raises(Exception, match="record of run 'run-2'"):
        tail.read_new()
    path.write_bytes(_line(1) + _line(3))
    with pytest.raises(TailReset, match="seq 3"):
        JournalTail(path, "run-1").read_new()


def test_serve_streams_a_run_another_process_drives(tmp_path: Path) -> None:
    """`stepline serve` (random token, printed once, 0600 file) streams each new record of a run while the run's
    own process writes it, in order, without holding the run's lock; the stream then shows it blocked, and says
    which process drives the run (its pid) until that process lets go of it (none)."""
    root = tmp_path / "project"
    root.mkdir()
    write_slow_workflow(root, steps=3, pause=0.4)
    server = Server(root)
    run = None
    try:
        token_file = root / ".stepline" / "serve-token"
        token = token_file.read_text().strip()
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        assert any(token in line for line in server.lines) and len(token) >= 32
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{server.url}/api/runs", headers={"Authorization": "Bearer nope"}).status_code == 401
        run = subprocess.Popen(stepline_command(root, "run", "slow.yaml", "--non-interactive", "-q"),
                               stderr=subprocess.PIPE, text=True)
        run_id = None
        for _ in range(100):  # the run's directory appears as soon as it starts
            runs = httpx.get(f"{server.url}/api/runs", headers=headers).json()["runs"]
            if runs and runs[0]["status"] != "not started":
                run_id = runs[0]["run_id"]
                break
            assert run.poll() is None, run.stderr.read() if run.stderr else ""
            time.sleep(0.05)
        assert run_id is not None
        seen: list[dict[str, object]] = []
        drivers: list[object] = []
        with httpx.stream("GET", f"{server.url}/api/runs/{run_id}/stream", headers=headers, timeout=30) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            kind = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind == "journal":
                    seen.append(json.loads(line[6:]))
                elif line.startswith("data: ") and kind == "driver":
                    drivers.append(json.loads(line[6:])["pid"])
                if seen and seen[-1]["type"] == "WorkflowBlocked" and drivers[-1] is None:
                    break  # blocked, and its process let go of the run: nothing drives it now
        assert run.wait(timeout=30) == 9
        assert drivers[0] == run.pid and drivers[-1] is None  # "live" while its process holds the run, then not
        types = [e["type"] for e in seen]
        assert [e["seq"] for e in seen] == sorted(e["seq"] for e in seen)
        assert types[0] == "WorkflowStarted" and types.count("WorkflowStepCompleted") == 3
        assert [e["step_id"] for e in seen if e["type"] == "WorkflowStepStarted"] == [
            "work-1", "work-2", "work-3", "ship"]
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        server.stop()
    assert server.process.returncode is not None
