"""The runs the dashboard continues: once a person has decided a run's last pending gate in the browser, the server
resumes the run itself, with the executor it was started with, until it completes, fails or blocks at its next
question (a gate to decide on its page again). No terminal is needed.

Each run goes on in a thread of its own with its own event loop, so the pages keep answering while a step works.
The run's lock keeps it to one driving process at a time, as everywhere: a run another process drives is refused,
not driven twice. A run only a person at a terminal can drive (:meth:`RunService.unattended`) is never started
here: its page says why and which command goes on. When the server stops, the runs it drives are stopped as
Ctrl-C stops a CLI run: each stays resumable where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stepline.errors import RunStateError, SteplineError, UsageError

if TYPE_CHECKING:
    from stepline.service import RunService

__all__ = ["Continuation", "Continuations"]


@dataclass
class Continuation:
    """One run this server continues (or continued): whether it is still at work, and the error that stopped it
    before it could go on (its lock held by another process, say)."""

    run_id: str
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    _task: asyncio.Task[object] | None = None

    @property
    def active(self) -> bool:
        return not self.done.is_set()


class Continuations:
    """The runs this server continues, by run id."""

    def __init__(self, runs: RunService) -> None:
        self._runs = runs
        self._lock = threading.Lock()
        self._by_run: dict[str, Continuation] = {}
        self._closed = False

    def get(self, run_id: str) -> Continuation | None:
        """The latest continuation of ``run_id`` by this server, if any."""
        with self._lock:
            return self._by_run.get(run_id)

    def start(self, run_id: str) -> Continuation:
        """Resume ``run_id`` in the background (already under way here: that one).

        Raises:
            UsageError: the run cannot go on without a person at a terminal (why, and the command that does).
            RunStateError: another process drives it now, or the server is stopping.
        """
        run_dir = self._runs.store.open(run_id)
        why = self._runs.unattended(run_dir)
        if why is not None:
            raise UsageError(f"run {run_dir.run_id} cannot go on from the dashboard: {why}")
        with self._lock:
            if self._closed:
                raise RunStateError("the dashboard is stopping", hint=f"stepline resume {run_dir.run_id}")
            current = self._by_run.get(run_dir.run_id)
            if current is not None and current.active:
                return current
            holder = run_dir.holder()
            if holder is not None:
                raise RunStateError(f"run {run_dir.run_id} is driven by process {holder} now",
                                    hint="its page follows it; decide its next gate once it stops")
            continuation = Continuation(run_dir.run_id)
            self._by_run[run_dir.run_id] = continuation
        threading.Thread(target=self._drive, args=(continuation,), name=f"continue {run_dir.run_id}",
                         daemon=True).start()
        return continuation

    def _drive(self, continuation: Continuation) -> None:
        loop = asyncio.new_event_loop()
        try:
            with self._lock:
                if self._closed:  # stopped before it started: nothing was done
                    continuation.error = "the dashboard stopped before the run went on"
                    return
                continuation._loop = loop
                continuation._task = loop.create_task(self._runs.resume_unattended(continuation.run_id))
            loop.run_until_complete(continuation._task)
        except asyncio.CancelledError:
            continuation.error = (f"the dashboard stopped while the run went on: `stepline resume "
                                  f"{continuation.run_id}` continues it")
        except SteplineError as exc:
            continuation.error = exc.format_message()
        except Exception as exc:  # a thread's error would otherwise be printed and lost to the page
            continuation.error = f"{type(exc).__name__}: {exc}"
        finally:
            loop.close()
            continuation.done.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every run this server drives (each stays resumable where it was) and wait for them."""
        with self._lock:
            self._closed = True
            running = [c for c in self._by_run.values() if c.active]
        for continuation in running:
            loop, task = continuation._loop, continuation._task
            if loop is not None and task is not None:
                with contextlib.suppress(RuntimeError):  # it ended meanwhile: its loop is closed
                    loop.call_soon_threadsafe(task.cancel)
        for continuation in running:
            continuation.done.wait(timeout)
