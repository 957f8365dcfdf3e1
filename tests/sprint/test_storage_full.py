"""The disk fills while the sprint loop builds a story (the agent's output takes the last free byte): the loop stops
with one line naming the file, the cause, and the command that goes on — `stepline sprint resume`, the loop's, not
one story's run — and once there is room again that command lands the story once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sprint_kit import BMAD, git, make_project

from fakes.disks import mount_tmpfs, unmount
from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "disk"
    path.mkdir()
    mount_tmpfs(path, "128m")
    yield path
    unmount(path)


def test_a_full_disk_mid_story_names_the_loops_resume_which_lands_the_story_once(
        tmp_path: Path, disk: Path, agent_env: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fill = disk / "FILL.bin"
    monkeypatch.setenv("FAKE_SPRINT", json.dumps({"1-1": "filler"}))
    monkeypatch.setenv("FAKE_FILL", str(fill))
    monkeypatch.setenv("FAKE_ONCE_DIR", str(tmp_path))
    root = make_project(disk / "calc", layers=1)

    code = run_cli(["sprint", "run", "--max-stories", "1", "-C", str(root), "-q"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("error: cannot "), err
    assert "No space left on device" in lines[0] and "`stepline sprint resume`" in lines[0], err
    assert "stepline resume run-" not in lines[0], err

    fill.unlink()  # room again
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0, capsys.readouterr().err
    [story] = json.loads(capsys.readouterr().out)
    assert (story["key"], story["outcome"]) == ("1-1-add", "committed")
    subjects = git(root, "log", "--format=%s").splitlines()
    assert sum(subject.startswith("story 1-1-add:") for subject in subjects) == 1, subjects
    assert not (root / "FILL.bin").exists()
