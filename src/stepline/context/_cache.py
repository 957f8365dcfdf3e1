"""A cache whose entries live for a fixed time (TTL), for shard corpora and language-server answers.

Time is the monotonic clock (injected, for tests): a TTL measures how long an answer may be reused, not
when anything happened, so it is not a timestamp and does not come from :mod:`stepline.time`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["TtlCache"]

V = TypeVar("V")


class TtlCache(Generic[V]):
    """Values by key, each reused for ``ttl_seconds`` after it was put (0: nothing is kept)."""

    def __init__(self, ttl_seconds: float, *, clock: Callable[[], float] = time.monotonic,
                 max_entries: int = 4096) -> None:
        self.ttl = ttl_seconds
        self._clock = clock
        self._max = max_entries
        self._entries: dict[str, tuple[float, V]] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> V | None:
        """The value put under ``key`` less than ``ttl`` ago, else None."""
        entry = self._entries.get(key)
        if entry is None or self._clock() - entry[0] >= self.ttl:
            if entry is not None:
                del self._entries[key]
            self.misses += 1
            return None
        self.hits += 1
        return entry[1]

    def put(self, key: str, value: V) -> None:
        """Keep ``value`` under ``key`` from now on (the oldest entry goes when the cache is full)."""
        if self.ttl <= 0:
            return
        self._entries.pop(key, None)
        if len(self._entries) >= self._max:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (self._clock(), value)

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()
