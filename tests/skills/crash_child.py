"""Run the stepline CLI in a child process that kills itself (SIGKILL) right after a chosen journal write.

Usage: python crash_child.py PATTERN N -- stepline-args...

The process dies just after the N-th write to ``journal.jsonl`` whose bytes contain PATTERN (the write itself
lands whole: what a crash between two records leaves). PATTERN ``-`` never matches (run to the end).
"""

from __future__ import annotations

import os
import signal
import sys

pattern, limit = sys.argv[1].encode("utf-8"), int(sys.argv[2])
args = sys.argv[sys.argv.index("--") + 1:]
count = 0
real_write, real_pwrite = os.write, os.pwrite


def _after(fd: int, data: bytes | memoryview) -> None:
    global count
    path = f"/proc/self/fd/{fd}"
    if sys.argv[1] != "-" and os.path.exists(path) and os.readlink(path).endswith("journal.jsonl") \
            and pattern in bytes(data):
        count += 1
        if count == limit:
            os.kill(os.getpid(), signal.SIGKILL)


def write(fd: int, data: bytes | memoryview) -> int:
    written = real_write(fd, data)
    _after(fd, data)
    return written


def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
    written = real_pwrite(fd, data, offset)
    _after(fd, data)
    return written


os.write, os.pwrite = write, pwrite  # type: ignore[assignment]

from stepline.interfaces.cli._app import run_cli  # noqa: E402 - after the patch, so every write goes through it

sys.exit(run_cli(args))
