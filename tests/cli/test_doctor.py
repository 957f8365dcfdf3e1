"""`stepline doctor RUN [--truncate-to-last-good]`: what it says and what its repair keeps, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.rundirs import BUILDERS, run_dir_of
from stepline.interfaces.cli._app import run_cli


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_cli(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def interrupted(tmp_path: Path) -> Path:
    """A native run killed after two of its five steps."""
    project = tmp_path / "project"
    project.mkdir()
    BUILDERS["native"](project)
    return project


def test_the_repair_keeps_the_journal_and_cuts_it_to_its_good_prefix(
        interrupted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A line repeated in the middle: doctor names its line and how many lines follow; the repair backs up the
    journal and manifest byte for byte, leaves exactly the good lines, sets journal_seq back, and resume
    completes the run, every step once."""
    run_dir = run_dir_of(interrupted)
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    damaged = b"".join([*lines[:4], lines[3], *lines[4:]])
    journal.write_bytes(damaged)
    manifest = (run_dir / "manifest.json").read_bytes()
    at = ["-C", str(interrupted)]

    code, out, err = _cli(capsys, "doctor", run_dir.name, *at)
    assert (code, err) == (6, "")
    assert ("journal.jsonl: 4 good record(s), then damage: journal.jsonl:5: bad record: seq 4 where 5 was "
            "expected") in out
    assert f"{len(lines) - 4} more line(s) after the damaged one are not read" in out
    assert "verdict: can be resumed from record 4" in out.replace("\n", " ")

    code, out, err = _cli(capsys, "doctor", run_dir.name, "--truncate-to-last-good", *at)
    assert code == 0, err
    [backup] = run_dir.glob("backup-*")
    assert f"kept in {backup}" in out.replace("\n", "")
    assert (backup / "journal.jsonl").read_bytes() == damaged
    assert (backup / "manifest.json").read_bytes() == manifest
    assert journal.read_bytes() == b"".join(lines[:4])
    assert json.loads((run_dir / "manifest.json").read_bytes())["journal_seq"] <= 4
    assert _cli(capsys, "resume", run_dir.name, "-q", *at)[0] == 0
    steps = [json.loads(line)["step_id"] for line in journal.read_bytes().splitlines()
             if json.loads(line)["type"] == "WorkflowStepCompleted"]
    assert sorted(steps) == ["s1", "s2", "s3", "s4", "s5"]


def test_a_whole_run_needs_no_repair_and_the_json_says_why(
        interrupted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """doctor on a run a crash left: exit 0, whole; --json has the figures; the repair refuses (exit 5)."""
    run_dir = run_dir_of(interrupted)
    code, out, _ = _cli(capsys, "doctor", run_dir.name, "--json", "-C", str(interrupted))
    found = json.loads(out)
    assert code == 0 and not found["damaged"] and found["status"] == "running" and found["records"] > 0
    assert found["verdict"] == f"whole: `stepline resume {run_dir.name}` continues the run"
    code, _, err = _cli(capsys, "doctor", run_dir.name, "--truncate-to-last-good", "-C", str(interrupted))
    assert code == 5 and "is not damaged: there is nothing to repair" in err
    assert not list(run_dir.glob("backup-*"))


def test_a_killed_writers_temporary_file_is_named_and_removed_by_the_resume(
        interrupted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `.manifest.json.<pid>.tmp` of a dead process is not damage: doctor lists it, resume removes it."""
    run_dir = run_dir_of(interrupted)
    stale = run_dir / ".manifest.json.999999999.tmp"
    stale.write_text('{"run_id": ', encoding="utf-8")
    code, out, _ = _cli(capsys, "doctor", run_dir.name, "-C", str(interrupted))
    assert code == 0 and "1 temporary file(s) of killed writers" in out and stale.name in out
    assert _cli(capsys, "resume", run_dir.name, "-q", "-C", str(interrupted))[0] == 0
    assert not stale.exists()


def test_a_folder_that_recorded_nothing_is_not_started_never_has_no_manifest(
        interrupted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a run stopped before its first record leaves where its folder could not be removed: no manifest and
    a journal of zeros. list says 'not started'; status and resume say it recorded nothing and what to do."""
    folder = interrupted / ".stepline" / "runs" / "run-20260101000000-0badf00d"
    folder.mkdir()
    (folder / "journal.jsonl").write_bytes(bytes(4096))
    at = ["-C", str(interrupted)]
    code, out, _ = _cli(capsys, "list", "--json", *at)
    row = next(r for r in json.loads(out) if r["run_id"] == folder.name)
    assert code == 0 and row["status"] == "not started" and f"remove {folder}" in row["damage"]
    for command in ("status", "resume"):
        code, _, err = _cli(capsys, command, folder.name, *at)
        assert code == 5, err
        assert err.startswith(f"error: run {folder.name} recorded nothing: it stopped before its first record")
        assert f"remove {folder} and start the workflow again" in err and "no manifest" not in err
    code, out, _ = _cli(capsys, "doctor", folder.name, *at)
    assert code == 0 and "verdict: nothing to resume" in out
