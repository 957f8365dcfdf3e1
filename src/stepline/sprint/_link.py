"""What the loop hands a story's stages beside the journal: the loop's merge queue, what the loop's stories have spent
together (:class:`LoopLedger`), and whether the story is being resumed (its first stage reconciles first).

Each story of a loop runs on a :class:`StoryEngine` of its own (an engine drives one run at a time) that carries its
:class:`StoryLink`; the loop makes both and keeps nothing in module state. A story's stages read their own story's
run and link only: what the other stories spent reaches them through the ledger, which each story's stages report to.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepline.engine import Engine
from stepline.sprint._parallel import MergeQueue
from stepline.sprint._usage import Usage

__all__ = ["LoopLedger", "StoryEngine", "StoryLink"]


class LoopLedger:
    """What a parallel loop's stories have spent: the ones that ended (and those settled before a resume), and each
    running one's journaled calls so far, as its stages report them (while a call runs, the executor shares the
    loop's budget among the live calls — see :func:`stepline.sprint._budgets.call_budget`)."""

    def __init__(self, ended: Usage) -> None:
        self.ended = ended
        #: What each running story has spent so far, by story key.
        self.running: dict[str, Usage] = {}
        #: Why the loop's budget is spent, as a running story's call was stopped for it (None: it was not).
        self.crossed: str | None = None

    def started(self, key: str) -> None:
        """``key`` runs now (what its run had spent before is reported by its first stage)."""
        self.running.setdefault(key, Usage())

    def report(self, key: str, spent: Usage) -> None:
        """What the running story ``key`` has spent so far (its whole run)."""
        if key in self.running:
            self.running[key] = spent

    def ended_with(self, key: str, spent: Usage) -> None:
        """``key``'s run ended having spent ``spent``."""
        self.running.pop(key, None)
        self.ended = self.ended + spent

    def spent(self, but: str | None = None) -> Usage:
        """What the loop has spent so far, the running story ``but``'s own calls left out."""
        total = self.ended
        for key, used in self.running.items():
            if key != but:
                total = total + used
        return total


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
                         listeners=list(loop.listeners), concurrency=loop.concurrency)
        self._executor = loop.executor
        self.link = link
