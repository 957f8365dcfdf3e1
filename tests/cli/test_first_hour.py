"""What a new user meets in the first hour: `stepline --version`, and output piped to a file or a pager that is
never wrapped or cut at an assumed terminal width."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stepline

V611 = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.11.0"


def stepline_piped(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`stepline ARGS` with stdout and stderr piped and no COLUMNS: what `stepline … | less` gets."""
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_version(tmp_path: Path) -> None:
    """`stepline --version` prints the package's version and exits 0."""
    result = stepline_piped("--version", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, f"stepline {stepline.__version__}\n")


@pytest.mark.skipif(not V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_piped_lines_are_whole(tmp_path: Path) -> None:
    """Paths longer than 80 columns (`bmad install`) and a rich table's long cell (`sprint status`) are printed
    whole on one line each when stdout is a pipe."""
    project = tmp_path / ("a-project-folder-whose-name-is-long-enough" + "-" * 20) / "to-pass-eighty-columns"
    project.mkdir(parents=True)
    result = stepline_piped("bmad", "install", str(V611.resolve()), "--project", ".", cwd=project)
    assert result.returncode == 0, result.stderr
    wrote = [line for line in result.stdout.splitlines() if line.startswith("wrote ")]
    assert f"wrote {project / '_bmad' / 'config.toml'}" in wrote
    key = "1-1-a-story-whose-key-is-long" + "-and-longer" * 8
    board = project / "_bmad-output" / "implementation-artifacts" / "sprint-status.yaml"
    board.parent.mkdir(parents=True)
    board.write_text(f"development_status:\n  epic-1: in-progress\n  {key}: ready-for-dev\n", encoding="utf-8")
    result = stepline_piped("sprint", "status", cwd=project)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if key in line)
    assert "ready-for-dev" in row
    assert len(result.stdout.splitlines()) == 3  # the header and two rows: nothing wrapped onto another line
