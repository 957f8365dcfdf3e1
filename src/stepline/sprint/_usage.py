"""What the agents' calls cost: tokens and dollars from the executors' reported usage, weighed as a call's
budget is (:func:`stepline.executors._budget.weigh`; pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stepline.executors._budget import Prices, weigh

__all__ = ["Usage", "over_limit", "usage_of_calls"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and dollars, summed."""

    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cache_read_tokens: float = 0.0
    cost_usd: float = 0.0
    calls: int = 0

    @property
    def tokens(self) -> float:
        """Every token counted (cache reads too: they are tokens the model read)."""
        return self.input_tokens + self.output_tokens + self.cache_read_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cache_read_tokens + other.cache_read_tokens, self.cost_usd + other.cost_usd,
                     self.calls + other.calls)

    def to_dict(self) -> dict[str, float]:
        """Plain JSON (a run variable)."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "cost_usd": round(self.cost_usd, 6),
                "calls": self.calls}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Usage:
        """Back from :meth:`to_dict`."""
        return cls(float(raw.get("input_tokens") or 0), float(raw.get("output_tokens") or 0),
                   float(raw.get("cache_read_tokens") or 0), float(raw.get("cost_usd") or 0),
                   int(raw.get("calls") or 0))


def _one(raw: Mapping[str, Any], prices: Prices) -> Usage:
    spent = weigh(raw, prices)
    return Usage(spent.input_tokens, spent.output_tokens, spent.cache_read_tokens, spent.cost_usd, 1)


def usage_of_calls(records: Iterable[Mapping[str, Any]], prices: Prices) -> Usage:
    """Sum the usage the executors journaled with their calls (a memo result carrying ``usage``)."""
    total = Usage()
    for record in records:
        result = record.get("result")
        if str(record.get("op", "")).startswith("memo:") and isinstance(result, Mapping):
            usage = result.get("usage")
            if isinstance(usage, Mapping):
                total = total + _one(usage, prices)
    return total


def over_limit(usage: Usage, tokens: float | None, cost_usd: float | None) -> str | None:
    """Which limit ``usage`` is past, said in words; None when within both."""
    if tokens is not None and usage.tokens > tokens:
        return f"{usage.tokens:.0f} tokens > the limit of {tokens:.0f}"
    if cost_usd is not None and usage.cost_usd > cost_usd:
        return f"${usage.cost_usd:.4f} > the limit of ${cost_usd:.4f}"
    return None
