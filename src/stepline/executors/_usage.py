"""Token usage: the one type every executor's report becomes, the ledger of a run's calls, and their prices.

:class:`Usage` counts as the OpenTelemetry GenAI conventions do: ``input_tokens`` is the whole prompt, its cached
part included; ``cache_read_tokens`` and ``cache_write_tokens`` say how much of it the provider read from or wrote
to its prompt cache; ``output_tokens`` is what the model wrote (reasoning included); ``cost_usd`` a cost the
provider reported (None: not reported). Each executor and agent CLI has a normalizer that makes one of what its
provider reports (next to the executor). A call journals it with its result (:meth:`Usage.to_record`);
:meth:`Usage.from_record` reads any recorded usage back, the older shape too (``input_tokens`` without the cached
part, cache reads as ``cached_input_tokens``).

:class:`Ledger`: a run's (or a loop's) journaled calls that carry usage, one :class:`Entry` each, with its run,
step, story, executor and model; summed by any of them. :class:`PriceTable` is the one weighing of usage into
dollars: the cost a provider reported, else the model's price (dollars per million tokens; :data:`DEFAULT_PRICES`
are list prices with the date they were taken), else the table's fallback, else unknown.

Replay-safe: nothing here reads a clock, a file or the network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["DEFAULT_PRICES", "ROW", "Entry", "Ledger", "Price", "PriceTable", "Usage", "entry_of", "usage_row"]

#: The token counts of a :class:`Usage`, as recorded.
COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _number(raw: Mapping[str, Any], name: str) -> float:
    """A recorded count: absent or null is 0; anything but a number is refused (a damaged record)."""
    value = raw.get(name)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"usage.{name} is not a number")
    return float(value)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one call, or summed over ``calls`` calls; ``cost_usd`` is a reported (or weighed) cost, None when
    unknown. A sum's cost is unknown when one of its calls' is."""

    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cache_read_tokens: float = 0.0
    cache_write_tokens: float = 0.0
    cost_usd: float | None = None
    calls: int = 0

    @property
    def tokens(self) -> float:
        """Every token the call moved: the whole prompt (cached part included) and the output."""
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> float:
        """The prompt's part neither read from nor written to a cache (billed at the full input price)."""
        return max(0.0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    def __add__(self, other: Usage) -> Usage:
        if self == _NONE:
            return other
        if other == _NONE:
            return self
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_tokens + other.cache_write_tokens, cost, self.calls + other.calls)

    def since(self, before: Usage) -> Usage:
        """What this running total (a CLI's session total) adds to ``before``, the total it started from."""
        cost = None if self.cost_usd is None else max(0.0, self.cost_usd - (before.cost_usd or 0.0))
        return Usage(max(0.0, self.input_tokens - before.input_tokens),
                     max(0.0, self.output_tokens - before.output_tokens),
                     max(0.0, self.cache_read_tokens - before.cache_read_tokens),
                     max(0.0, self.cache_write_tokens - before.cache_write_tokens), cost, max(1, self.calls))

    def to_record(self) -> dict[str, Any]:
        """Plain JSON, as a call journals it (and a run variable holds a sum): the four counts always (their
        presence marks this shape), the cost when known, the number of calls when not one."""
        record: dict[str, Any] = {name: _plain(getattr(self, name)) for name in COUNTS}
        if self.cost_usd is not None:
            record["cost_usd"] = round(self.cost_usd, 8)
        if self.calls != 1:
            record["calls"] = self.calls
        return record

    @classmethod
    def from_record(cls, raw: Mapping[str, Any]) -> Usage:
        """A recorded usage (a call's, or a sum's with ``calls``). The older shape — ``input_tokens`` without the
        cached part, cache reads as ``cached_input_tokens`` (or a sum's ``cache_read_tokens``), no
        ``cache_write_tokens`` in a sum — is read into this one. Raises TypeError on a count that is no number."""
        current = "cache_read_tokens" in raw and "cache_write_tokens" in raw
        read = _number(raw, "cache_read_tokens") or _number(raw, "cached_input_tokens")
        write = _number(raw, "cache_write_tokens")
        inp = _number(raw, "input_tokens") + (0.0 if current else read + write)
        cost = _number(raw, "cost_usd") if raw.get("cost_usd") is not None else None
        calls = raw.get("calls", 1)
        if isinstance(calls, bool) or not isinstance(calls, int | float):
            raise TypeError("usage.calls is not a number")
        return cls(inp, _number(raw, "output_tokens"), read, write, cost, int(calls))


_NONE = Usage()


def _plain(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


#: The columns of a usage table (``stepline show``, ``cost``, the dashboard): :func:`usage_row`'s keys.
ROW = ("calls", *COUNTS, "cost_usd")


def usage_row(usage: Usage) -> dict[str, float]:
    """``usage`` as a table's row: its calls, its counts and its cost (0 when unknown)."""
    return {"calls": usage.calls, **{name: _plain(getattr(usage, name)) for name in COUNTS},
            "cost_usd": round(usage.cost_usd or 0.0, 8)}


# -- prices ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens; a cache read or write without its own price is billed at ``input``'s (no
    discount is assumed that the provider did not state)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at these prices."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        return (usage.uncached_input_tokens * self.input + usage.cache_read_tokens * read
                + usage.cache_write_tokens * write + usage.output_tokens * self.output) / 1e6

    def to_dict(self) -> dict[str, float]:
        """Plain JSON (the keys a price table in config/runtime.yaml uses)."""
        return {name: value for name in ("input", "output", "cache_read", "cache_write")
                if (value := getattr(self, name)) is not None}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Price:
        """Back from :meth:`to_dict` (``cached_input``, the executors' older name for a cache read, too)."""
        known = {"input", "output", "cache_read", "cache_write", "cached_input"}
        if unknown := set(raw) - known:
            raise ValueError(f"unknown price key {sorted(unknown)[0]!r} (use input, output, cache_read, cache_write)")
        read = raw.get("cache_read", raw.get("cached_input"))
        return cls(float(raw.get("input", 0.0)), float(raw.get("output", 0.0)),
                   None if read is None else float(read),
                   None if raw.get("cache_write") is None else float(raw["cache_write"]))


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Prices by model name, a ``fallback`` for a model not in it (None: its cost is unknown), and the date the
    prices were taken (``as_of``)."""

    models: Mapping[str, Price] = field(default_factory=dict)
    fallback: Price | None = None
    as_of: str | None = None

    def price(self, model: str | None) -> Price | None:
        """The price of ``model`` (:meth:`listed`), else the fallback."""
        return self.listed(model) or self.fallback

    def listed(self, model: str | None) -> Price | None:
        """The table's own price of ``model``: under its name, else the longest name it starts with
        (``claude-sonnet-4-5`` for ``claude-sonnet-4-5-20250929``), a ``provider/`` prefix ignored."""
        if model:
            for name in (model, model.rpartition("/")[2]):
                if name in self.models:
                    return self.models[name]
                prefixes = [key for key in self.models if name.startswith(key)]
                if prefixes:
                    return self.models[max(prefixes, key=len)]
        return None

    @staticmethod
    def reported(usage: Usage) -> bool:
        """Whether ``usage``'s own cost counts: one was reported, and it is not $0 for tokens used (Claude Code
        for a model it has no price for)."""
        return usage.cost_usd is not None and (usage.cost_usd > 0 or not usage.tokens)

    def cost(self, usage: Usage, model: str | None) -> float | None:
        """The cost the provider reported for ``usage`` (:meth:`reported`), else its tokens at ``model``'s price;
        None when neither is known."""
        if self.reported(usage):
            return usage.cost_usd
        price = self.price(model)
        return None if price is None else price.cost(usage)

    def priced(self, usage: Usage, model: str | None) -> Usage:
        """``usage`` with its cost (:meth:`cost`)."""
        return replace(usage, cost_usd=self.cost(usage, model))

    def merged(self, models: Mapping[str, Price]) -> PriceTable:
        """This table with ``models``' prices put over its own."""
        return replace(self, models={**self.models, **models})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (a budget's hint carries it)."""
        return {"models": {name: price.to_dict() for name, price in self.models.items()},
                "fallback": None if self.fallback is None else self.fallback.to_dict(), "as_of": self.as_of}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PriceTable:
        """Back from :meth:`to_dict`; a flat price (``input``/``output``/``cache_read``) is a fallback alone."""
        if "models" not in raw and "fallback" not in raw:
            return cls(fallback=Price.from_dict(raw)) if raw else cls()
        fallback = raw.get("fallback")
        return cls({str(k): Price.from_dict(v) for k, v in dict(raw.get("models") or {}).items()},
                   None if fallback is None else Price.from_dict(fallback), raw.get("as_of"))


def _anthropic(inp: float, out: float) -> Price:
    """Anthropic's rule: a cache read is a tenth of the input price, a (5-minute) cache write 1.25 times it."""
    return Price(inp, out, round(inp / 10, 6), round(inp * 1.25, 6))


#: List prices (USD per million tokens, standard tier, prompts under any long-context threshold) of the main
#: models, from Anthropic's, OpenAI's and Google's API pricing pages as they stood in late November 2025: ``as_of``
#: is Claude Opus 4.5's release, the newest model here. Defaults to check, not a quote: a newer model, a changed or
#: negotiated price or another provider is set in ``prices`` of config/runtime.yaml (docs/guides/cost.md).
DEFAULT_PRICES = PriceTable(as_of="2025-11-24", models={
    "claude-opus-4-5": _anthropic(5, 25), "claude-opus-4-1": _anthropic(15, 75), "claude-opus-4": _anthropic(15, 75),
    "claude-sonnet-4-5": _anthropic(3, 15), "claude-sonnet-4": _anthropic(3, 15),
    "claude-3-7-sonnet": _anthropic(3, 15), "claude-haiku-4-5": _anthropic(1, 5),
    "claude-3-5-haiku": _anthropic(0.8, 4),
    "gpt-5": Price(1.25, 10, 0.125), "gpt-5-mini": Price(0.25, 2, 0.025), "gpt-5-nano": Price(0.05, 0.4, 0.005),
    "gpt-5-codex": Price(1.25, 10, 0.125), "gpt-4.1": Price(2, 8, 0.5), "gpt-4.1-mini": Price(0.4, 1.6, 0.1),
    "gpt-4.1-nano": Price(0.1, 0.4, 0.025), "gpt-4o": Price(2.5, 10, 1.25), "gpt-4o-mini": Price(0.15, 0.6, 0.075),
    "o3": Price(2, 8, 0.5), "o4-mini": Price(1.1, 4.4, 0.275),
    "gemini-2.5-pro": Price(1.25, 10, 0.125), "gemini-2.5-flash": Price(0.3, 2.5, 0.03),
    "gemini-2.5-flash-lite": Price(0.1, 0.4, 0.01),
})


# -- the ledger ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Entry:
    """One journaled call's usage, and whose it was. ``key`` is the call's journal key (unique in its run)."""

    run_id: str
    step_id: str
    key: str
    executor: str
    usage: Usage
    model: str | None = None
    story: str | None = None
    at: str | None = None

    @property
    def executor_model(self) -> str:
        """``executor/model`` (the model left out when no call named one)."""
        return f"{self.executor}/{self.model}" if self.model else self.executor


def entry_of(run_id: str, step_id: str | None, key: str, op: str, result: Any, *, story: str | None = None,
             at: str | None = None) -> Entry | None:
    """The ledger entry of one journal call record (``op`` ``memo:<executor>``, its ``result`` carrying ``usage``;
    or ``usage:<executor>``, a call that ended without a result), or None for a record that carries none (a
    person's answer, a tool). Raises TypeError on a damaged usage."""
    if not op.startswith(("memo:", "usage:")) or not isinstance(result, Mapping):
        return None
    raw = result.get("usage")
    if raw is None or raw == {}:  # no usage, or a call that never started (its budget was spent)
        return None
    if not isinstance(raw, Mapping):
        raise TypeError("result.usage is not an object")
    try:
        usage = Usage.from_record(raw)
    except TypeError as exc:
        raise TypeError(f"result.{exc}") from None
    model = raw.get("model") or result.get("model")
    return Entry(run_id, step_id or key.split("/", 1)[0], key, op.partition(":")[2], usage,
                 str(model) if model else None, story, at)


class Ledger:
    """Journaled usage, one entry per call (the same call added twice is kept once). An entry added to a ledger
    ``within`` another is added to that one too: a story's ledger within its sprint loop's."""

    def __init__(self, entries: Iterable[Entry] = (), *, within: Ledger | None = None) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        self.within = within
        for entry in entries:
            self.add(entry)

    def add(self, entry: Entry) -> None:
        """Add ``entry`` (again: replaced)."""
        self._entries[(entry.run_id, entry.key)] = entry
        if self.within is not None:
            self.within.add(entry)

    def record(self, run_id: str, step_id: str | None, key: str, op: str, result: Any, *,
               story: str | None = None, at: str | None = None) -> Entry | None:
        """Add the entry of one journal call record, if it carries usage (:func:`entry_of`)."""
        entry = entry_of(run_id, step_id, key, op, result, story=story, at=at)
        if entry is not None:
            self.add(entry)
        return entry

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def where(self, keep: Callable[[Entry], bool]) -> Ledger:
        """The entries ``keep`` accepts, as a ledger of their own."""
        return Ledger(entry for entry in self if keep(entry))

    def total(self, prices: PriceTable | None = None) -> Usage:
        """Every entry summed; with ``prices``, each weighed first (its cost: :meth:`PriceTable.cost`)."""
        total = Usage()
        for entry in self:
            total = total + (entry.usage if prices is None else prices.priced(entry.usage, entry.model))
        return total

    def by(self, key: Callable[[Entry], str | None], prices: PriceTable | None = None) -> dict[str, Usage]:
        """The entries summed per ``key`` (run, step, story, executor/model …), in the order first met."""
        groups: dict[str, Usage] = {}
        for entry in self:
            name = key(entry) or "-"
            usage = entry.usage if prices is None else prices.priced(entry.usage, entry.model)
            groups[name] = groups.get(name, Usage()) + usage
        return groups
