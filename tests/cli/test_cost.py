"""`stepline cost` (and `status --json`'s usage): a run's journaled usage summed per step and executor/model,
weighed at the dated default prices or the project's own (config/runtime.yaml ``prices:``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fakes.runs import openai_run
from stepline.executors import DEFAULT_PRICES, Usage
from stepline.interfaces.cli._app import run_cli


def _run(root: Path, model: str = "gpt-4o-mini") -> tuple[str, list[Usage]]:
    return openai_run(root, model)


def _cost(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert run_cli(["cost", *args, "--json", "-C", str(root)]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_cost_sums_a_runs_calls_and_weighs_them_at_the_dated_default_prices(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run's two calls: input the whole prompt (100 each), the second's cached part as cache reads; dollars
    at gpt-4o-mini's list price (cache reads at theirs), the date of the prices said; per step and per
    executor/model; the text form prints the same figures."""
    run_id, calls = _run(tmp_path)
    assert [c.input_tokens for c in calls] == [100, 100]
    assert calls[0].cache_read_tokens == 0 < calls[1].cache_read_tokens
    report = _cost(tmp_path, capsys, run_id)
    price = DEFAULT_PRICES.price("gpt-4o-mini")
    assert price is not None
    expected = sum(price.cost(c) for c in calls)
    total = report["total"]
    assert (total["calls"], total["input_tokens"], total["output_tokens"]) == (2, 200, 40)
    assert total["cache_read_tokens"] == calls[1].cache_read_tokens and total["cost_usd"] == pytest.approx(expected)
    assert expected < (200 * price.input + 40 * price.output) / 1e6  # the cached part cost less
    assert list(report["steps"]) == ["write"] and list(report["executors"]) == ["openai/gpt-4o-mini"]
    assert report["prices_as_of"] == DEFAULT_PRICES.as_of and report["unpriced_models"] == []
    assert [r["run_id"] for r in report["runs"]] == [run_id]
    assert run_cli(["cost", "-C", str(tmp_path)]) == 0  # the latest run, as text
    out = capsys.readouterr().out
    assert f"cost of run {run_id}: 240 tokens, ${expected:.4f} (prices as of {DEFAULT_PRICES.as_of}" in out
    assert "per step:" in out and "openai/gpt-4o-mini" in out
    status = run_cli(["status", run_id, "--json", "-C", str(tmp_path)])
    assert status == 0 and json.loads(capsys.readouterr().out)["usage"]["total"] == total


def test_the_projects_prices_are_used_and_a_model_without_one_has_no_cost(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """config/runtime.yaml ``prices:`` overrides a default price and dates it; a model the table does not know has
    no cost (null, ``?`` in the text, named) until a fallback price is set."""
    priced, _ = _run(tmp_path)
    unknown, _ = _run(tmp_path, "mystery-model")
    config = tmp_path / "config"
    config.mkdir()
    (config / "runtime.yaml").write_text('prices:\n  as_of: "2026-11-01"\n'
                                         "  models: {gpt-4o-mini: {input: 10, output: 20}}\n")
    mine = _cost(tmp_path, capsys, priced)
    assert mine["total"]["cost_usd"] == pytest.approx((200 * 10 + 40 * 20) / 1e6)  # no cache price: input's
    assert mine["prices_as_of"] == "2026-11-01"
    report = _cost(tmp_path, capsys, unknown)
    assert report["total"]["cost_usd"] is None and report["unpriced_models"] == ["mystery-model"]
    assert run_cli(["cost", unknown, "-C", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cost unknown" in out and "no price for mystery-model" in out
    with (config / "runtime.yaml").open("a") as handle:
        handle.write("  fallback: {input: 1, output: 1}\n")
    report = _cost(tmp_path, capsys, unknown)
    assert report["total"]["cost_usd"] == pytest.approx(240 / 1e6)
    assert report["fallback_priced_models"] == ["mystery-model"] and report["unpriced_models"] == []


def test_since_sums_the_runs_made_from_a_date_and_a_bad_date_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--since DATE`` takes every run made since then (per run, and in all); a date to come takes none; a date
    that is no date, or a run and --since together, is one line, exit 2."""
    first, _ = _run(tmp_path)
    second, _ = _run(tmp_path)
    report = _cost(tmp_path, capsys, "--since", "2000-01-01")
    assert [r["run_id"] for r in report["runs"]] == [first, second]
    assert report["total"]["calls"] == 4 and set(report["steps"]) == {f"{first}/write", f"{second}/write"}
    assert _cost(tmp_path, capsys, "--since", "2999-01-01")["runs"] == []
    assert run_cli(["cost", "--since", "last tuesday", "-C", str(tmp_path)]) == 2
    assert "--since 'last tuesday' is not a date" in capsys.readouterr().err
    assert run_cli(["cost", first, "--since", "2000-01-01", "-C", str(tmp_path)]) == 2
    assert "not more than one" in capsys.readouterr().err


def test_the_price_table_is_printed_with_its_date(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--prices``: every model's price and the date they were taken; ``--json`` the same as data."""
    assert run_cli(["cost", "--prices", "-C", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"as of {DEFAULT_PRICES.as_of}" in out and "claude-sonnet-4-5" in out and "gemini-2.5-pro" in out
    assert "set your own under `prices` in config/runtime.yaml" in out
    assert run_cli(["cost", "--prices", "--json", "-C", str(tmp_path)]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["models"]["gpt-4o-mini"] == {"input": 0.15, "output": 0.6, "cache_read": 0.075}
