"""Escalation within a budget: which shards go into a step's context, and at which tier.

Phase 1 takes the retrieved shards, best first, at the first tier of ``telis_phase_tiers`` (``nano`` by
default) while they fit the budget. Each later phase, up to ``telis_max_phase``, raises the shards one by one,
best first, to that phase's tier. Escalation stops for good at the first shard whose next tier does not fit:
what is in the context then stays as it is, so the best shards are the richest and the total never passes
the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from stepline.context._shards import Shard
from stepline.context._tiers import Tier
from stepline.context._tokens import estimate_tokens

__all__ = ["Chosen", "Selection", "select_within_budget"]

#: Why escalation ended: every shard reached the last allowed tier (``max_phase`` or the tiers' end) or the
#: next raise did not fit (``budget``).
Stop = Literal["max_phase", "budget", "no_shards"]


@dataclass(slots=True)
class Chosen:
    """A shard in the context, at its tier."""

    shard: Shard
    score: float
    tier: Tier
    tokens: int


@dataclass(slots=True)
class Selection:
    """What escalation chose: the shards, the last phase it reached, why it stopped, the tokens used."""

    chosen: list[Chosen] = field(default_factory=list)
    phase: int = 0
    stopped: Stop = "no_shards"
    tokens: int = 0
    left_out: int = 0  # retrieved shards that did not fit even at the first tier


def select_within_budget(hits: list[tuple[Shard, float]], tiers: list[Tier], max_phase: int,
                         budget: int) -> Selection:
    """Choose shards and tiers for ``hits`` (best first) as the module docstring says."""
    allowed = tiers[: max(1, max_phase)]
    result = Selection()
    if not hits or not allowed:
        return result
    first = allowed[0]
    for shard, score in hits:
        tokens = estimate_tokens(shard.text(first))
        if result.tokens + tokens > budget:
            result.stopped = "budget"
            result.left_out = len(hits) - len(result.chosen)
            break
        result.chosen.append(Chosen(shard, score, first, tokens))
        result.tokens += tokens
    if not result.chosen:
        return result
    result.phase = 1
    for phase, tier in enumerate(allowed[1:], start=2):
        if result.stopped == "budget":
            break
        for item in result.chosen:
            tokens = estimate_tokens(item.shard.text(tier))
            if result.tokens - item.tokens + tokens > budget:
                result.stopped = "budget"
                break
            result.phase = phase
            result.tokens += tokens - item.tokens
            item.tier, item.tokens = tier, tokens
    if result.stopped != "budget":
        result.stopped = "max_phase"
    return result
