"""The three tiers a shard exists at, and their sizes in estimated tokens (:mod:`stepline.context._tokens`)."""

from __future__ import annotations

from typing import Literal

__all__ = ["FULL_MIN_TOKENS", "TIERS", "TIER_TOKENS", "Tier"]

Tier = Literal["nano", "micro", "full"]
TIERS: tuple[Tier, ...] = ("nano", "micro", "full")
#: The size a made tier is cut to.
TIER_TOKENS: dict[str, int] = {"nano": 50, "micro": 500}
#: ``full`` is never cut below this many tokens.
FULL_MIN_TOKENS = 2000
