"""Small real disks for the tests of full and read-only storage: a tmpfs mounted where a test says, resized at
will, and unmounted again. Mounting needs root (CAP_SYS_ADMIN); where it is not allowed the test is skipped and
says so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["Disk", "mount", "mount_tmpfs", "unmount"]


def mount(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``mount ARGS``."""
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


def unmount(path: Path) -> None:
    """Unmount whatever is mounted at ``path`` (lazily when it is busy), until nothing is."""
    while os.path.ismount(path):
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


class Disk:
    """A tmpfs mounted at :attr:`path`, resized at will."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def resize(self, size: str) -> None:
        done = mount("-o", f"remount,size={size}", str(self.path))
        assert done.returncode == 0, done.stderr


def mount_tmpfs(path: Path, size: str) -> Disk:
    """A tmpfs of ``size`` (``160k``, ``64m``) mounted at the empty folder ``path``; the test is skipped where
    mounting is not allowed."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command: the full- and read-only-disk tests need to mount a small tmpfs")
    done = mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if done.returncode:
        pytest.skip(f"mounting a tmpfs is not allowed here ({done.stderr.strip()}): run as root (or with "
                    "CAP_SYS_ADMIN) to test full and read-only disks")
    return Disk(path)
