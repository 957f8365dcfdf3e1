"""What the loop hands a story's stages beside the journal: the loop's merge queue, what the loop's stories have spent
together (:class:`LoopLedger`), and whether the story is being resumed (its first stage reconciles first).

Each story of a loop runs on a :class:`StoryEngine` of its own (an engine drives one run at a time) that carries its
:class:`StoryLink`; the loop makes both and keeps nothing in module state. A story's stages read their own story's
run and link only: what the other stories spent reaches them through the loop's ledger, which each story's run ledger
is within (a call's usage counts there as soon as it is journaled).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepline.engine import Engine
from stepline.executors import Ledger, PriceTable
from stepline.sprint._parallel import MergeQueue
from stepline.sprint._usage import Usage

__all__ = ["LoopLedger", "StoryEngine", "StoryLink"]


class LoopLedger:
    """What a parallel loop's stories have spent: those it settled before a resume, and every call of the stories it
    runs, counted as the call is journaled (each story's run ledger is within :attr:`calls`), weighed with the loop's
    prices. While a call runs, the executor shares the loop's budget among the live calls (see
    :func:`stepline.sprint._budgets.call_budget`)."""

    def __init__(self, before: Usage, prices: PriceTable) -> None:
        self.before = before
        self.prices = prices
        #: The usage of every call of the loop's stories' runs.
        self.calls = Ledger()
        #: Why the loop's budget is spent, as a running story's call was stopped for it (None: it was not).
        self.crossed: str | None = None

    def spent(self, but_run: str | None = None) -> Usage:
        """What the loop has spent so far, the run ``but_run``'s own calls left out."""
        calls = self.calls if but_run is None else self.calls.where(lambda entry: entry.run_id != but_run)
        return self.before + calls.total(self.prices)


@dataclass(slots=True)
class StoryLink:
    """What a story's stages get from the loop driving them (none of it is journaled state)."""

    #: The merges of the loop's stories, one at a time in sprint order.
    queue: MergeQueue
    #: A parallel loop's spend, shared by its running stories (None: the story's journaled ``sprint_spent_before``).
    ledger: LoopLedger | None = None
    #: The story's run is being resumed: its first stage compares git, the board and the journal first.
    reconcile: bool = False

    @classmethod
    def alone(cls) -> StoryLink:
        """The link of a story run driven outside a loop (``stepline resume RUN``): its merge is its own turn."""
        return cls(MergeQueue([]))

    def take_reconcile(self) -> bool:
        """Whether the stage starting now is the resumed story's first (asked once)."""
        first, self.reconcile = self.reconcile, False
        return first


class StoryEngine(Engine):
    """The engine of one story's run in a loop: the loop engine's executor (one instance, so the stories' calls share
    its live budget meters), people, listeners and settings, and the story's :class:`StoryLink`."""

    def __init__(self, loop: Engine, link: StoryLink) -> None:
        super().__init__(project_root=loop.project_root, config=loop.config, executor=loop.executor_name,
                         executor_options=loop.executor_options, mode=loop.mode, human=loop.human, sleep=loop.sleep,
                         listeners=list(loop.listeners), concurrency=loop.concurrency,
                         usage_within=link.ledger.calls if link.ledger is not None else None)
        self._executor = loop.executor
        self.link = link
