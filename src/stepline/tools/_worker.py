"""Run a Python tool handler in a child process that is really stopped on timeout or cancellation.

Each call gets a fresh interpreter started in its own session, so it leads its own process group: whatever
it starts (a shell, the shell's children) is in that group, and the group is killed with SIGKILL when the
call times out, is cancelled, or ends while leaving processes behind. A thread could not be stopped; a
forked copy of a multi-threaded engine could deadlock; a new interpreter is the slow but honest choice.
Tools that only run a program do not come here: they are commands (:mod:`stepline.tools._command`).

The call travels over stdin as two pickles (the parent's ``sys.path``, then handler, args and context) and
the answer comes back over the original stdout; the handler's own prints go to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO

from stepline.errors import SteplineError
from stepline.time import use_clock
from stepline.tools._spec import RunOutcome, ToolContext, ToolHandler, ToolOutput

__all__ = ["run_in_worker"]

_BOOTSTRAP = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
              "from stepline.tools._worker import child_main; child_main()")
_POLL_SECONDS = 0.05
_STDERR_TAIL = 2_000


def run_in_worker(handler: ToolHandler, args: dict[str, Any], ctx: ToolContext, *, timeout: float,
                  cancel: threading.Event | None = None) -> RunOutcome:
    """Run ``handler(args, ctx)`` in a new process with ``cwd`` = the project root, bounded by ``timeout``.

    Setting ``cancel`` stops the worker within a poll interval (the engine's step timeout uses it).
    """
    payload = pickle.dumps(sys.path) + pickle.dumps((handler, args, ctx))
    proc = subprocess.Popen(
        [sys.executable, "-c", _BOOTSTRAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=ctx.project_root, start_new_session=True)
    deadline = time.monotonic() + timeout
    pending: bytes | None = payload
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return RunOutcome("timeout", error=f"timed out after {timeout:g}s; the worker was killed",
                                     retryable=True, pid=proc.pid)
            if cancel is not None and cancel.is_set():
                return RunOutcome("cancelled", error="cancelled; the worker was killed", pid=proc.pid)
            try:
                out, err = proc.communicate(pending, timeout=min(remaining, _POLL_SECONDS))
                break
            except subprocess.TimeoutExpired:
                pending = None  # the input is buffered; a retried communicate() must not send it again
    finally:
        _kill_group(proc)
    return _decode(out, err, proc.returncode, proc.pid)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the worker's whole process group (it may be done and have left children behind), then reap."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    else:  # pragma: no cover - Windows has no process groups to kill
        proc.kill()
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a descendant that left the group still holds a pipe open
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()


def _decode(out: bytes, err: bytes, returncode: int, pid: int) -> RunOutcome:
    try:
        message = pickle.loads(out)
    except Exception:  # nothing (or garbage) came back: the interpreter died before answering
        tail = err.decode("utf-8", "replace")[-_STDERR_TAIL:].strip()
        return RunOutcome("error", error=f"the tool worker exited with code {returncode} without a result"
                             + (f": {tail}" if tail else ""), pid=pid)
    if message[0] == "ok":
        return RunOutcome("ok", output=message[1], pid=pid)
    return RunOutcome("error", error=message[1], retryable=message[2], pid=pid)


def child_main() -> None:
    """Entry point inside the worker: run the handler once and pickle the answer to the parent."""
    channel: BinaryIO = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a handler's print() must not corrupt the answer
    sys.stdout = sys.stderr
    handler, args, ctx = pickle.load(sys.stdin.buffer)
    pickle.dump(_call(handler, args, ctx), channel)
    channel.flush()


def _call(handler: ToolHandler, args: dict[str, Any], ctx: ToolContext) -> tuple[Any, ...]:
    try:
        with use_clock(lambda: ctx.now):
            value = handler(args, ctx)
        output = value if isinstance(value, ToolOutput) else ToolOutput(result=value)
        json.dumps(output.result)  # it is written to tool_results.json
    except SteplineError as exc:
        return ("error", exc.format_message(), exc.retryable)
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}", False)
    return ("ok", output)
