"""Running one agent process: under its supervisor (:mod:`._supervisor`, so it dies with its driver), journaled
before it starts (pid, start time, process group: a resume stops what a dead driver left), its output read line
by line as it comes, and stopped — its whole process group — for a budget, a stall or a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline.errors import ExecutorError

__all__ = ["PRIVATE_PREFIX", "FileTail", "OutputLog", "Ran", "identity", "private_prefix", "remove_private_folders",
           "run_process", "stop_left_over"]

#: The name of an agent's private folder in the temporary directory starts so (removed after its step, or once
#: a resume has stopped an agent a dead driver left).
PRIVATE_PREFIX = "stepline-agent-"
_SUPERVISOR = Path(__file__).with_name("_supervisor.py")
_PROC = Path("/proc")


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        return (_PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except (OSError, ValueError):
        return None


def _boot_id() -> str | None:
    with contextlib.suppress(OSError):
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    return None


def identity(pid: int) -> dict[str, Any]:
    """What names process ``pid`` beyond its pid (reused): its start time since boot, and the boot."""
    fields = _stat(pid)
    return {"pid": pid, "pgid": pid, "start_ticks": int(fields[19]) if fields else None, "boot_id": _boot_id()}


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. A zombie does not count: an orphan that died waits for
    init to reap it, which can take a second, and it holds nothing."""
    if not _PROC.is_dir():  # not Linux: any member, zombies too
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in _PROC.glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):  # gone while we looked
            continue
        if group == str(pgid) and state not in ("Z", "X"):
            return True
    return False


#: How long a group SIGKILLed is waited for (a process in uninterruptible sleep dies when its I/O returns).
_KILLED_WAIT = 10.0


async def _kill_group(pgid: int, grace: float, exited: Callable[[], bool] = lambda: True) -> None:
    """SIGTERM to group ``pgid``, SIGKILL to whatever of it is left after ``grace`` seconds (or once it is gone
    and ``exited`` says its leader was reaped), then wait until nothing of it runs: a process of the group writes
    nothing once this returns."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (_group_alive(pgid) or not exited()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + _KILLED_WAIT
    while _group_alive(pgid) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def private_prefix(run_id: str, step_id: str) -> str:
    """How the private folders of a step's agents are named in the temporary directory (the rest is random)."""
    return f"{PRIVATE_PREFIX}{run_id}-{re.sub(r'[^A-Za-z0-9@._-]', '_', step_id)}-"


def remove_private_folders(run_id: str, step_id: str) -> int:
    """Remove what private folders of the step's agents are left in the temporary directory (a driver killed before
    it journaled its agent, or before it removed the folder), when none of them runs; how many were removed."""
    found = list(Path(tempfile.gettempdir()).glob(glob.escape(private_prefix(run_id, step_id)) + "*"))
    for folder in found:
        shutil.rmtree(folder, ignore_errors=True)
    return len(found)


def _remove_private_folder(process: dict[str, Any]) -> None:
    """Remove the agent's private folder (``tmp`` in its journaled identity: a ``stepline-agent-*`` folder of the
    temporary directory, never anything else)."""
    folder = process.get("tmp")
    if not isinstance(folder, str):
        return
    path = Path(folder)
    if path.name.startswith(PRIVATE_PREFIX) and path.parent.resolve() == Path(tempfile.gettempdir()).resolve():
        shutil.rmtree(path, ignore_errors=True)


async def stop_left_over(process: dict[str, Any], grace: float) -> str | None:
    """Stop the agent a dead driver left (``process``: its journaled :func:`identity`), when it is still that one,
    and wait until nothing of its process group runs; then remove its private folder. Says what was stopped, or
    None when nothing of it ran."""
    try:
        return await _stop_group_left(process, grace)
    finally:
        _remove_private_folder(process)


async def _stop_group_left(process: dict[str, Any], grace: float) -> str | None:
    pgid, ticks = process.get("pgid"), process.get("start_ticks")
    if not isinstance(pgid, int) or process.get("boot_id") != _boot_id():
        return None  # another boot (or machine): whatever it was is gone
    leader = _stat(pgid)
    if leader is not None and ticks is not None and int(leader[19]) != ticks:
        return None  # the pid is another process's now: the group it led is empty (a pgid is not reused before)
    if not _group_alive(pgid):
        return None
    await _kill_group(pgid, grace)
    return f"stopped the agent a previous driver left running (process group {pgid})"


@dataclass(slots=True)
class Ran:
    """How one agent process ended: its exit status, what it printed, and why it was stopped from outside
    (``budget``, ``stall``), if it was."""

    status: int
    stdout: str
    stderr: str
    stopped: str | None


async def _pump(stream: asyncio.StreamReader | None, name: str, into: list[str],
                on_line: Callable[[str, str], None]) -> None:
    """Read ``stream`` to its end, handing each line to ``on_line`` as it arrives (any length)."""
    if stream is None:
        return
    pending = bytearray()
    while chunk := await stream.read(65536):
        searched = len(pending)
        pending += chunk
        end = pending.rfind(b"\n", searched)  # only the new bytes can end a line: a long line is read once
        if end < 0:
            continue
        for raw in bytes(pending[:end]).split(b"\n"):
            into.append(raw.decode("utf-8", "replace"))
            on_line(name, into[-1])
        del pending[:end + 1]
    if pending:
        into.append(pending.decode("utf-8", "replace"))
        on_line(name, into[-1])


_NOT_THE_AGENTS = frozenset({".git", ".stepline"})


def _tree_state(root: Path, limit: int = 20000) -> tuple[int, int, int]:
    """A cheap fingerprint of the files under ``root`` (their count, newest mtime, total size; at most ``limit``
    entries looked at): it changes when the agent writes a file. ``.git`` and ``.stepline`` are left out: the
    runtime itself writes there while the agent runs (its journal, the agent's output log), which is no sign
    of the agent's work and would hide a stall of an agent working in the project root."""
    count = newest = size = 0
    folders = [root]
    while folders and count < limit:
        with contextlib.suppress(OSError), os.scandir(folders.pop()) as entries:
            for entry in entries:
                count += 1
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in _NOT_THE_AGENTS:
                            folders.append(Path(entry.path))
                        continue
                    info = entry.stat(follow_symlinks=False)
                    newest, size = max(newest, info.st_mtime_ns), size + info.st_size
    return count, newest, size


async def _watch_stall(cwd: Path, stall: float, last_line: Callable[[], float], stalled: asyncio.Event) -> None:
    """Set ``stalled`` once neither a line of output nor a file change in ``cwd`` was seen for ``stall`` seconds."""
    tick = min(max(stall / 4, 0.05), 5.0)
    state = await asyncio.to_thread(_tree_state, cwd)
    changed = time.monotonic()
    while True:
        await asyncio.sleep(tick)
        now = time.monotonic()
        if now - last_line() < stall / 2:
            continue
        if (current := await asyncio.to_thread(_tree_state, cwd)) != state:
            state, changed = current, now
        if now - max(last_line(), changed) >= stall:
            stalled.set()
            return


async def run_process(argv: list[str], prompt: str, cwd: Path, env: dict[str, str], *,
                      on_line: Callable[[str, str], None], budget: asyncio.Event,
                      journal: Callable[[dict[str, Any]], Awaitable[None]], grace: float,
                      stall: float | None) -> Ran:
    """Run ``argv`` under its supervisor with ``prompt`` on stdin, its output lines handed to ``on_line`` as they
    come. ``journal`` is awaited with the process's :func:`identity` before the agent may start. Its process group
    is stopped when ``budget`` is set (a budget crossed), when it stalls for ``stall`` seconds, or on cancellation
    (a timeout, a cancelled step)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(_SUPERVISOR), str(grace), *argv, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env, start_new_session=True)
    except OSError as exc:
        raise ExecutorError(f"cannot start {argv[0]}: {exc}", hint="check the agent CLI's installation") from exc
    last_line = time.monotonic()

    def line(stream: str, text: str) -> None:
        nonlocal last_line
        if stream == "out":  # its stream; a CLI's log on stderr (retrying a connection, say) is not progress
            last_line = time.monotonic()
        on_line(stream, text)

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # an agent that does not read its stdin
            proc.stdin.write(b"go\n" + prompt.encode("utf-8"))
            await proc.stdin.drain()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.close()

    out: list[str] = []
    err: list[str] = []
    stalled = asyncio.Event()
    tasks: list[asyncio.Future[Any]] = []
    reading: asyncio.Future[Any] | None = None
    stopped: str | None = None
    try:
        await journal(identity(proc.pid))
        reading = asyncio.gather(feed(), _pump(proc.stdout, "out", out, line), _pump(proc.stderr, "err", err, line))
        tasks = [asyncio.ensure_future(proc.wait()), asyncio.ensure_future(budget.wait()),
                 asyncio.ensure_future(stalled.wait())]
        if stall:
            tasks.append(asyncio.ensure_future(_watch_stall(cwd, stall, lambda: last_line, stalled)))
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if not tasks[0].done():
            stopped = "stall" if stalled.is_set() else "budget"
    finally:
        for task in tasks[1:]:
            task.cancel()
        await _kill_group(proc.pid, grace, lambda: proc.returncode is not None)
        await proc.wait()
        if reading is not None:  # the pipes close once nothing of the group holds them
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reading), timeout=2)
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
    return Ran(proc.returncode or 0, "\n".join(out), "\n".join(err), stopped)


class FileTail:
    """The lines another process appends to a file, each handed to ``on_line`` once, as :meth:`read` finds them."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self.path: Path | None = None
        self.offset = 0
        self.pending = b""

    def read(self, path: Path | None) -> None:
        """Hand on the whole lines appended to ``path`` since the last read (a file cut shorter is read again)."""
        if path is None:
            return
        if path != self.path or path.stat().st_size < self.offset:
            self.path, self.offset, self.pending = path, 0, b""
        with path.open("rb") as file:
            file.seek(self.offset)
            data = file.read()
        self.offset += len(data)
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            self.on_line(line.decode("utf-8", "replace"))


class OutputLog:
    """The step's agent-output log: each line the agent prints, appended as it comes (a log, not state)."""

    def __init__(self, path: Path | None, label: str) -> None:
        self.label = label
        self.fd: int | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(self, stream: str, text: str) -> None:
        """Append one line (secrets redacted), stamped; one write, so parallel calls' lines do not mix."""
        if self.fd is None:
            return
        from stepline.guardrails import redact
        from stepline.time import now_iso

        data = f"{now_iso()} {self.label} {stream}| {redact(text.rstrip())}\n".encode("utf-8", "replace")
        try:
            os.write(self.fd, data)
        except OSError:  # a full disk: the journal (the truth) says so; watching stops, the call goes on
            self.close()

    def close(self) -> None:
        """Stop logging."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> OutputLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
