"""The run lock: only one process drives a run at a time (an ``flock`` the kernel drops when the holder dies)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from stepline.errors import RunLockedError, StorageError

__all__ = ["RunLock", "lock_holder"]


def lock_holder(path: Path) -> int | None:
    """Return the pid of the live process holding the lock at ``path``, or None when it is free."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class RunLock:
    """An exclusive lock on one run directory, held for the life of the driving process."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock or raise :class:`RunLockedError` naming the pid that holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError.from_os(exc, self.path, "lock") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(f"run {self.run_id} is being driven by process {holder}",
                                 hint="wait for it to finish or stop that process, then retry") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        except OSError as exc:
            os.close(fd)  # drops the lock
            raise StorageError.from_os(exc, self.path, "lock") from exc
        self._fd = fd

    def release(self) -> None:
        """Drop the lock."""
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
