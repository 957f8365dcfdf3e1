"""Reliability for calls to a remote model: retries with exponential backoff and jitter, and a circuit breaker.

Only failures that may go away by themselves are retried — rate limits (429), server errors (5xx), timeouts and
connection errors, i.e. :class:`~stepline.errors.ExecutorError` with ``retryable=True``. A request the server
refused (400–409) fails at once: sending it again would only be refused again. The breaker counts consecutive
retryable failures; once it opens, calls fail fast without touching the network until ``reset_seconds`` have
passed, then one trial call (half-open) decides whether it closes again.

Clock, sleep and randomness are injected so tests never wait on the wall clock.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from stepline.errors import ExecutorError

__all__ = ["Backoff", "CircuitBreaker", "CircuitOpenError", "Reliability"]

T = TypeVar("T")
BreakerState = Literal["closed", "open", "half-open"]


class CircuitOpenError(ExecutorError):
    """The provider failed too often in a row; calls fail fast until the breaker's reset time has passed."""

    def __init__(self, provider: str, failures: int, retry_in: float) -> None:
        super().__init__(f"{provider}: circuit open after {failures} consecutive failures; no request sent",
                         retryable=True, hint=f"the next trial request is allowed in {retry_in:.1f}s")
        self.retry_in = retry_in


@dataclass(frozen=True, slots=True)
class Backoff:
    """How often and how long to wait between tries of one request."""

    retries: int = 3
    base_seconds: float = 0.5
    max_seconds: float = 8.0
    jitter: float = 0.25

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based): base·2^(retry-1), capped, ± jitter."""
        base = min(self.base_seconds * 2.0 ** (retry - 1), self.max_seconds)
        return max(0.0, base * (1 + rng.uniform(-self.jitter, self.jitter)))


class CircuitBreaker:
    """Counts consecutive failures of one provider and stops sending requests while it is down."""

    def __init__(self, provider: str, *, failure_threshold: int = 5, reset_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.provider = provider
        self.failure_threshold = failure_threshold
        self.reset_seconds = reset_seconds
        self.clock = clock
        self.failures = 0
        self.opened_at: float | None = None

    @property
    def state(self) -> BreakerState:
        """``closed`` (requests flow), ``open`` (fail fast) or ``half-open`` (one trial request allowed)."""
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.clock() - self.opened_at >= self.reset_seconds else "open"

    def check(self) -> None:
        """Raise :class:`CircuitOpenError` when the breaker is open; otherwise let the request go."""
        if self.state == "open":
            assert self.opened_at is not None
            raise CircuitOpenError(self.provider, self.failures,
                                   self.reset_seconds - (self.clock() - self.opened_at))

    def record_success(self) -> None:
        """The provider answered: close the breaker."""
        self.failures = 0
        self.opened_at = None

    def record_failure(self) -> None:
        """A retryable failure: open the breaker at the threshold (and re-open it after a failed trial)."""
        self.failures += 1
        if self.failures >= self.failure_threshold or self.opened_at is not None:
            self.opened_at = self.clock()


class Reliability:
    """Runs one request with the breaker and the backoff policy; what a provider call goes through."""

    def __init__(self, provider: str, *, backoff: Backoff | None = None, breaker: CircuitBreaker | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep, rng: random.Random | None = None) -> None:
        self.provider = provider
        self.backoff = backoff or Backoff()
        self.breaker = breaker or CircuitBreaker(provider)
        self.sleep = sleep
        self.rng = rng or random.Random()

    async def call(self, request: Callable[[], Awaitable[T]]) -> T:
        """Run ``request``; retry retryable :class:`ExecutorError`s with backoff, never other errors."""
        retry = 0
        while True:
            self.breaker.check()
            try:
                result = await request()
            except ExecutorError as exc:
                if not exc.retryable:
                    # The server answered (it refused the request): it is up, so this is no breaker failure.
                    self.breaker.record_success()
                    raise
                self.breaker.record_failure()
                retry += 1
                if retry > self.backoff.retries or self.breaker.state == "open":
                    raise
                await self.sleep(self.backoff.delay(retry, self.rng))
                continue
            self.breaker.record_success()
            return result
