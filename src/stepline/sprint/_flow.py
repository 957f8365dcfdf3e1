"""Which stage of a story's run comes next (pure: the run's finished stages in, the next stage's id out).

A story's run is ``baseline → build → verify → review → verify-final → commit → (merge) → advance``, with
the checkpoints ``checkpoint-plan`` (before the build) and ``checkpoint-commit`` (after the commit) when the
config asks for them: human gates, a rejected one defers the story. A failed
verify sends the story back to build (``build@2``, ``verify@2`` …) while the build budget lasts; review
findings to fix do the same while the review budget lasts; a story out of budget goes to ``defer``. A parallel
loop's merge that cannot land the story on the moved integration branch (a conflict, or the verify commands
failing on the merged result) chooses ``rebuild``: build, verify, review, commit and merge are visited again, with
the budgets of a new base (the conflict is not the story's failure). Each
stage's driver ends it with a ``choice`` (``pass``/``fail``, ``clean``/``patch``/``defer`` …), which the journal
keeps, so the same walk over a resumed run reaches the same next stage.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from stepline.model import Run, StepStatus

__all__ = ["CHECKPOINTS", "STAGES", "SUCCEEDED", "SprintFlow", "next_stage", "visit"]

STAGES = ("baseline", "checkpoint-plan", "build", "verify", "review", "verify-final", "commit", "checkpoint-commit",
          "merge", "advance", "closeout", "defer")
#: The stages that are human gates (per-story checkpoints, when the config asks for them).
CHECKPOINTS = ("checkpoint-plan", "checkpoint-commit")


#: The choices of a stage that did what it is for (a build that built, a verify that passed …); any other choice
#: (``fail``, ``failed``, ``over-budget``, ``patch``, ``defer``, ``deferred``) completes the stage without success.
SUCCEEDED = frozenset({"recorded", "committed-before", "approved", "built", "pass", "clean", "skipped", "committed",
                       "merged", "done", "closed-out"})


def visit(base: str, number: int) -> str:
    """The id of the ``number``-th visit of stage ``base`` (``build``, ``build@2`` …)."""
    return base if number <= 1 else f"{base}@{number}"


@dataclass(frozen=True, slots=True)
class Budget:
    """How often a stage may run for one story."""

    builds: int
    reviews: int
    merge: bool
    plan_gate: bool = False
    commit_gate: bool = False
    closeout: bool = False


def next_stage(run: Run, budget: Budget) -> str | None:
    """The stage to run now: the first not completed along the walk the finished stages' choices make. Each visit of
    a stage has an id of its own (``build@2``); the build and review budgets count the builds and review rounds on
    the story's current base: a merge that could not land (the integration branch moved) starts them again."""
    visits: Counter[str] = Counter()
    built = reviewed = 0  # builds and review rounds on the story's current base

    def go(base: str) -> str:
        visits[base] += 1
        return visit(base, visits[base])

    def build() -> str:
        nonlocal built
        built += 1
        return go("build")

    def review() -> str:
        nonlocal reviewed
        reviewed += 1
        return go("review")

    sid = go("baseline")
    while True:
        step = run.steps.get(sid)
        if step is None or step.status != StepStatus.COMPLETED:
            return sid
        choice = step.choice or ""
        base = sid.split("@", 1)[0]
        if choice == "defer" and base not in ("advance", "defer"):  # a person set the story aside (or its agent)
            sid = go("defer")
        elif base == "baseline":
            sid = (go("advance") if choice == "committed-before" else
                   go("checkpoint-plan") if budget.plan_gate else build())
        elif base == "checkpoint-plan":  # a rejected checkpoint completes without its driver: no choice
            sid = build() if choice == "approved" else go("defer")
        elif base == "checkpoint-commit":
            sid = (go("merge") if budget.merge else go("advance")) if choice == "approved" else go("defer")
        elif base == "build":
            sid = go("defer") if choice == "over-budget" else go("verify")
        elif base in ("verify", "verify-final"):
            if choice == "pass":
                sid = go("commit") if base == "verify-final" else review()
            else:
                sid = build() if built < budget.builds else go("defer")
        elif base == "review":
            if choice in ("clean", "skipped"):
                sid = go("verify-final")
            elif choice == "patch" and built < budget.builds and reviewed < budget.reviews:
                sid = build()
            else:
                sid = go("defer")
        elif base == "commit":
            sid = (go("checkpoint-commit") if budget.commit_gate else go("merge") if budget.merge else go("advance"))
        elif base == "advance" and budget.closeout:
            sid = go("closeout")
        elif base == "merge":
            if choice != "rebuild":
                sid = go("advance")
            else:  # the integration branch moved under the story (another story landed): built again on it,
                # with a base's budgets
                built = reviewed = 0
                sid = build()
        else:  # advance (closeout), defer: the story is settled
            return None


class SprintFlow:
    """The engine's view of :func:`next_stage`: one stage at a time; a blocked or failed stage ends the run."""

    def __init__(self, run: Run, budget: Budget) -> None:
        self.run = run
        self.budget = budget
        self.stopped = False

    def take_ready(self, limit: int) -> list[str]:
        """The next stage, unless the last one blocked or failed (the run stops there, resumable)."""
        if self.stopped:
            return []
        sid = next_stage(self.run, self.budget)
        return [sid] if sid is not None else []

    def finished(self, step_id: str, status: StepStatus) -> list[str]:
        """Stop at a stage that did not complete."""
        if status != StepStatus.COMPLETED:
            self.stopped = True
        return []
