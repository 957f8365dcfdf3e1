"""The stages of one story's run (format ``sprint``): each a step of the journal, each done exactly once.

``baseline`` (:mod:`._baseline`) → ``build`` (:mod:`._build`) → ``verify`` (:mod:`._verify`) → ``review``
(:mod:`._review`) → ``verify-final`` → ``commit`` → ``merge`` (:mod:`._merge`, worktree runs) → ``advance``
(:mod:`._commit`) → ``closeout`` (:mod:`._closeout`), with ``defer`` (:mod:`._defer`) for a story that does not
converge and the per-story checkpoints (human gates). Which stage comes next is :mod:`._flow`'s; what a stage shares
with the others (journaled results and effects, the story's facts) is :mod:`._stage`'s. The first stage of a story
the loop resumes compares git, the board and the journal first (:mod:`._reconcile`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from stepline.engine import register_driver
from stepline.model import Run, StepSpec, WorkflowSpec
from stepline.sprint._baseline import baseline
from stepline.sprint._build import build
from stepline.sprint._closeout import closeout
from stepline.sprint._commit import advance, commit
from stepline.sprint._defer import defer
from stepline.sprint._flow import CHECKPOINTS, STAGES, Budget, SprintFlow
from stepline.sprint._merge import merge
from stepline.sprint._reconcile import reconcile
from stepline.sprint._restore import stop_left_agents
from stepline.sprint._review import review
from stepline.sprint._stage import link, set_var
from stepline.sprint._verify import verify

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["FORMAT", "run_sprint_stage", "story_workflow"]

FORMAT: Literal["sprint"] = "sprint"


def story_workflow(key: str, *, builds: int, reviews: int, merge: bool, plan_gate: bool = False,
                   commit_gate: bool = False, closeout: bool = False) -> WorkflowSpec:
    """The workflow of one story's run: its stages (visits beyond the first are added as they happen)."""
    wanted = {"merge": merge, "checkpoint-plan": plan_gate, "checkpoint-commit": commit_gate, "closeout": closeout}
    steps = [StepSpec(id=stage, name=f"{stage} {key}", human_gate="required" if stage in CHECKPOINTS else None,
                      on_reject="skip" if stage in CHECKPOINTS else "fail")
             for stage in STAGES if wanted.get(stage, True)]
    budget = {"builds": builds, "reviews": reviews, "merge": merge, "plan_gate": plan_gate,
              "commit_gate": commit_gate, "closeout": closeout}
    return WorkflowSpec(id=f"sprint-story:{key}", name=f"sprint story {key}", format=FORMAT, steps=steps,
                        meta={"story": key, "budget": budget})


def _flow(workflow: WorkflowSpec, run: Run) -> SprintFlow:
    raw = workflow.meta.get("budget") or {}
    return SprintFlow(run, Budget(builds=int(raw.get("builds", 3)), reviews=int(raw.get("reviews", 2)),
                                  merge=bool(raw.get("merge")), plan_gate=bool(raw.get("plan_gate")),
                                  commit_gate=bool(raw.get("commit_gate")), closeout=bool(raw.get("closeout"))))


async def _checkpoint(ctx: StepContext) -> None:
    """A person approved the checkpoint (the engine's gate let the stage run); a rejection never gets here."""
    ctx.step.choice = "approved"
    ctx.step.summary = f"{ctx.spec.id} approved"


_STAGE_DRIVERS: dict[str, Callable[[StepContext], Awaitable[None]]] = {
    "baseline": baseline, "build": build, "verify": verify, "verify-final": verify, "review": review,
    "commit": commit, "merge": merge, "advance": advance, "closeout": closeout, "defer": defer,
    "checkpoint-plan": _checkpoint, "checkpoint-commit": _checkpoint,
}


async def run_sprint_stage(ctx: StepContext) -> None:
    """Run one stage of a story (the step's id names it: ``build@2`` is the second build); the first stage of a story
    the loop resumes is reconciled first."""
    await stop_left_agents(ctx)  # before the stage puts anything back or starts an agent again
    resumed = link(ctx).take_reconcile()
    if ctx.spec.id == "defer" or not resumed or await reconcile(ctx):
        await _STAGE_DRIVERS[ctx.spec.id.split("@", 1)[0]](ctx)
    set_var(ctx, "sprint_stage", ctx.spec.id)


register_driver(FORMAT, run_sprint_stage, _flow)
