"""A story's budgets: what its stages' agent calls used, what the story's and the loop's limits leave, and what
happens when one is spent (the story deferred, or — ``on_exceeded: escalate`` — a person asked).

A stage's usage is journaled as a run variable (``sprint_usage:<stage>``); the loop's ledger counts each call as it is
journaled (:class:`~stepline.sprint._link.LoopLedger`); an agent
call's budget (:func:`call_budget`) is what the story's limit leaves within what the loop's leaves, so a CLI agent past
either is stopped mid-call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepline.executors import CallBudget, PriceTable
from stepline.model import EventType
from stepline.sprint._config import DEFAULT_BUDGET_PRICE
from stepline.sprint._stage import gate_key, link, set_var, sprint_config, story_key, story_vars
from stepline.sprint._usage import Usage, budget_prices, over_limit, usage_of_calls

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["LOOP_BUDGET", "budget_spent", "call_budget", "note_usage", "over_budget"]

#: Whose budget a reason names when it is the loop's (a call's budget says so, see :func:`call_budget`).
LOOP_BUDGET = "the loop's budget"


def _prices(ctx: StepContext) -> PriceTable:
    """The runtime's price table, the budgets' prices for a model it has none for."""
    budgets = sprint_config(ctx).get("budgets") or {}
    default = DEFAULT_BUDGET_PRICE  # a key missing from the run's config: the same defaults config/sprint.yaml has
    return budget_prices(ctx.engine.config.prices.table(), float(budgets.get("input_per_mtok", default.input)),
                         float(budgets.get("output_per_mtok", default.output)),
                         float(budgets.get("cache_read_per_mtok", default.cache_read or default.input)))


def _earlier_usage(ctx: StepContext) -> Usage:
    """What the story's earlier stages used (this stage's own usage left out: a stage run again after a crash
    decides as it did the first time)."""
    total = Usage()
    for name, value in story_vars(ctx).items():
        if name.startswith("sprint_usage:") and name != f"sprint_usage:{ctx.spec.id}" and isinstance(value, dict):
            total = total + Usage.from_record(value)
    return total


def _stage_usage(ctx: StepContext) -> Usage:
    """What this stage's calls used, as journaled."""
    prefix = ctx.spec.id + "/"
    return usage_of_calls([r for k, r in ctx.engine.calls.recorded.items() if k.startswith(prefix)], _prices(ctx))


def note_usage(ctx: StepContext) -> None:
    """Journal what this stage's calls used (``sprint_usage:<stage>``)."""
    set_var(ctx, f"sprint_usage:{ctx.spec.id}", _stage_usage(ctx).to_record())


def _enforced(ctx: StepContext) -> bool:
    """Whether the budgets stop the story (``enforce``, unless a person let this story go on past them)."""
    return ((sprint_config(ctx).get("budgets") or {}).get("mode") == "enforce"
            and not story_vars(ctx).get("sprint_budget_waived"))


def _spent_by_others(ctx: StepContext) -> Usage:
    """What the loop's other stories have spent: in a parallel loop, what its ledger holds now (the stories that
    ended, and every call of the running ones, as journaled); else what the loop had spent when this story started."""
    if (ledger := link(ctx).ledger) is not None:
        return ledger.spent(but_run=ctx.run.run_id)
    return Usage.from_record(story_vars(ctx).get("sprint_spent_before") or {"calls": 0})


def over_budget(ctx: StepContext) -> str | None:
    """Why the story may not make another call (its ``enforce`` limit is spent); None when it may."""
    budgets = sprint_config(ctx).get("budgets") or {}
    story = budgets.get("story") or {}
    used = _earlier_usage(ctx)
    run_limit = budgets.get("run") or {}
    problem = over_limit(used, story.get("tokens"), story.get("cost_usd"))
    if problem is None:
        problem = over_limit(used + _spent_by_others(ctx), run_limit.get("tokens"), run_limit.get("cost_usd"))
        problem = f"{LOOP_BUDGET}: {problem}" if problem else None
    else:
        problem = f"the story's budget: {problem}"
    if problem and _enforced(ctx):
        return problem
    if problem:
        ctx.emit(EventType.VALIDATION_FAILED, {"check": "budget", "warning": problem})
    return None


def call_budget(ctx: StepContext) -> dict[str, Any] | None:
    """The budget hint of an agent call of this stage, None when nothing is enforced: what the story's limit leaves
    (the stage's calls that run at once share it), within what the loop's limit leaves (shared by every live call
    of the loop's stories, each one's usage counted as it streams in) — a CLI agent past either is stopped
    mid-call, and once the loop's is crossed, every running story's agent is."""
    if not _enforced(ctx):
        return None
    budgets = sprint_config(ctx).get("budgets") or {}
    story_used = _earlier_usage(ctx) + _stage_usage(ctx)

    def left(limits: dict[str, Any], used: Usage, what: str, pool: str, within: CallBudget | None = None
             ) -> CallBudget:
        tokens, cost = limits.get("tokens"), limits.get("cost_usd")
        return CallBudget(tokens=None if tokens is None else float(tokens) - used.tokens,
                          cost_usd=None if cost is None else float(cost) - (used.cost_usd or 0.0),
                          prices=_prices(ctx), what=what, pool=pool, within=within)

    run_limits = budgets.get("run") or {}
    loop = (left(run_limits, story_used + _spent_by_others(ctx), LOOP_BUDGET, f"sprint-loop:{ctx.project_root}")
            if run_limits.get("tokens") is not None or run_limits.get("cost_usd") is not None else None)
    story = left(budgets.get("story") or {}, story_used, "the story's budget",
                 f"{ctx.run.run_id}/{ctx.spec.id}/{ctx.attempt}", loop)
    if loop is None and story.tokens is None and story.cost_usd is None:
        return None
    return story.to_hint()


async def budget_spent(ctx: StepContext, why: str) -> bool:
    """The story's enforced budget is spent (``why``): defer it, or — with ``budgets.on_exceeded: escalate`` —
    ask a person (``stepline answer RUN defer|continue``). True when the stage must stop (the story is deferred);
    False when the person let the story go on (its budgets then only warn)."""
    key = story_key(ctx)
    if f"{LOOP_BUDGET}: " in why and (ledger := link(ctx).ledger) is not None:
        # The parallel loop admits no story after this: the other running stories' calls, stopped with this one,
        # may not be journaled yet.
        ledger.crossed = ledger.crossed or why.split(f"{LOOP_BUDGET}: ", 1)[1]
    if (sprint_config(ctx).get("budgets") or {}).get("on_exceeded") == "escalate":
        question = (f"Story {key} went past its budget ({why}). Answer defer (set the story aside) or continue "
                    "(let it go on; its budgets then only warn).")
        answer = await ctx.engine.human.ask(ctx, question, ["defer", "continue"],
                                            gate_key(ctx, ctx.spec.id.split("@", 1)[0] + "-budget"))
        if answer.strip().lower().startswith("continue"):
            set_var(ctx, "sprint_budget_waived", True)
            return False
    ctx.step.choice, ctx.step.summary = "over-budget", why
    set_var(ctx, "sprint_reason", why)
    return True
