"""What the agents' calls cost: tokens and dollars from the executors' journaled usage, weighed as a call's
budget is (:class:`stepline.executors.PriceTable`; pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stepline.executors import Ledger, Price, PriceTable, Usage

__all__ = ["Usage", "budget_prices", "over_limit", "usage_of_calls"]


def budget_prices(table: PriceTable, input_per_mtok: float, output_per_mtok: float,
                  cache_read_per_mtok: float) -> PriceTable:
    """The runtime's price table, the budget's prices the fallback for a model it has none for (unless it has a
    fallback of its own)."""
    if table.fallback is not None:
        return table
    return PriceTable(table.models, Price(input_per_mtok, output_per_mtok, cache_read_per_mtok), table.as_of)


def usage_of_calls(records: Iterable[Mapping[str, Any]], prices: PriceTable) -> Usage:
    """Sum the usage the executors journaled with their calls (a memo result carrying ``usage``), weighed."""
    ledger = Ledger()
    for record in records:
        ledger.record("", None, str(record.get("key", "")), str(record.get("op", "")), record.get("result"))
    return ledger.total(prices)


def over_limit(usage: Usage, tokens: float | None, cost_usd: float | None) -> str | None:
    """Which limit ``usage`` is past, said in words; None when within both."""
    if tokens is not None and usage.tokens > tokens:
        return f"{usage.tokens:.0f} tokens > the limit of {tokens:.0f}"
    if cost_usd is not None and (usage.cost_usd or 0.0) > cost_usd:
        return f"${usage.cost_usd:.4f} > the limit of ${cost_usd:.4f}"
    return None
