"""What the agents' calls cost: tokens and dollars from the executors' reported usage, weighed as a call's
budget is (:func:`stepline.executors._budget.weigh`; pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stepline.executors._budget import Prices, Usage, weigh

__all__ = ["Usage", "over_limit", "usage_of_calls"]


def usage_of_calls(records: Iterable[Mapping[str, Any]], prices: Prices) -> Usage:
    """Sum the usage the executors journaled with their calls (a memo result carrying ``usage``)."""
    total = Usage()
    for record in records:
        result = record.get("result")
        if str(record.get("op", "")).startswith("memo:") and isinstance(result, Mapping):
            usage = result.get("usage")
            if isinstance(usage, Mapping):
                total = total + weigh(usage, prices)
    return total


def over_limit(usage: Usage, tokens: float | None, cost_usd: float | None) -> str | None:
    """Which limit ``usage`` is past, said in words; None when within both."""
    if tokens is not None and usage.tokens > tokens:
        return f"{usage.tokens:.0f} tokens > the limit of {tokens:.0f}"
    if cost_usd is not None and usage.cost_usd > cost_usd:
        return f"${usage.cost_usd:.4f} > the limit of ${cost_usd:.4f}"
    return None
