"""What runs cost: their journaled calls' usage (the usage ledger), weighed at the project's price table, summed
per run, step, story and executor/model, for ``stepline cost``, ``status --json`` and the dashboard's cost page.

A sprint story's run carries its story key (the run variable ``sprint_story``); the loop's story runs are those of
workflow ``sprint-story:<key>``. Nothing here writes: each run's journal is read as a resume reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from stepline.errors import NotFoundError, UsageError
from stepline.executors import ROW, Entry, Ledger, PriceTable, Usage, usage_row

if TYPE_CHECKING:
    from stepline.service._runs import RunService
    from stepline.store import RunDir

__all__ = ["CostReport", "RunCost", "cost_report", "has_story_runs", "project_prices", "run_cost", "usage_summary"]

@dataclass(frozen=True, slots=True)
class RunCost:
    """One run and its ledger (its entries carry its story key, if it is a sprint story's)."""

    run_id: str
    workflow: str
    status: str
    created_at: str
    story: str | None
    ledger: Ledger


def run_cost(runs: RunService, run_dir: RunDir) -> RunCost:
    """Run ``run_dir``'s ledger, rebuilt from its journal (a damaged one raises what its journal says)."""
    engine = runs.engine()
    run = engine.load(run_dir)
    story = run.variables.get("sprint_story")
    story = str(story) if story else None
    ledger = Ledger(replace(entry, story=story) for entry in engine.calls.ledger)
    return RunCost(run.run_id, run.workflow.id, run.status.value, run.created_at, story, ledger)


def usage_summary(ledger: Ledger, prices: PriceTable) -> dict[str, Any]:
    """The usage ``status --json`` shows of a run: its total and each step's, weighed (``cost_usd`` null where a
    model has no price), and the date of the prices."""
    return {"total": _row(ledger.total(prices)), "steps": _rows(ledger.by(lambda e: e.step_id, prices)),
            "prices_as_of": prices.as_of}


def _row(usage: Usage) -> dict[str, Any]:
    """A usage as a table row; its cost None when a call's model has no price."""
    return {**usage_row(usage), "cost_usd": usage.cost_usd}


def _rows(groups: dict[str, Usage]) -> dict[str, dict[str, Any]]:
    return {name: _row(usage) for name, usage in groups.items()}


@dataclass(frozen=True, slots=True)
class CostReport:
    """The runs chosen (``what`` says how) and their usage, weighed at ``prices``."""

    what: str
    runs: list[RunCost]
    prices: PriceTable
    #: The runs chosen that could not be read (``run: why``), left out of the figures.
    damaged: list[str] = field(default_factory=list)

    @property
    def ledger(self) -> Ledger:
        """Every chosen run's entries."""
        return Ledger(entry for run in self.runs for entry in run.ledger)

    def total(self) -> Usage:
        """Everything the chosen runs used, weighed."""
        return self.ledger.total(self.prices)

    def by_run(self) -> dict[str, Usage]:
        """Per run, in the order they were made (a run without usage too)."""
        return {run.run_id: run.ledger.total(self.prices) for run in self.runs}

    def by_story(self) -> dict[str, Usage]:
        """Per sprint story (the runs of no story left out)."""
        return self.ledger.where(lambda entry: entry.story is not None).by(lambda entry: entry.story, self.prices)

    def by_step(self) -> dict[str, Usage]:
        """Per step: ``step`` for one run, ``run/step`` for several."""
        many = len(self.runs) > 1

        def key(entry: Entry) -> str:
            return f"{entry.run_id}/{entry.step_id}" if many else entry.step_id

        return self.ledger.by(key, self.prices)

    def by_executor(self) -> dict[str, Usage]:
        """Per executor and model (``cli-agent:claude/claude-sonnet-4-5``)."""
        return self.ledger.by(lambda entry: entry.executor_model, self.prices)

    def unpriced(self) -> list[str]:
        """The models whose calls have no cost: none reported and no price in the table."""
        return sorted({entry.model or "(no model named)" for entry in self.ledger
                       if self.prices.cost(entry.usage, entry.model) is None})

    def at_fallback(self) -> list[str]:
        """The models whose calls were weighed at the table's fallback price (no cost reported, no price listed)."""
        return sorted({entry.model or "(no model named)" for entry in self.ledger
                       if self.prices.fallback is not None and self.prices.listed(entry.model) is None
                       and not self.prices.reported(entry.usage)})

    def story_steps(self) -> dict[str, dict[str, Usage]]:
        """Each story's usage per stage (its step ids without a visit's ``@n``), for the dashboard's plot."""
        stories: dict[str, dict[str, Usage]] = {}
        for entry in self.ledger:
            if entry.story is not None:
                stage = entry.step_id.split("@", 1)[0]
                steps = stories.setdefault(entry.story, {})
                steps[stage] = steps.get(stage, Usage()) + self.prices.priced(entry.usage, entry.model)
        return stories

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: ``stepline cost --json`` and the dashboard's API."""
        return {"what": self.what, "prices_as_of": self.prices.as_of, "columns": list(ROW),
                "total": _row(self.total()),
                "runs": [{"run_id": run.run_id, "workflow": run.workflow, "status": run.status,
                          "created_at": run.created_at, "story": run.story, **_row(run.ledger.total(self.prices))}
                         for run in self.runs],
                "stories": _rows(self.by_story()), "steps": _rows(self.by_step()),
                "executors": _rows(self.by_executor()), "unpriced_models": self.unpriced(),
                "fallback_priced_models": self.at_fallback(),
                "damaged_runs": self.damaged}


def _moment(text: str) -> datetime:
    """A date (``2026-11-01``) or ISO time; one without a zone is UTC's."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def project_prices(runs: RunService) -> PriceTable:
    """The project's price table (config/runtime.yaml ``prices:``); without a fallback of its own, a sprint
    project's budgets' prices (config/sprint.yaml) are its fallback, as the loop's budgets weigh."""
    table = runs.config.prices.table()
    if table.fallback is not None or not (runs.project_root / "config" / "sprint.yaml").is_file():
        return table
    from stepline.sprint import budget_prices, load_sprint_config

    budgets = load_sprint_config(runs.project_root).budgets
    return budget_prices(table, budgets.input_per_mtok, budgets.output_per_mtok, budgets.cache_read_per_mtok)


def has_story_runs(runs: RunService) -> bool:
    """Whether the project has runs of a sprint loop's stories."""
    from stepline.sprint import STORY_PREFIX

    return any(summary.workflow.startswith(STORY_PREFIX) for summary in runs.store.summaries())


def cost_report(runs: RunService, run_id: str | None = None, *, sprint: bool = False,
                since: str | None = None) -> CostReport:
    """The cost of run ``run_id`` (default: the latest run), or of every story run of the project's sprint loop
    (``sprint``), or of every run made since ``since`` (a date); at most one of the three."""
    if sum(bool(x) for x in (run_id, sprint, since)) > 1:
        raise UsageError("name a run, --sprint or --since, not more than one")
    prices = project_prices(runs)
    if not sprint and since is None:
        run_dir = runs.open(run_id)
        return CostReport(f"run {run_dir.run_id}", [run_cost(runs, run_dir)], prices)
    from stepline.sprint import STORY_PREFIX

    summaries = list(runs.store.summaries())
    if sprint:
        chosen = [s for s in summaries if s.workflow.startswith(STORY_PREFIX)]
        what = "the sprint loop's story runs"
        if not chosen:
            raise NotFoundError(f"no sprint story runs under {runs.store.root}",
                                hint="run the loop with `stepline sprint run`")
    else:
        try:
            start = _moment(str(since))
        except ValueError:
            raise UsageError(f"--since {since!r} is not a date", hint="give one as 2026-11-01 (or 2026-11-01T12:00)") \
                from None
        chosen = [s for s in summaries if s.created_at and _moment(s.created_at) >= start]
        what = f"the runs made since {since}"
    chosen.sort(key=lambda s: s.created_at)
    damaged = [f"{s.run_id}: {s.damage}" for s in chosen if s.damage is not None]
    return CostReport(what, [run_cost(runs, runs.store.open(s.run_id)) for s in chosen if s.damage is None], prices,
                      damaged)
