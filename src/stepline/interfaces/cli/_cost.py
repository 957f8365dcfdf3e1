"""``stepline cost``: what runs used and cost — tokens and dollars per run, step, story and executor/model, from the
usage ledger of their journals, weighed at the project's price table (config/runtime.yaml ``prices:``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from stepline.interfaces.cli._options import ConfigOption, Directory, JsonOutput, ProjectRoot, app, project_runs, where
from stepline.interfaces.cli._render import print_json, print_table

if TYPE_CHECKING:
    from stepline.executors import PriceTable, Usage
    from stepline.service import CostReport

__all__ = ["cost"]

_HEADERS = ("calls", "input", "output", "cache read", "cache write", "cost (USD)")


@app.command()
def cost(
    run_id: Annotated[str | None, typer.Argument(help="The run (default: the latest).")] = None,
    sprint: Annotated[bool, typer.Option("--sprint", help="Every story run of the project's sprint loop.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="Every run made since this date (2026-11-01).",
                                              metavar="DATE")] = None,
    prices: Annotated[bool, typer.Option("--prices", help="Print the price table used, and nothing else.")] = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """What runs cost: tokens and dollars per run, step, story and executor/model (a run, --sprint, --since DATE).

    Input is the whole prompt, cache reads included; cache reads and writes are shown apart. A cost a CLI reported
    is used as it is; other calls are weighed at the price table (config/runtime.yaml ``prices:`` over stepline's
    dated defaults); a model with neither has no cost (?)."""
    from stepline.service import cost_report

    runs = project_runs(where(directory, project_root), config)
    if prices:
        _print_prices(runs.config.prices.table(), as_json)
        return
    report = cost_report(runs, run_id, sprint=sprint, since=since)
    if as_json:
        print_json(report.to_dict())
        return
    _print_report(report)


def _cells(usage: Usage) -> list[str]:
    money = "?" if usage.cost_usd is None else f"{usage.cost_usd:.4f}"
    return [str(usage.calls), *(f"{value:,.0f}" for value in (usage.input_tokens, usage.output_tokens,
                                                              usage.cache_read_tokens, usage.cache_write_tokens)),
            money]


def _table(title: str, groups: dict[str, Usage], total: Usage | None = None) -> None:
    print(f"\n{title}")
    rows = [[name, *_cells(usage)] for name, usage in groups.items()]
    if total is not None:
        rows.append(["total", *_cells(total)])
    print_table((title.split(" ")[-1].rstrip(":"), *_HEADERS), rows)


def _print_report(report: CostReport) -> None:
    total = report.total()
    as_of = f"as of {report.prices.as_of}" if report.prices.as_of else "undated"
    print(f"cost of {report.what}: {total.tokens:,.0f} tokens, "
          + ("cost unknown" if total.cost_usd is None else f"${total.cost_usd:.4f}")
          + f" (prices {as_of}; `stepline cost --prices` shows them)")
    if len(report.runs) > 1:
        _table("per run:", report.by_run(), total)
    if stories := report.by_story():
        _table("per story:", stories)
    _table("per step:", report.by_step(), total if len(report.runs) == 1 else None)
    _table("per executor/model:", report.by_executor())
    if fallback := report.at_fallback():
        price = report.prices.fallback
        assert price is not None
        print(f"\nno price listed for {', '.join(fallback)}: weighed at the fallback ({price.input:g} in, "
              f"{price.output:g} out per million tokens); set it under prices.models in config/runtime.yaml")
    if unpriced := report.unpriced():
        print(f"\nno price for {', '.join(unpriced)}: their calls' cost is unknown (?); set it under prices.models "
              "in config/runtime.yaml")
    for damaged in report.damaged:
        print(f"left out, damaged: {damaged} (`stepline doctor` explains it)")


def _print_prices(table: PriceTable, as_json: bool) -> None:
    if as_json:
        print_json(table.to_dict())
        return
    print(f"prices in USD per million tokens, as of {table.as_of or '(undated)'}; a cache price not given is the "
          "input price")
    print_table(("model", "input", "output", "cache read", "cache write"),
                [[name, *(f"{value:g}" if value is not None else "-" for value in
                          (price.input, price.output, price.cache_read, price.cache_write))]
                 for name, price in sorted(table.models.items())])
    fallback = table.fallback
    print("any other model: " + ("no price (its cost is unknown)" if fallback is None else
                                 f"{fallback.input:g} in, {fallback.output:g} out"))
    print("list prices to check against your provider's pricing and contract: set your own under `prices` in "
          "config/runtime.yaml")
