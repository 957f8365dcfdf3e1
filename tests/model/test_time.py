"""The time provider: the journal's fast ISO stamp says what ``datetime.isoformat`` would."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stepline import time


def test_now_iso_with_the_system_clock_is_the_isoformat_of_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """At many instants (the cached text of the current second must roll over), the stamp is what
    ``isoformat`` gives; and unpatched, it is the current time."""
    for seconds in (0, 59, 86_399, 1_800_000_000, 1_800_000_001, 4_102_444_799, 59):
        moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=123_456)
        monkeypatch.setattr(time._time, "time_ns", lambda s=seconds: s * 10**9 + 123_456_789)
        assert time.now_iso() == time.isoformat(moment)
    monkeypatch.undo()
    before = time.now()
    stamp = datetime.fromisoformat(time.now_iso())
    assert stamp.tzinfo is not None and 0 <= (stamp - before).total_seconds() < 1


def test_now_iso_follows_a_frozen_clock() -> None:
    with time.frozen("2026-01-02T03:04:05.000006+00:00"):
        assert time.now_iso() == "2026-01-02T03:04:05.000006+00:00"
