"""A run that completed but could not write its final snapshot (a full disk) says so, and `resume` writes the
snapshot and reports the run completed (issue 28 item 6); it said "resume continues the run", then resume
said "already completed" (exit 5)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from stepline.engine._runner import Engine
from stepline.errors import StorageError
from stepline.interfaces.cli._app import run_cli
from stepline.model import Run, RunStatus
from stepline.store import RunDir


def test_a_completed_run_whose_final_snapshot_fails_says_so_and_resume_writes_it(
        project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "flow.yaml").write_text("id: f\nsteps:\n  - id: a\n    name: A\n  - id: b\n    name: B\n",
                                       encoding="utf-8")
    snapshot = Engine._snapshot

    def full_disk_at_the_end(self: Engine, run_dir: RunDir, run: Run) -> None:
        if run.status == RunStatus.COMPLETED:
            raise StorageError.from_os(OSError(errno.ENOSPC, "No space left on device"), run_dir.manifest_path)
        snapshot(self, run_dir, run)

    monkeypatch.setattr(Engine, "_snapshot", full_disk_at_the_end)
    assert run_cli(["run", "flow.yaml", "--executor", "dry-run", "-q", "-C", str(project)]) == 1
    err = capsys.readouterr().err
    run_id = next((project / ".stepline" / "runs").glob("run-*")).name
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "No space left on device" in lines[0], err
    assert f"run {run_id} completed" in lines[0] and f"`stepline resume {run_id}` writes it" in lines[0], err
    assert "continues the run" not in err
    monkeypatch.undo()
    assert run_cli(["resume", run_id, "--json", "-C", str(project)]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    manifest = json.loads((project / ".stepline" / "runs" / run_id / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "completed"
    assert run_cli(["resume", run_id, "-C", str(project)]) == 5  # now it is: nothing left to write
