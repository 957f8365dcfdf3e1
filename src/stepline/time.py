"""The one source of time for stepline.

Every timestamp stepline writes (events, RunStep.started_at, approvals, evidence dates, run ids) comes from
:func:`now`. Tests replace the clock with :func:`frozen` or :func:`use_clock`; nothing else in the package
calls ``datetime.now`` or ``time.time`` for a timestamp (monotonic clocks for measuring durations are fine).
"""

from __future__ import annotations

import contextlib
import threading
import time as _time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from stepline.errors import UsageError

__all__ = [
    "DEFAULT_TIMEZONE",
    "FrozenClock",
    "frozen",
    "isoformat",
    "now",
    "now_in",
    "now_iso",
    "use_clock",
]

#: The timezone getCurrentTime uses when neither the call nor ``time.default_timezone`` names one
#: (seed 004 names America/Toronto).
DEFAULT_TIMEZONE = "America/Toronto"

Clock = Callable[[], datetime]


def _system_clock() -> datetime:
    return datetime.now(UTC)


_lock = threading.Lock()
_clock: Clock = _system_clock


def now() -> datetime:
    """Return the current time as an aware UTC datetime, from the installed clock."""
    return _clock()


def isoformat(moment: datetime) -> str:
    """Format an aware datetime as ISO 8601 with microseconds and offset (``2026-11-22T13:46:00.000000+00:00``)."""
    return moment.isoformat(timespec="microseconds")


def now_iso() -> str:
    """Return :func:`now` as an ISO-8601 string (what :func:`isoformat` gives, for every clock)."""
    if _clock is not _system_clock:
        return isoformat(_clock())
    # The journal stamps every record: formatting from the epoch, reusing the text of the current second,
    # costs a tenth of ``datetime.isoformat``.
    global _second
    seconds, micros = divmod(_time.time_ns() // 1000, 1_000_000)
    if _second[0] != seconds:
        _second = (seconds, _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(seconds)))
    return f"{_second[1]}.{micros:06d}+00:00"


_second: tuple[int, str] = (-1, "")


def now_in(timezone: str) -> datetime:
    """Return :func:`now` in the IANA ``timezone``; an unknown name is a :class:`UsageError`."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise UsageError(f"unknown timezone {timezone!r}", hint="use an IANA name such as 'UTC' or "
                         "'Europe/Paris'") from exc
    return now().astimezone(zone)


class FrozenClock:
    """A clock for tests: returns a fixed instant, moved on only by :meth:`advance` or ``tick``."""

    def __init__(self, start: datetime, tick: timedelta = timedelta(0)) -> None:
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        self.current = start
        self.tick = tick

    def __call__(self) -> datetime:
        value = self.current
        self.current = self.current + self.tick
        return value

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward by ``delta``."""
        self.current = self.current + delta


@contextlib.contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Install ``clock`` as the time source for the duration of the block."""
    global _clock
    with _lock:
        previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        with _lock:
            _clock = previous


@contextlib.contextmanager
def frozen(at: datetime | str = "2026-01-01T00:00:00+00:00", tick_ms: int = 0) -> Iterator[FrozenClock]:
    """Freeze time at ``at`` (an ISO string or datetime); each read advances it by ``tick_ms``."""
    start = datetime.fromisoformat(at) if isinstance(at, str) else at
    clock = FrozenClock(start, timedelta(milliseconds=tick_ms))
    with use_clock(clock):
        yield clock
