"""Run a command tool's program as a direct child of the engine, killed as a group on timeout or cancellation.

A program needs no interpreter worker: nothing of it runs in the engine's process, so it is started directly
by asyncio (one ``fork``/``exec``, no Python to boot, no polling: the call ends when the program does). It
starts in a new session, so it leads its own process group: whatever it starts (a shell's children) is in that
group, and the group is killed with SIGKILL when the call times out, when the awaiting task is cancelled (the
engine's step timeout), and when the program ends leaving processes behind; asyncio reaps the leader.

stdin is ``/dev/null`` and the working directory is the project root. stdout and stderr go to temporary files,
not pipes: a chatty program cannot fill memory or block, and a background process still holding them cannot
keep the call waiting. Only the first ``max_output_bytes`` of each are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
from collections.abc import Sequence
from typing import IO

from stepline.tools._spec import RunOutcome, ToolContext, ToolOutput

__all__ = ["run_command"]


async def run_command(argv: Sequence[str], ctx: ToolContext, *, timeout: float) -> RunOutcome:
    """Run ``argv`` in ``ctx.project_root`` for at most ``timeout`` seconds.

    Exit code 0 is ``ok`` with ``{"exit_code": 0}``; another code is ``ok`` too, with the output's ``error``
    set to "command exited with code N" (the call failed, its output is kept). A timeout keeps the output so
    far. Cancelling the awaiting task kills the process group, reaps the program, then re-raises.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=ctx.project_root, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True)
        except OSError as exc:
            return RunOutcome("error", error=f"could not start {argv[0]!r}: {exc}")
        code: int | None = None
        try:
            async with asyncio.timeout(timeout):
                code = await proc.wait()
        except TimeoutError:
            pass
        finally:
            _kill_group(proc.pid)
            await proc.wait()
        output = ToolOutput(stdout=_head(out, ctx.max_output_bytes), stderr=_head(err, ctx.max_output_bytes))
    if code is None:
        return RunOutcome("timeout", output=output, retryable=True, pid=proc.pid,
                          error=f"timed out after {timeout:g}s; the command's process group was killed")
    output.result = {"exit_code": code}
    output.error = None if code == 0 else f"command exited with code {code}"
    return RunOutcome("ok", output=output, pid=proc.pid)


def _kill_group(pgid: int) -> None:
    """SIGKILL the program's process group (the program may be gone and have left children behind)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _head(stream: IO[bytes], limit: int) -> str:
    """The first ``limit`` bytes a stream's file holds, with how many more there were."""
    size = stream.seek(0, os.SEEK_END)
    stream.seek(0)
    text = stream.read(limit).decode("utf-8", "replace")
    return text if size <= limit else f"{text}\n…[truncated {size - limit} bytes]"
