"""The ``defer`` stage, and deferred-work.md: a story that does not converge (out of budget, rejected at a
checkpoint, set aside by a person) is written to deferred-work.md with the reason; its attempt is kept (the worktree
branch, or a patch file), and a non-isolated checkout is put back to the baseline.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline import time
from stepline.sprint._flow import CHECKPOINTS
from stepline.sprint._restore import put_back
from stepline.sprint._stage import effect, excluded, own_paths, story_key, story_vars, workspace
from stepline.tools import git, is_ancestor

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["append_deferred", "defer"]


async def append_deferred(ctx: StepContext, name: str, lines: list[str]) -> None:
    """Append a block of ``lines`` about the story to deferred-work.md (beside the board), once."""
    key = story_key(ctx)
    target = Path(str(story_vars(ctx)["sprint_board"])).parent / "deferred-work.md"
    marker = f"<!-- stepline {ctx.run.run_id} {ctx.spec.id} {name} -->"
    block = (f"\n## {key} ({time.now_iso()[:10]}, {name})\n{marker}\n\n" + "\n".join(f"- {line}" for line in lines)
             + "\n")

    async def append(redo: bool) -> dict[str, Any]:
        text = target.read_text(encoding="utf-8") if target.is_file() else "# Deferred work\n"
        if marker not in text:  # a redo after a crash finds its block already there
            from stepline.store import atomic_write_bytes

            atomic_write_bytes(target, (text.rstrip("\n") + "\n" + block).encode("utf-8"))
        return {"path": str(target)}

    await effect(ctx, f"deferred/{name}", {"path": str(target)}, append)


async def defer(ctx: StepContext) -> None:
    key, base = story_key(ctx), str(story_vars(ctx).get("sprint_baseline") or "")
    reason = str(story_vars(ctx).get("sprint_reason") or "it did not converge within its budget")
    for checkpoint in CHECKPOINTS:  # a rejected checkpoint completes without its driver, so without a choice
        step = ctx.run.steps.get(checkpoint)
        if step is not None and step.status.value == "completed" and step.choice != "approved":
            reason = f"a person rejected the {checkpoint}: {step.summary}"
    checkout = workspace(ctx)
    kept: str
    if story_vars(ctx).get("sprint_isolation") == "worktree":
        kept = f"branch {story_vars(ctx).get('sprint_branch')} (worktree {checkout})"
    else:
        patch = ctx.project_root / ".stepline" / "sprint" / "deferred" / f"{key}-{ctx.run.run_id}.patch"

        async def keep_and_put_back(redo: bool) -> dict[str, Any]:
            from stepline.store import atomic_write_bytes

            if not patch.is_file():
                patch.parent.mkdir(parents=True, exist_ok=True)
                await git(checkout, "add", "-A", "-N", "--", ".")
                await git(checkout, "reset", "-q", "--", *own_paths(ctx))
                _, text = await git(checkout, "diff", base, "--", ".", *excluded(ctx))
                atomic_write_bytes(patch, (text + "\n").encode("utf-8"))
            if not await is_ancestor(checkout, base, "HEAD"):  # the history was rewritten: nothing of it is reset
                return {"patch": str(patch), "kept": "the checkout as it is (it no longer holds the baseline)"}
            await put_back(ctx, checkout, base, base, patch.with_suffix(".ledgers.json"))
            return {"patch": str(patch)}

        await effect(ctx, "put-back", {"baseline": base, "patch": str(patch)}, keep_and_put_back)
        kept = f"patch {patch.relative_to(ctx.project_root)}"
    await append_deferred(ctx, "deferred", [f"deferred by the sprint loop: {reason}", f"run: {ctx.run.run_id}",
                                            f"attempt kept as {kept}"])
    ctx.step.choice = "deferred"
    ctx.step.summary = f"{key} deferred: {reason}"
