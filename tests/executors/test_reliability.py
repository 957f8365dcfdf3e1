"""Retries with backoff, the circuit breaker and the HTTP error classification, without a network."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from stepline.errors import ExecutorError
from stepline.executors._llm import status_error, transport_error
from stepline.executors._reliability import Backoff, CircuitBreaker, CircuitOpenError, Reliability


class Clock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def failing(*errors: ExecutorError | None) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    """A request that raises the given errors in turn (None = succeed), counting its calls."""
    calls: list[int] = []

    async def request() -> str:
        calls.append(1)
        error = errors[min(len(calls), len(errors)) - 1]
        if error is not None:
            raise error
        return "ok"

    return calls, request


def reliability(clock: Clock, delays: list[float], *, retries: int = 3, threshold: int = 5) -> Reliability:
    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    return Reliability("fake", backoff=Backoff(retries=retries, base_seconds=1.0, max_seconds=4.0, jitter=0.0),
                       breaker=CircuitBreaker("fake", failure_threshold=threshold, reset_seconds=10, clock=clock),
                       sleep=sleep, rng=random.Random(1))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 409, 422])
def test_client_errors_are_not_retryable(status: int) -> None:
    """4xx answers other than 429 are the request's fault and never retried."""
    assert status_error("p", status, "no").retryable is False


@pytest.mark.parametrize("status", [429, 500, 502, 503, 529])
def test_rate_limits_and_server_errors_are_retryable(status: int) -> None:
    """429 and 5xx may pass by themselves."""
    assert status_error("p", status, "busy").retryable is True


def test_timeouts_and_connection_errors_are_retryable() -> None:
    """No answer at all is worth another try."""
    assert transport_error("p", "boom", timeout=1.0).retryable
    assert transport_error("p", "refused").retryable


def test_retries_with_exponential_backoff_until_success() -> None:
    """Two retryable failures are retried after 1s then 2s; the third try's result is returned."""
    delays: list[float] = []
    calls, request = failing(status_error("p", 429, "slow"), status_error("p", 500, "oops"), None)
    assert asyncio.run(reliability(Clock(), delays).call(request)) == "ok"
    assert len(calls) == 3 and delays == [1.0, 2.0]


def test_backoff_is_capped_and_jittered() -> None:
    """Delays double up to the cap and stay within the jitter band."""
    backoff = Backoff(retries=9, base_seconds=1.0, max_seconds=4.0, jitter=0.5)
    rng = random.Random(7)
    delays = [backoff.delay(n, rng) for n in range(1, 6)]
    assert 0.5 <= delays[0] <= 1.5 and 1.0 <= delays[1] <= 3.0
    assert all(2.0 <= d <= 6.0 for d in delays[2:])
    assert len(set(delays)) == len(delays)


def test_non_retryable_error_is_raised_at_once() -> None:
    """A 400 is raised after one call, without sleeping."""
    delays: list[float] = []
    calls, request = failing(status_error("p", 400, "bad"))
    with pytest.raises(ExecutorError, match="HTTP 400"):
        asyncio.run(reliability(Clock(), delays).call(request))
    assert len(calls) == 1 and delays == []


def test_gives_up_after_the_retry_budget() -> None:
    """The last retryable error is raised once the retries are spent."""
    delays: list[float] = []
    calls, request = failing(status_error("p", 503, "down"))
    with pytest.raises(ExecutorError, match="HTTP 503"):
        asyncio.run(reliability(Clock(), delays, retries=2).call(request))
    assert len(calls) == 3 and len(delays) == 2


def test_breaker_opens_fails_fast_then_half_opens_and_closes() -> None:
    """After the threshold calls fail without a request; after the reset time one trial closes it again."""
    clock, delays = Clock(), list[float]()
    policy = reliability(clock, delays, retries=0, threshold=2)
    calls, request = failing(status_error("p", 500, "x"), status_error("p", 500, "x"), None)

    async def scenario() -> None:
        for _ in range(2):
            with pytest.raises(ExecutorError, match="HTTP 500"):
                await policy.call(request)
        assert policy.breaker.state == "open"
        with pytest.raises(CircuitOpenError, match="circuit open after 2 consecutive failures"):
            await policy.call(request)
        assert len(calls) == 2
        clock.now = 10.0
        assert policy.breaker.state == "half-open"
        assert await policy.call(request) == "ok"
        assert policy.breaker.state == "closed"

    asyncio.run(scenario())
    assert len(calls) == 3


def test_failed_trial_reopens_the_breaker() -> None:
    """A half-open trial that fails opens the breaker for another reset period."""
    clock = Clock()
    breaker = CircuitBreaker("p", failure_threshold=1, reset_seconds=10, clock=clock)
    breaker.record_failure()
    clock.now = 11.0
    breaker.check()
    breaker.record_failure()
    assert breaker.state == "open"
    clock.now = 20.0
    with pytest.raises(CircuitOpenError):
        breaker.check()


def test_retrying_stops_when_the_breaker_opens() -> None:
    """Retries within one call stop as soon as the failures reach the breaker's threshold."""
    delays: list[float] = []
    calls, request = failing(status_error("p", 500, "x"))
    with pytest.raises(ExecutorError, match="HTTP 500"):
        asyncio.run(reliability(Clock(), delays, retries=5, threshold=3).call(request))
    assert len(calls) == 3 and len(delays) == 2


def test_a_refused_request_does_not_count_as_a_failure() -> None:
    """A 400 shows the server is up: it resets the consecutive failure count."""
    delays: list[float] = []
    policy = reliability(Clock(), delays, retries=0, threshold=2)
    _, request = failing(status_error("p", 500, "x"), status_error("p", 400, "bad"), status_error("p", 500, "x"))

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(ExecutorError):
                await policy.call(request)

    asyncio.run(scenario())
    assert policy.breaker.state == "closed"
