"""The ``merge`` stage of a worktree run: the story's branch brought into the main checkout, its worktree removed.

In a parallel loop the merge waits for its turn in the loop's merge queue (one at a time, in sprint order among the
stories in flight); in its turn the story's commit is rebased onto the integration branch as it is now, the verify
commands run again on that result, and only then does the branch move (fast-forward). A conflict or a failing check
lands nothing: the story is built again on the new base (``rebuild``), the reason in its record, a conflicting
attempt kept on ``refs/stepline/preserve/…``; it keeps its place in the merge order. Each time, another story has
landed since it was built: on the commit it was built on (its verify saw its branch descend from it) a rebase has
nothing to do and its checks passed. So a story is sent back at most once per landing, and never deferred for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline.errors import StepFailed
from stepline.sprint._stage import (
    effect,
    excluded,
    last_lines,
    link,
    record_evidence,
    run_command,
    set_var,
    sprint_config,
    story_key,
    story_vars,
    workspace,
)
from stepline.tools import find_commit, git, git_error, git_ok, is_ancestor

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["merge"]


async def merge(ctx: StepContext) -> None:
    if story_vars(ctx).get("sprint_parallel"):
        await _merge_in_turn(ctx)
        return
    root, branch = ctx.project_root, str(story_vars(ctx)["sprint_branch"])
    sha = str(story_vars(ctx)["sprint_commit"])

    async def bring_in(redo: bool) -> dict[str, Any]:
        if not await is_ancestor(root, sha, "HEAD"):
            code, out = await git(root, "merge", "--no-edit", "-q", branch)
            if code != 0:
                await git(root, "merge", "--abort")
                raise StepFailed(f"cannot merge {branch} into the main checkout: {out.splitlines()[0] if out else code}"
                                 f"; the branch is kept, merge it by hand", retryable=False)
        head = await git_ok(root, "rev-parse", "HEAD")
        await git(root, "worktree", "remove", "--force", str(workspace(ctx)))
        await git(root, "branch", "-d", branch)  # merged: only a branch git knows is merged is deleted
        return {"head": head}

    result = await effect(ctx, "merge", {"branch": branch, "commit": sha}, bring_in)
    ctx.step.choice = "merged"
    ctx.step.summary = f"{branch} merged, HEAD {result['head'][:12]}"


async def _no_rebase_left(checkout: Path, branch: str) -> None:
    """Put away a rebase a crash cut short: ``--abort``, or — cut so early that git cannot read its state —
    ``--quit`` and the story's branch checked out again (a rebase moves the branch only at its end)."""
    if (await git(checkout, "rebase", "--abort"))[0] == 0:
        return
    for name in ("rebase-merge", "rebase-apply"):
        state = Path(await git_ok(checkout, "rev-parse", "--git-path", name))
        if (state if state.is_absolute() else checkout / state).exists():
            await git_ok(checkout, "rebase", "--quit")
            await git_ok(checkout, "checkout", "-q", "-f", branch)
            return


async def _merge_in_turn(ctx: StepContext) -> None:
    """A parallel loop's merge, in its turn (see the module's doc)."""
    root, checkout = ctx.project_root, workspace(ctx)
    key, branch = story_key(ctx), str(story_vars(ctx)["sprint_branch"])
    base = str(story_vars(ctx)["sprint_baseline"])
    trailers = {"Stepline-Run": ctx.run.run_id, "Stepline-Story": key}

    async def land() -> dict[str, Any]:
        await git(root, "worktree", "remove", "--force", str(checkout))
        await git(root, "branch", "-d", branch)
        return {"head": await git_ok(root, "rev-parse", "HEAD")}

    async def rebase_verify_move(redo: bool) -> dict[str, Any]:
        if redo and (landed := await find_commit(root, trailers)):  # it landed before the crash
            return {**await land(), "redo": f"found in the history as {landed[:12]}"}
        await _no_rebase_left(checkout, branch)
        onto = await git_ok(root, "rev-parse", "HEAD")
        code, out = await git(checkout, "-c", "user.name=stepline", "-c", "user.email=stepline@localhost",
                              "rebase", "-q", "--autostash", onto)
        if code != 0:
            await git(checkout, "rebase", "--abort")
            if not any("CONFLICT" in line or line.startswith("error: could not apply") for line in out.splitlines()):
                raise StepFailed(f"cannot rebase {branch} onto the integration branch: {git_error(out) or code}",
                                 retryable=False)  # not the change's conflict: building it again would not help
            kept = f"refs/stepline/preserve/{key}/{ctx.spec.id}/1"
            await git_ok(checkout, "update-ref", kept, "HEAD")
            await git_ok(checkout, "reset", "-q", "--hard", onto)
            await git(checkout, "clean", "-q", "-fd", "--", ".", *excluded(ctx))
            first = next((line for line in out.splitlines() if "CONFLICT" in line), out.splitlines()[0] if out else "")
            return {"rebuild": f"the change conflicts with the integration branch at {onto[:12]} ({first.strip()}); "
                               f"the attempt is kept on {kept}", "onto": onto}
        checks: list[dict[str, Any]] = []
        if onto != base:  # the branch moved: the merged result is verified again (else verify-final did)
            verify_cfg = sprint_config(ctx).get("verify") or {}
            for command in verify_cfg.get("commands") or []:
                checks.append(await run_command(command, checkout, float(verify_cfg.get("timeout_seconds") or 600)))
        failed = [c for c in checks if c["exit"] != 0]
        if failed:
            return {"rebuild": "on the integration branch at " + onto[:12] + ", " + "; ".join(
                f"`{c['command']}` exited {c['exit']}: {last_lines(c['output'])}" for c in failed), "onto": onto,
                "checks": checks}
        code, out = await git(root, "merge", "--ff-only", "-q", branch)
        if code != 0:
            raise StepFailed(f"cannot move the integration branch to {branch}: {out.splitlines()[0] if out else code}"
                             "; the branch is kept, merge it by hand", retryable=False)
        return {**await land(), "onto": onto, "checks": checks}

    queue = link(ctx).queue
    async with queue.turn(key):
        result = await effect(ctx, "merge", {"branch": branch, "commit": str(story_vars(ctx)["sprint_commit"])},
                              rebase_verify_move)
        if "rebuild" not in result:
            await queue.left(key)  # landed: the later stories' merges need not wait for its closeout
    if "rebuild" in result:
        ctx.step.choice, ctx.step.summary = "rebuild", result["rebuild"]
        set_var(ctx, "sprint_baseline", result["onto"])
        set_var(ctx, "sprint_feedback", f"- the merge onto the integration branch failed: {result['rebuild']}")
        set_var(ctx, "sprint_reason", f"not merged: {result['rebuild']}")
        record_evidence(ctx, f"{ctx.spec.id}: {result['rebuild']}", "invalid")
        return
    ctx.step.choice = "merged"
    ctx.step.summary = (f"{branch}: {result['redo']}" if "redo" in result else f"{branch} rebased onto "
                        f"{result['onto'][:12]}, {len(result['checks'])} check(s) passed again") + \
        f", HEAD {result['head'][:12]}"
