"""fork's own records: a value given with `--set` is redacted as the manifest redacts it (the fork's journal never
holds a secret), and a fork a full disk stopped is not left behind as a resumable run whose files are missing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fakes.disks import mount_tmpfs, unmount

from .conftest import cli, run_path
from .test_native import project, scripted_run

__all__ = ["project"]  # the native workflow's project, a fixture

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_a_secret_given_with_set_is_redacted_in_the_forks_records(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = scripted_run(capsys, project)
    code, out = cli(capsys, project, "fork", parent, "--at", "three", "--set", f"token={SECRET}")
    assert code == 0, out
    child = re.search(r"^fork (run-\S+) of", out, re.M).group(1)  # type: ignore[union-attr]
    folder = run_path(project, child)
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    assert "token" in (folder / "journal.jsonl").read_text(encoding="utf-8")  # the change is recorded, redacted


def test_a_fork_stopped_by_a_full_disk_leaves_no_resumable_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The parent's step one wrote 600 KB; the file is gone now, and the disk is full: putting it back stops the
    fork. It says so in one line; no fork run is left (list shows only the parent); with room again, fork works."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mount_tmpfs(mount_point, "4m")
    try:
        root = mount_point / "project"
        root.mkdir()
        big = "x" * 600_000
        (root / "wf.yaml").write_text(
            "id: demo\nsteps:\n  - id: one\n    outputs: [out/one.md]\n  - id: two\n    outputs: [out/two.md]\n"
            "  - id: three\n    outputs: [out/three.md]\n", encoding="utf-8")
        (root / "script.yaml").write_text(
            "steps:\n" + "".join(f"  {s}:\n    - write_output: {{content: \"{big if s == 'one' else s}\\n\"}}\n"
                                 f"    - finish: {{summary: {s}}}\n" for s in ("one", "two", "three")),
            encoding="utf-8")
        code, out = cli(capsys, root, "run", "wf.yaml", "--script", "script.yaml")
        assert code == 0, out
        parent = re.search(r"run (run-\S+) completed", out).group(1)  # type: ignore[union-attr]
        (root / "out" / "one.md").unlink()
        filler = mount_point / "filler"
        with open(filler, "wb") as handle:  # the disk, full to its last 100 KB
            free = os.statvfs(mount_point).f_bavail * os.statvfs(mount_point).f_frsize
            handle.write(b"\0" * (free - 100_000))

        code, out = cli(capsys, root, "fork", parent, "--at", "three")
        assert code == 1, out
        lines = [line for line in out.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "No space left" in lines[0], out
        assert [p.name for p in (root / ".stepline" / "runs").iterdir() if p.name.startswith("run-")] == [parent]
        code, out = cli(capsys, root, "list")
        assert code == 0 and out.count("run-") == 1, out

        filler.unlink()
        code, out = cli(capsys, root, "fork", parent, "--at", "three")
        assert code == 0, out
        assert (root / "out" / "one.md").read_text(encoding="utf-8") == big + "\n"
    finally:
        unmount(mount_point)
