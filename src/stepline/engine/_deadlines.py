"""Step timeouts that cost next to nothing when steps finish in time (which is almost always).

``asyncio.timeout`` arms a timer for each step and cancels it when the step ends: a heap push and a cancelled
handle per step, about a tenth of a no-op step's whole cost. :class:`Deadlines` keeps one timer for all the
steps running, armed for the earliest deadline. A step that finishes leaves the timer alone; when the timer
fires it cancels the steps that are past their deadline and re-arms itself for the next one. Steps of one run
mostly share a timeout and start in order, so a long run arms the timer a handful of times in all.

Within a step the semantics are those of ``asyncio.timeout``: the step's task is cancelled at its deadline, and
the ``CancelledError`` that ends the ``with`` block becomes a ``TimeoutError`` — unless the task was also
cancelled from outside, which then wins.
"""

from __future__ import annotations

import asyncio
import math
import time
from types import TracebackType

__all__ = ["Deadlines"]

#: The event loop runs a timer this much early (its clock's resolution); the timer counts such a deadline as due.
_RESOLUTION = time.get_clock_info("monotonic").resolution


class _Limit:
    """One step's deadline, as a context manager around its work."""

    __slots__ = ("_book", "_cancelling", "_task", "expired", "when")

    def __init__(self, book: Deadlines, when: float) -> None:
        self._book = book
        self.when = when
        self.expired = False
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a step deadline needs to be entered inside a task")
        self._task = task
        self._cancelling = 0

    def __enter__(self) -> _Limit:
        self._cancelling = self._task.cancelling()
        self._book._add(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._book._limits.discard(self)
        # Ours was the cancel, and no one else's came with it: the step ran out of time.
        if self.expired and self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc

    def expire(self) -> None:
        self.expired = True
        self._task.cancel()


class Deadlines:
    """The deadlines of the steps running on one event loop, watched by a single timer."""

    def __init__(self) -> None:
        self._limits: set[_Limit] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def limit(self, seconds: float | None) -> _Limit | _NoLimit:
        """A context manager that cancels the current task ``seconds`` from now (None: never)."""
        if seconds is None:
            return _NO_LIMIT
        return _Limit(self, asyncio.get_running_loop().time() + seconds)

    def close(self) -> None:
        """Disarm the timer (the loop it was armed on is going away)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf

    def _add(self, limit: _Limit) -> None:
        self._limits.add(limit)
        if limit.when < self._timer_at:
            self._arm(limit.when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(when, self._fire)
        self._timer_at = when

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = asyncio.get_running_loop().time() + _RESOLUTION
        earliest = math.inf
        for limit in list(self._limits):
            if limit.when <= now:
                self._limits.discard(limit)
                limit.expire()
            else:
                earliest = min(earliest, limit.when)
        if earliest != math.inf:
            self._arm(earliest)


class _NoLimit:
    """The context manager for a step without a timeout."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LIMIT = _NoLimit()
