"""Before a resumed story goes on (the first stage the loop's resume runs): git (the branch, the worktree, the
story's commit found by its trailers), the board and the journal compared, journaled as ``reconcile``.

What can be settled is (a worktree gone while its branch is kept is made again); a disagreement that cannot is a
question (``ask:reconcile:<story>:<visit>``): ``continue`` (a person put it right, or the loop takes it as it is) or
``defer`` (nothing committed is reset).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stepline.model import EventType
from stepline.sprint._board import read_board
from stepline.sprint._stage import gate_key, set_var, story_key, story_vars, workspace
from stepline.tools import find_commit, git, git_ok, is_ancestor

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["reconcile"]


async def reconcile(ctx: StepContext) -> bool:
    """Compare git, the board and the journal of a resumed story; False when a person deferred the story."""
    if "sprint_baseline" not in story_vars(ctx):
        return True
    key, base = story_key(ctx), str(story_vars(ctx)["sprint_baseline"])
    root, checkout = ctx.project_root, workspace(ctx)
    done = {sid for sid, step in ctx.run.steps.items() if step.status.value == "completed"}
    # A merge the kill cut short may have removed the worktree and branch itself, once the story landed: its redo
    # finds the story's commit by its trailers.
    merging = ctx.spec.id.split("@", 1)[0] == "merge" and f"{ctx.spec.id}/sprint/merge" in ctx.engine.calls.started
    settled: list[str] = []
    problems: list[str] = []
    if story_vars(ctx).get("sprint_isolation") == "worktree" and "merge" not in done and not merging and not (
            checkout / ".git").exists():
        branch = str(story_vars(ctx).get("sprint_branch"))
        code, _ = await git(root, "rev-parse", "--verify", "-q", f"refs/heads/{branch}")
        if code == 0:
            await git(root, "worktree", "prune")
            made, out = await git(root, "worktree", "add", str(checkout), branch)
            (settled if made == 0 else problems).append(
                f"its worktree {checkout} was gone: made again from branch {branch}" if made == 0 else
                f"its worktree {checkout} is gone and cannot be made again from {branch}: {out.splitlines()[:1]}")
        else:
            problems.append(f"its worktree {checkout} and its branch {branch} are gone")
    where = checkout if (checkout / ".git").exists() else root
    head = await git_ok(where, "rev-parse", "HEAD")
    if not await is_ancestor(where, base, head):
        problems.append(f"HEAD {head[:12]} does not descend from the story's baseline {base[:12]} (the history was "
                        "rewritten while the loop was stopped)")
    found = await find_commit(where, {"Stepline-Story": key})
    if "commit" in done and found is None and "merge" not in done:
        problems.append(f"its commit {str(story_vars(ctx).get('sprint_commit'))[:12]} is no longer in the history")
    if "commit" not in done and found is not None and "commit/sprint/commit" not in ctx.engine.calls.started:
        problems.append(f"the history holds a commit of it ({found[:12]}) the loop's journal does not know")
    status = read_board(Path(str(story_vars(ctx)["sprint_board"]))).statuses().get(key)
    if status == "done" and "commit" not in done and found is None:
        problems.append("the board says done, but the loop has no commit of it")
    ctx.emit(EventType.CALL_RECORDED, {"key": f"{ctx.spec.id}/sprint/reconcile", "op": "sprint:reconcile",
                                       "result": {"settled": settled, "disagreements": problems}})
    if not problems:
        return True
    question = (f"Story {key}, resumed: git and the board disagree with the loop's journal: {'; '.join(problems)}. "
                "Answer continue (you put it right, or the loop takes it as it is) or defer (set the story aside; "
                "nothing committed is reset).")
    answer = await ctx.engine.human.ask(ctx, question, ["continue", "defer"], gate_key(ctx, "reconcile"))
    if answer.strip().lower().startswith("defer"):
        ctx.step.choice, ctx.step.summary = "defer", "a person deferred it at the resume: " + "; ".join(problems)
        set_var(ctx, "sprint_reason", ctx.step.summary)
        return False
    return True
