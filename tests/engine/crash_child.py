"""Run the stepline CLI in a child process that kills itself (SIGKILL) at a chosen point.

Usage: python crash_child.py KIND N -- stepline-args...   (or :func:`run` / :func:`start` from a test)

KIND is where to die on the N-th occurrence:
  ``journal``  halfway through writing a journal record (a torn last line),
  ``snapshot`` after writing a snapshot's temporary file, before renaming it over the old one,
  ``manifest`` the same, counting only manifest.json's snapshots (a resume writes one: at its end),
  ``output``   halfway through appending to a step's output file,
  ``none``     never (run to the end).

:func:`run` and :func:`start` fork the child from a server process that has imported stepline once, so that
the dozens of children a crash test kills do not each spend most of their life importing it; each is still a
process of its own, killed by a real SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

#: What the CLI imports to drive a run (the lazily imported parts too), loaded once by the fork server.
_WARM = ["stepline.interfaces.cli._app", "stepline.interfaces.cli._ccw", "stepline.interfaces.cli._driving",
         "stepline.interfaces.cli._runs", "stepline.families", "stepline.ccw._driver", "stepline.engine",
         "stepline.store", "stepline.executors"]


def _install(kind: str, limit: int) -> None:
    """Patch the os functions the store writes with (it calls them through ``os`` at each write)."""
    count = 0
    real_write, real_pwrite, real_replace = os.write, os.pwrite, os.replace

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def dies_in_this_write(fd: int) -> bool:
        nonlocal count
        name = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if (kind == "journal" and name.endswith("journal.jsonl")) or (kind == "output" and name.endswith(".log")):
            count += 1
            return count == limit
        return False

    def write(fd: int, data: bytes | memoryview) -> int:
        if dies_in_this_write(fd):
            real_write(fd, bytes(data)[: max(1, len(data) // 2)])
            die()
        return real_write(fd, data)

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:  # the journal writes at its end, in place
        if dies_in_this_write(fd):
            real_pwrite(fd, bytes(data)[: max(1, len(data) // 2)], offset)
            die()
        return real_pwrite(fd, data, offset)

    def replace(src: Any, dst: Any) -> None:
        nonlocal count
        if kind == "snapshot" or (kind == "manifest" and str(dst).endswith("manifest.json")):
            count += 1
            if count == limit:
                die()
        real_replace(src, dst)

    os.write = write  # type: ignore[assignment]
    os.pwrite = pwrite  # type: ignore[assignment]
    os.replace = replace  # type: ignore[assignment]


def _main(kind: str, limit: int, args: list[str]) -> int:
    _install(kind, limit)
    from stepline.interfaces.cli._app import run_cli

    return run_cli(args)


def _forked(kind: str, limit: int, args: list[str], env: dict[str, str], cwd: str, log: str) -> None:
    """The forked child: the caller's environment and folder, stdout and stderr into ``log``."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.exit(_main(kind, limit, args))


_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(_WARM)


class Child:
    """A started child: :meth:`wait` for its exit code (negative: the signal that ended it) and its output."""

    def __init__(self, kind: str, limit: int, args: list[str]) -> None:
        handle, self.log = tempfile.mkstemp(prefix="crash-child-", suffix=".log")
        os.close(handle)
        self.process: BaseProcess = _context.Process(
            target=_forked, args=(kind, limit, args, dict(os.environ), os.getcwd(), self.log), daemon=True)
        self.process.start()

    def kill(self) -> None:
        self.process.kill()

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float = 120) -> tuple[int, str]:
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
            raise TimeoutError(f"the crash child did not end within {timeout}s")
        output = Path(self.log).read_text(encoding="utf-8", errors="replace")
        Path(self.log).unlink()
        return self.process.exitcode, output


def start(kind: str, limit: int, args: list[str]) -> Child:
    """Start ``stepline ARGS`` in a child that dies at the ``limit``-th ``kind`` (see the module docstring)."""
    return Child(kind, limit, args)


def run(kind: str, limit: int, args: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run ``stepline ARGS`` in such a child to its end; its exit code and its output."""
    return start(kind, limit, args).wait(timeout)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], int(sys.argv[2]), sys.argv[sys.argv.index("--") + 1:]))
