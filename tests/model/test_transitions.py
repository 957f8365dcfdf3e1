"""The RunStep transition table of seed 004, exhaustively."""

from __future__ import annotations

import itertools

import pytest

from stepline.model import ALLOWED_TRANSITIONS, InvalidTransition, RunStep, StepStatus

ALLOWED = {
    ("pending", "running"), ("pending", "skipped"),
    ("running", "completed"), ("running", "failed"), ("running", "blocked"),
    ("failed", "running"), ("blocked", "running"),
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(StepStatus, StepStatus)))
def test_every_transition_is_allowed_or_raises(source: StepStatus, target: StepStatus) -> None:
    """Exactly the seed-004 transitions succeed; every other one raises InvalidTransition."""
    step = RunStep(step_id="s", status=source)
    if (source.value, target.value) in ALLOWED:
        step.transition(target)
        assert step.status == target
    else:
        with pytest.raises(InvalidTransition, match=f"{source.value} -> {target.value}"):
            step.transition(target)
        assert step.status == source


def test_completed_is_terminal() -> None:
    """Completed allows no transition at all."""
    assert ALLOWED_TRANSITIONS[StepStatus.COMPLETED] == frozenset()
