"""Weakest-link assurance (WLNK), expiry, and whether evidence meets a step's requirement (R-Q1)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from stepline.evidence._schema import EvidenceError, parse_moment
from stepline.model import Evidence
from stepline.time import now as clock_now

__all__ = ["CONGRUENCE_FACTORS", "LEVEL_RANK", "is_expired", "meets_requirement", "required_level", "score", "wlnk"]

#: How much of a record's reliability carries over to the claim, by congruence with the claim's context.
CONGRUENCE_FACTORS: dict[str, float] = {"CL1": 0.5, "CL2": 0.8, "CL3": 1.0}
#: Evidence levels in increasing strength; ``invalid`` is not a level and never counts.
LEVEL_RANK: dict[str, int] = {"L0": 0, "L1": 1, "L2": 2}
_REQUIREMENT = re.compile(r"\bL([0-2])\b")


def score(record: Evidence) -> float:
    """Return one record's contribution: reliability × congruence factor."""
    return record.reliability * CONGRUENCE_FACTORS[record.congruence]


def wlnk(records: Iterable[Evidence]) -> float:
    """Return the weakest link: the minimum :func:`score` over ``records``; no evidence is no assurance (0.0)."""
    return min((score(record) for record in records), default=0.0)


def is_expired(record: Evidence, now: datetime | None = None) -> bool:
    """Say whether ``record`` is past its ``valid_until`` at ``now`` (the time provider's now by default)."""
    if record.valid_until is None:
        return False
    moment = now if now is not None else clock_now()
    return moment >= parse_moment(record.valid_until, end_of_day=True)


def meets_requirement(records: Iterable[Evidence], requirement: str, now: datetime | None = None) -> bool:
    """Say whether some record is at least the required level (``L0`` < ``L1`` < ``L2``).

    ``requirement`` is a step's ``evidence`` field: ``"L1"``, or text naming a level (``"QUINT L1"``).
    Invalid records never count, and neither do expired ones.
    """
    needed = LEVEL_RANK[required_level(requirement)]
    return any(_rank(record) >= needed and not is_expired(record, now) for record in records)


def required_level(requirement: str) -> str:
    """Return the level a step's ``evidence`` requirement names: ``"L1"`` for ``"L1"`` or ``"QUINT L1"``.

    Raises :class:`EvidenceError` when it names none.
    """
    match = _REQUIREMENT.search(requirement)
    if match is None:
        raise EvidenceError(f"evidence requirement {requirement!r} names no level", hint="use L0, L1 or L2")
    return f"L{match.group(1)}"


def _rank(record: Evidence) -> int:
    return LEVEL_RANK.get(record.level, -1)
