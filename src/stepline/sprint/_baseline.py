"""The ``baseline`` stage: the runtime (not the agent) records the commit the story starts from and the board as
it is then, and in a worktree run makes the story's worktree and branch; a non-isolated run needs a clean working
tree. A story whose commit is already in the history, which the loop has no run of, is never built again unasked.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline.errors import StepFailed
from stepline.sprint._board import read_board
from stepline.sprint._stage import (
    effect,
    excluded,
    gate_key,
    local_board,
    once,
    record_evidence,
    set_var,
    story_key,
    story_vars,
)
from stepline.tools import find_commit, git, git_error, git_ok

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["baseline"]

#: How long a failed ``git worktree add`` waits before its one try again.
_WORKTREE_RETRY_WAIT = 0.5


async def baseline(ctx: StepContext) -> None:
    root, key = ctx.project_root, story_key(ctx)
    isolated = story_vars(ctx).get("sprint_isolation") == "worktree"

    if not isolated:  # a shared checkout must be clean: the story's change is what differs from the baseline
        async def status() -> dict[str, Any]:
            code, out = await git(root, "status", "--porcelain", "--untracked-files=all", "--", ".", *excluded(ctx))
            if code != 0:
                return {"error": out.splitlines()[0] if out else f"git exited {code}"}
            # "XY path" lines; the first came stripped (" M a" as "M a"): the path is what follows the status
            return {"dirty": [line[2:].strip() for line in out.splitlines() if line.strip()]}

        found = await once(ctx, "clean", status)
        if found.get("error"):
            raise StepFailed(f"{root}: git status failed: {found['error']}", retryable=False)
        if found["dirty"]:
            raise StepFailed(f"the working tree has uncommitted changes ({', '.join(found['dirty'][:5])}); commit or "
                             "stash them, or run with isolation: worktree", retryable=False)

    if await _committed_before(ctx):
        return

    async def record() -> dict[str, Any]:
        return {"head": await git_ok(root, "rev-parse", "HEAD")}

    base = await once(ctx, "baseline", record)
    checkout = root
    if isolated:
        branch = f"sprint/{key}"
        folder = root / ".stepline" / "sprint" / "worktrees" / key

        async def make(redo: bool) -> dict[str, Any]:
            made: dict[str, Any] = {"path": str(folder), "branch": branch}
            for attempt in (1, 2):
                if (folder / ".git").exists():
                    break
                if folder.exists():  # what a failed `worktree add` left: git refuses an existing folder
                    shutil.rmtree(folder)
                    await git(root, "worktree", "prune")
                code, out = await git(root, "worktree", "add", "-B", branch, str(folder), base["head"])
                if code == 0:
                    break
                # Stories started at once race for git's locks (a ref, the config): tried again once, a moment later.
                if attempt == 2:
                    raise StepFailed(f"cannot make the story's worktree {folder}: {git_error(out) or code} (tried "
                                     f"twice; first: {made['retried']})", retryable=False)
                made["retried"] = git_error(out) or f"git exited {code}"
                await asyncio.sleep(_WORKTREE_RETRY_WAIT)
            return made

        made = await effect(ctx, "worktree", {"path": str(folder), "branch": branch}, make)
        checkout = Path(made["path"])
        set_var(ctx, "sprint_branch", made["branch"])
        if made.get("retried"):
            record_evidence(ctx, f"baseline: the story's worktree was made at the second try; the first failed: "
                                 f"{made['retried']}", "L1")

    async def board() -> dict[str, Any]:  # the board as the story's checkout has it (a worktree: as committed)
        return {"statuses": read_board(local_board(ctx, checkout)).statuses()}

    set_var(ctx, "sprint_baseline", base["head"])
    set_var(ctx, "sprint_board_at_baseline", (await once(ctx, "board", board))["statuses"])
    set_var(ctx, "sprint_workspace", str(checkout))
    ctx.step.choice = "recorded"
    ctx.step.summary = f"baseline {base['head'][:12]} in {checkout}"


async def _committed_before(ctx: StepContext) -> bool:
    """A story this loop has no run of, whose commit (its ``Stepline-Story`` trailer) is in the history already:
    committed work is never redone without a person saying so (``ask:reconcile:<story>:1``: ``done`` moves the
    board to done and builds nothing; ``redo`` builds it again). True when the story is done."""
    key = story_key(ctx)

    async def look() -> dict[str, Any]:
        sha = await find_commit(ctx.project_root, {"Stepline-Story": key})
        return {"sha": sha, "subject": await git_ok(ctx.project_root, "log", "-1", "--format=%s", sha) if sha else ""}

    found = await once(ctx, "committed-before", look)
    if not found["sha"]:
        return False
    status = read_board(Path(str(story_vars(ctx)["sprint_board"]))).statuses().get(key)
    question = (f"Story {key} is already committed ({found['sha'][:12]} {found['subject']}), but the board says "
                f"{status} and the loop has no run of it. Answer done (the board moves to done; nothing is built) or "
                "redo (build it again on top).")
    answer = await ctx.engine.human.ask(ctx, question, ["done", "redo"], gate_key(ctx, "reconcile"))
    if not answer.strip().lower().startswith("done"):
        return False
    ctx.step.choice, ctx.step.summary = "committed-before", f"already committed as {found['sha'][:12]}"
    set_var(ctx, "sprint_commit", found["sha"])
    return True
