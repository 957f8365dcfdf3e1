"""A budget an executor call may not run past: what its caller has left, in tokens and dollars.

A caller (the sprint loop, with an ``enforce`` budget) puts the budget in the request's hints under
``"budget"``; an executor that learns its usage while it runs (the ``cli-agent`` executor reads the usage a
coding-agent CLI streams) stops the call once the usage crosses it. Calls that share a ``pool`` (the parallel
review layers of one stage) share what is left: their usages are summed. A budget may sit ``within`` another
that calls of other pools share too (the sprint loop's, shared by the stories running at once): a call is
stopped when either is crossed, and when the enclosing one is, every call within it is.

A call's usage is a :class:`~stepline.executors._usage.Usage` (its tokens: the whole prompt and the output), its
dollars weighed by the budget's :class:`~stepline.executors._usage.PriceTable` (the cost the CLI reported, else its
model's price, else the table's fallback) — the one weighing ``stepline cost`` and the sprint loop use too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from stepline.errors import UsageError
from stepline.executors._usage import DEFAULT_PRICES, PriceTable, Usage

__all__ = ["BUDGET_HINT", "CallBudget", "Meters", "SharedMeter"]

#: The hint a caller puts a :class:`CallBudget` under (as :meth:`CallBudget.to_hint`).
BUDGET_HINT = "budget"


@dataclass(frozen=True, slots=True)
class CallBudget:
    """What a call (or the calls of its pool) may still spend; ``what`` says whose budget it is, in words."""

    tokens: float | None = None
    cost_usd: float | None = None
    prices: PriceTable = DEFAULT_PRICES
    what: str = "the budget"
    pool: str | None = None
    #: The budget enclosing this one, shared with the calls of other pools (None: none).
    within: CallBudget | None = None

    def to_hint(self) -> dict[str, Any]:
        """Plain JSON, for ``hints["budget"]``."""
        return {"tokens": self.tokens, "cost_usd": self.cost_usd, "what": self.what, "pool": self.pool,
                "prices": self.prices.to_dict(), "within": None if self.within is None else self.within.to_hint()}

    @classmethod
    def from_hints(cls, hints: Mapping[str, Any]) -> CallBudget | None:
        """The budget a request carries, or None."""
        raw = hints.get(BUDGET_HINT)
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise UsageError(f"the request's budget hint must be a mapping, not {type(raw).__name__}")
        try:
            return cls(tokens=None if raw.get("tokens") is None else float(raw["tokens"]),
                       cost_usd=None if raw.get("cost_usd") is None else float(raw["cost_usd"]),
                       prices=PriceTable.from_dict(raw["prices"]) if raw.get("prices") else DEFAULT_PRICES,
                       what=str(raw.get("what") or "the budget"), pool=raw.get("pool"),
                       within=cls.from_hints({BUDGET_HINT: raw["within"]}) if raw.get("within") else None)
        except (TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"the request's budget hint is not understood: {exc}") from None

    def crossed(self, spent: Usage) -> str | None:
        """Why ``spent`` is past this budget, in words; None while it is within."""
        if self.tokens is not None and spent.tokens > self.tokens:
            return f"{self.what}: {spent.tokens:.0f} tokens > the {self.tokens:.0f} left"
        if self.cost_usd is not None and (spent.cost_usd or 0.0) > self.cost_usd:
            return f"{self.what}: ${spent.cost_usd:.4f} > the ${self.cost_usd:.4f} left"
        return None

    def spent_before(self) -> str | None:
        """Why a call may not even start: nothing is left (an earlier call spent it); None when something is."""
        if self.tokens is not None and self.tokens <= 0:
            return f"{self.what}: nothing is left ({-self.tokens:.0f} tokens over before this call)"
        if self.cost_usd is not None and self.cost_usd <= 0:
            return f"{self.what}: nothing is left (${-self.cost_usd:.4f} over before this call)"
        return None


class SharedMeter:
    """The usage of the live calls of one pool, against their budget; ``crossed`` is set once it is past, or once
    the meter it is ``within`` is."""

    def __init__(self, budget: CallBudget, within: SharedMeter | None = None) -> None:
        self.budget = budget
        self.within = within
        self.spent: dict[object, Usage] = {}
        self.crossed = asyncio.Event()
        self.reason: str | None = budget.spent_before() or (within.reason if within is not None else None)
        self.users = 0
        self.inner: list[SharedMeter] = []  # the live meters within this one
        if within is not None:
            within.inner.append(self)
        if self.reason is not None:
            self.crossed.set()

    def report(self, call: object, usage: Usage, model: str | None = None) -> None:
        """Call ``call`` (a key no other call shares) of ``model`` has used ``usage`` so far (its total, not an
        increment), weighed at the budget's prices; the meter this one is within is told too."""
        self.spent[call] = self.budget.prices.priced(usage, model)
        if self.reason is None and (reason := self.budget.crossed(sum(self.spent.values(), Usage()))):
            self._stop(reason)
        if self.within is not None:
            self.within.report(call, usage, model)

    def _stop(self, reason: str) -> None:
        """Past the budget: this pool's calls, and those of every pool within it, are stopped for ``reason``."""
        self.reason = self.reason or reason
        self.crossed.set()
        for inner in self.inner:
            if inner.reason is None:
                inner._stop(reason)


class Meters:
    """The live meters of one executor's calls, by pool."""

    def __init__(self) -> None:
        self._live: dict[str, SharedMeter] = {}

    @contextlib.contextmanager
    def join(self, budget: CallBudget | None) -> Iterator[SharedMeter | None]:
        """The meter a call under ``budget`` reports its usage to while it runs (None without a budget): its pool's,
        made with ``budget`` by the pool's first live call (the later ones share what it had left), within the
        meter of the budget enclosing it."""
        if budget is None:
            yield None
            return
        with self.join(budget.within) as outer:
            meter = self._live.get(budget.pool) if budget.pool else None
            if meter is None:
                meter = SharedMeter(budget, outer)
                if budget.pool:
                    self._live[budget.pool] = meter
            meter.users += 1
            try:
                yield meter
            finally:
                meter.users -= 1
                if meter.users == 0:
                    if budget.pool:
                        self._live.pop(budget.pool, None)
                    if outer is not None:
                        outer.inner.remove(meter)
