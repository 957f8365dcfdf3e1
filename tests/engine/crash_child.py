"""Run the stepline CLI in a child process that kills itself (SIGKILL) at a chosen point.

Usage: python crash_child.py KIND N -- stepline-args...

KIND is where to die on the N-th occurrence:
  ``journal``  halfway through writing a journal record (a torn last line),
  ``snapshot`` after writing a snapshot's temporary file, before renaming it over the old one,
  ``manifest`` the same, counting only manifest.json's snapshots (a resume writes one: at its end),
  ``output``   halfway through appending to a step's output file,
  ``none``     never (run to the end).
"""

from __future__ import annotations

import os
import signal
import sys

kind, limit = sys.argv[1], int(sys.argv[2])
args = sys.argv[sys.argv.index("--") + 1:]
count = 0
real_write, real_pwrite, real_replace = os.write, os.pwrite, os.replace


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _dies_in_this_write(fd: int) -> bool:
    global count
    name = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
    if (kind == "journal" and name.endswith("journal.jsonl")) or (kind == "output" and name.endswith(".log")):
        count += 1
        return count == limit
    return False


def write(fd: int, data: bytes | memoryview) -> int:
    if _dies_in_this_write(fd):
        real_write(fd, bytes(data)[: max(1, len(data) // 2)])
        _die()
    return real_write(fd, data)


def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:  # the journal writes at its end, in place
    if _dies_in_this_write(fd):
        real_pwrite(fd, bytes(data)[: max(1, len(data) // 2)], offset)
        _die()
    return real_pwrite(fd, data, offset)


def replace(src: str, dst: str) -> None:
    global count
    if kind == "snapshot" or (kind == "manifest" and str(dst).endswith("manifest.json")):
        count += 1
        if count == limit:
            _die()
    real_replace(src, dst)


os.write = write  # type: ignore[assignment]
os.pwrite = pwrite  # type: ignore[assignment]
os.replace = replace  # type: ignore[assignment]

from stepline.interfaces.cli._app import run_cli  # noqa: E402 - after the patches, so the store sees them

sys.exit(run_cli(args))
