"""Step deadlines: one timer for every running step, with asyncio.timeout's semantics inside a step."""

from __future__ import annotations

import asyncio

import pytest

from stepline.engine._deadlines import Deadlines


async def _sleep_within(deadlines: Deadlines, timeout: float | None, sleep: float) -> str:
    try:
        with deadlines.limit(timeout):
            await asyncio.sleep(sleep)
    except TimeoutError:
        return "timed out"
    return "finished"


def test_a_step_past_its_deadline_is_cancelled_and_sees_a_timeout() -> None:
    async def main() -> tuple[str, float]:
        deadlines = Deadlines()
        loop = asyncio.get_running_loop()
        start = loop.time()
        outcome = await _sleep_within(deadlines, 0.05, 5)
        deadlines.close()
        return outcome, loop.time() - start

    outcome, took = asyncio.run(main())
    assert outcome == "timed out"
    assert took < 1  # cancelled at its deadline, not when the sleep ended


def test_a_shorter_deadline_after_a_longer_one_still_fires_on_time() -> None:
    """The timer is armed for the first (long) deadline; a later, earlier deadline must re-arm it."""
    async def main() -> list[str]:
        deadlines = Deadlines()
        long = asyncio.ensure_future(_sleep_within(deadlines, 30, 0.3))
        await asyncio.sleep(0)  # the long one is registered first
        short = asyncio.ensure_future(_sleep_within(deadlines, 0.05, 5))
        results = [await short, await long]
        deadlines.close()
        return results

    assert asyncio.run(asyncio.wait_for(main(), 3)) == ["timed out", "finished"]


def test_steps_finishing_in_time_leave_later_steps_their_own_deadline() -> None:
    """A finished step's deadline is forgotten: the timer firing for it must not cancel the step after it."""
    async def main() -> list[str]:
        deadlines = Deadlines()
        first = await _sleep_within(deadlines, 0.1, 0)  # arms the timer for 0.1 s from now and finishes
        second = await _sleep_within(deadlines, 0.3, 0.2)  # still running when the first's timer fires
        third = await _sleep_within(deadlines, 0.05, 1)
        deadlines.close()
        return [first, second, third]

    assert asyncio.run(main()) == ["finished", "finished", "timed out"]


def test_no_timeout_means_no_limit() -> None:
    async def main() -> str:
        deadlines = Deadlines()
        return await _sleep_within(deadlines, None, 0.01)

    assert asyncio.run(main()) == "finished"


def test_a_cancel_from_outside_is_not_turned_into_a_timeout() -> None:
    """The task's owner cancelling it at the same time as the deadline wins: CancelledError, as asyncio.timeout."""
    async def main() -> None:
        deadlines = Deadlines()

        async def step() -> None:
            with deadlines.limit(0.05):
                await asyncio.sleep(5)

        task = asyncio.ensure_future(step())
        await asyncio.sleep(0.03)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)  # the timer fires for a step already gone: nothing to cancel
        deadlines.close()

    asyncio.run(main())


def test_an_exception_other_than_the_cancel_passes_through() -> None:
    async def main() -> None:
        deadlines = Deadlines()
        with pytest.raises(ValueError), deadlines.limit(5):
            raise ValueError("the step's own failure")
        deadlines.close()

    asyncio.run(main())
