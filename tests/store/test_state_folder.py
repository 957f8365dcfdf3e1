"""``.stepline/`` is git-ignored from the first run: git never lists stepline's state."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli
from stepline.store import RunStore, state_folder

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release-notes"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_status_does_not_list_the_state_of_a_first_run(tmp_path: Path) -> None:
    """A first run in a fresh git repository leaves `git status` showing only the user's own files."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    workflow = shutil.copytree(EXAMPLE, tmp_path / "release-notes")
    (tmp_path / "CHANGES.md").write_text("## 1.4.0\n- faster\n", encoding="utf-8")
    code = run_cli(["run", str(workflow), "--script", str(workflow / "script.yaml"), "--non-interactive", "-q",
                    "-C", str(tmp_path)])
    assert code == 9  # blocked at the approval: the run's state is on disk
    assert (tmp_path / ".stepline" / "runs").is_dir()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path, check=True,
                            capture_output=True, text=True).stdout
    listed = sorted(line[3:] for line in status.splitlines())
    assert not [path for path in listed if path.startswith(".stepline")], listed
    assert "CHANGES.md" in listed


def test_the_ignore_file_is_written_once_and_kept(tmp_path: Path) -> None:
    """A .gitignore the user edited is never rewritten; a storage root outside .stepline/ is left to the user."""
    folder = state_folder(tmp_path / ".stepline" / "runs")
    assert folder == tmp_path / ".stepline"
    assert (folder / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
    (folder / ".gitignore").write_text("!keep\n", encoding="utf-8")
    RunStore(folder / "runs").create()
    assert (folder / ".gitignore").read_text(encoding="utf-8") == "!keep\n"
    RunStore(tmp_path / "elsewhere").create()
    assert not (tmp_path / "elsewhere" / ".gitignore").exists()
