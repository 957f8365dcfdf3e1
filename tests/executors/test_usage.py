"""The one usage type, its prices and the ledger (stepline.executors._usage)."""

from __future__ import annotations

import pytest

from stepline.executors import DEFAULT_PRICES, Entry, Ledger, Price, PriceTable, Usage
from stepline.executors._usage import entry_of


def test_a_usage_counts_the_whole_prompt_and_sums() -> None:
    """Input is the whole prompt (its cached part included); tokens are input and output; a sum adds each count and
    its calls, and its cost is unknown once one of its calls' is."""
    a = Usage(100, 10, 60, 20, 0.5, 1)
    b = Usage(50, 5, 0, 0, None, 1)
    assert a.tokens == 110 and a.uncached_input_tokens == 20
    assert a + b == Usage(150, 15, 60, 20, None, 2)
    assert a + Usage(1, 1, 0, 0, 0.25, 1) == Usage(101, 11, 60, 20, 0.75, 2)
    assert Usage() + a == a and a + Usage() == a


def test_a_record_is_read_back_in_either_shape() -> None:
    """What a call journals reads back the same; an older record (input without its cached part, cache reads as
    ``cached_input_tokens``; a sprint sum's ``cache_read_tokens`` without ``cache_write_tokens``) is read into the
    whole-prompt shape; a count that is no number is refused."""
    used = Usage(120, 30, 100, 0, 0.01, 1)
    assert Usage.from_record(used.to_record()) == used
    assert Usage.from_record({**Usage(3, 1, 0, 0, None, 4).to_record()}).calls == 4
    old_call = {"input_tokens": 20, "cached_input_tokens": 100, "cache_write_tokens": 5, "output_tokens": 30}
    assert Usage.from_record(old_call) == Usage(125, 30, 100, 5, None, 1)
    old_sum = {"input_tokens": 20, "output_tokens": 30, "cache_read_tokens": 100, "cost_usd": 0.2, "calls": 3}
    assert Usage.from_record(old_sum) == Usage(120, 30, 100, 0, 0.2, 3)
    with pytest.raises(TypeError, match="input_tokens is not a number"):
        Usage.from_record({"input_tokens": "many"})


def test_a_running_total_counts_what_it_adds() -> None:
    """A session's running total counts for what it adds to the total it started from (never below nothing)."""
    assert Usage(150, 9, 50, 0, None, 1).since(Usage(100, 7, 40, 0, None, 1)) == Usage(50, 2, 10, 0, None, 1)
    assert Usage(10, 1, 0, 0, None, 1).since(Usage(20, 2, 0, 0, None, 1)).tokens == 0


def test_prices_weigh_the_cached_part_at_its_own_price() -> None:
    """Cache reads and writes at their prices (the input price when none is given), the rest of the prompt at the
    input price; a model is priced by its name or the longest it starts with, a provider prefix ignored; a reported
    cost wins, a reported $0 for tokens used does not; a model without a price and no fallback has no cost."""
    price = Price(3, 15, 0.3, 3.75)
    used = Usage(1_000_000, 100_000, 600_000, 200_000, None, 1)
    assert price.cost(used) == pytest.approx((200_000 * 3 + 600_000 * 0.3 + 200_000 * 3.75 + 100_000 * 15) / 1e6)
    assert Price(2, 8).cost(used) == pytest.approx((1_000_000 * 2 + 100_000 * 8) / 1e6)
    table = PriceTable({"claude-sonnet-4": Price(3, 15), "claude-sonnet-4-5": Price(1, 1)})
    assert table.price("claude-sonnet-4-5-20250929") == Price(1, 1)
    assert table.price("anthropic/claude-sonnet-4-20250514") == Price(3, 15)
    assert table.price("unknown") is None and table.cost(used, "unknown") is None
    assert table.cost(Usage(10, 1, 0, 0, 0.5, 1), "unknown") == 0.5
    assert table.cost(Usage(1_000_000, 0, 0, 0, 0.0, 1), "claude-sonnet-4") == pytest.approx(3.0)
    fallback = PriceTable(fallback=Price(1, 2))
    assert fallback.cost(Usage(1_000_000, 1_000_000, 0, 0, None, 1), "any") == pytest.approx(3.0)
    assert PriceTable.from_dict(table.to_dict()) == table
    assert PriceTable.from_dict({"input": 1, "output": 2, "cache_read": 0.1}) == PriceTable(
        fallback=Price(1, 2, 0.1))


def test_the_default_prices_are_dated_and_cover_the_main_models() -> None:
    """The built-in prices say when they were taken and price each main model family."""
    assert DEFAULT_PRICES.as_of
    for model in ("claude-sonnet-4-5-20250929", "claude-opus-4-1", "gpt-5", "gpt-4o-mini", "gemini-2.5-pro"):
        assert DEFAULT_PRICES.price(model) is not None, model
    assert DEFAULT_PRICES.price("gpt-5-mini") == Price(0.25, 2, 0.025)  # the longer name wins over gpt-5


def test_a_ledger_keeps_each_journaled_call_once_and_sums_it_any_way() -> None:
    """A journal record with usage is one entry (a person's answer or a never-started call none); the same call
    recorded again is kept once; entries sum per step, story, executor/model, weighed at a price table; an entry
    added to a ledger within another is in that one too."""
    loop = Ledger()
    story = Ledger(within=loop)
    record = {"usage": {**Usage(100, 10, 0, 0, None, 1).to_record(), "model": "gpt-4o"}}
    story.record("r1", "build", "build/1/1/1", "memo:openai", record, story="1-1")
    story.record("r1", "build", "build/1/1/1", "memo:openai", record, story="1-1")
    story.record("r1", "review", "review/1/1/1", "memo:cli-agent:claude",
                 {"usage": {**Usage(50, 5, 40, 0, 0.01, 1).to_record()}}, story="1-1")
    assert story.record("r1", "ask", "ask/1/1/1", "memo:human", {"answer": "yes"}) is None
    assert story.record("r1", "b", "b/1/1/1", "memo:cli-agent:codex", {"usage": {}, "stopped": "spent"}) is None
    assert story.record("r1", "t", "t/1/1/1", "step_tool", {"usage": {"input_tokens": 1}}) is None
    assert len(story) == len(loop) == 2
    assert story.total() == Usage(150, 15, 40, 0, None, 2)
    weighed = story.by(lambda entry: entry.executor_model, DEFAULT_PRICES)
    assert weighed["openai/gpt-4o"].cost_usd == pytest.approx((100 * 2.5 + 10 * 10) / 1e6)
    assert weighed["cli-agent:claude"].cost_usd == 0.01
    assert set(story.by(lambda entry: entry.step_id)) == {"build", "review"}
    assert story.where(lambda entry: entry.step_id == "review").total().calls == 1
    with pytest.raises(TypeError, match=r"result\.usage\.output_tokens is not a number"):
        entry_of("r1", "s", "s/1/1/1", "memo:openai", {"usage": {"output_tokens": [1]}})
    assert Entry("r", "s", "k", "openai", Usage()).executor_model == "openai"
