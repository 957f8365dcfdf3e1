"""Every field of a journal record is checked by its type and form: a `time` that is not an ISO 8601 time is
damage, reported by `doctor` and `status` with file:line (issue 28 item 7: it was accepted, "verdict: whole")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli


@pytest.mark.parametrize("time", ["garbage", "", "2026-13-45T00:00:00+00:00", "2026-11-27T10:00:00"])
def test_a_record_whose_time_is_not_a_time_is_damage(project: Path, capsys: pytest.CaptureFixture[str],
                                                     time: str) -> None:
    (project / "flow.yaml").write_text("id: f\nsteps:\n  - id: a\n    name: A\n", encoding="utf-8")
    assert run_cli(["run", "flow.yaml", "--executor", "dry-run", "-q", "-C", str(project)]) == 0
    run_dir = next((project / ".stepline" / "runs").glob("run-*"))
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().split(b"\n")
    record = json.loads(lines[1])
    record["time"] = time
    lines[1] = json.dumps(record, separators=(",", ":")).encode()
    journal.write_bytes(b"\n".join(lines))
    capsys.readouterr()
    assert run_cli(["doctor", run_dir.name, "-C", str(project)]) == 6
    out = capsys.readouterr().out
    assert f"journal.jsonl:2: bad record: time is {time!r}, not an ISO 8601 time" in out
    assert "verdict: whole" not in out
    assert run_cli(["status", run_dir.name, "-C", str(project)]) == 6
    assert f"journal.jsonl:2: bad record: time is {time!r}" in capsys.readouterr().err
