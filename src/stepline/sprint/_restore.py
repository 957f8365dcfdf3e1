"""A stage's starting point, and putting the story's checkout back to it.

Each stage whose agent works records how it found the checkout (:func:`stage_start`, journaled once): its HEAD and a
snapshot commit of its files on ``refs/stepline/baseline/<story>/<stage>``. Before the stage's agent works again (the
run was killed while it worked, or it failed for a reason that was not the work's), what the checkout holds is kept
on ``refs/stepline/preserve/<story>/<stage>/<n>`` and the checkout is put back (:func:`back_to_stage_start`): the
story's commit then holds each change once. The loop's ledgers (the board, deferred-work.md) keep what they say now.
Before anything is put back, an agent a dead driver left running in the stage is stopped and waited for
(:func:`stop_left_agents`): its later writes would land in the story's commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline.model import EventType
from stepline.sprint._stage import effect, excluded, own_paths, story_key, workspace
from stepline.tools import git, git_ok

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["back_to_stage_start", "put_back", "stage_start", "stop_left_agents"]

#: How long a left agent's process group has between SIGTERM and SIGKILL.
_STOP_GRACE = 3.0


async def stop_left_agents(ctx: StepContext) -> None:
    """Stop every agent process a dead driver left running in this stage — found by its journaled pid, start time
    and boot id (the record a call journals before its agent starts) — and wait until nothing of its process group
    runs; the stage's agents' private folders go too. Each one stopped is journaled (``sprint:left-agent/<n>``)."""
    from stepline.executors.cli_agents import remove_private_folders, stop_left_over

    prefix = f"{ctx.spec.id}/"
    left = [record for key, record in list(ctx.engine.calls.started.items())
            if key.startswith(prefix) and record.get("op") == "agent_process"]
    for record in left:
        if (done := await stop_left_over(dict(record.get("args") or {}), _STOP_GRACE)) is not None:
            number = 1 + sum(1 for k in ctx.engine.calls.recorded if k.startswith(f"{prefix}sprint/left-agent/"))
            ctx.emit(EventType.CALL_RECORDED, {"key": f"{prefix}sprint/left-agent/{number}",
                                               "op": f"sprint:left-agent/{number}", "result": {"stopped": done}})
    remove_private_folders(ctx.run.run_id, ctx.spec.id)  # one killed before it was journaled too (none runs now)


async def _snapshot(ctx: StepContext, checkout: Path, message: str) -> str:
    """A commit of the checkout as it is now (tracked and untracked files, the loop's ledgers left out), its HEAD
    the parent, made through a scratch index: HEAD, the index and the files are not touched."""
    index = ctx.project_root / ".stepline" / "sprint" / "scratch" / f"{ctx.run.run_id}.index"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        await git_ok(checkout, "read-tree", "HEAD", env=env)
        await git_ok(checkout, "add", "-A", "--", ".", env=env)
        await git(checkout, "reset", "-q", "HEAD", "--", *own_paths(ctx), env=env)  # as the story's commit does
        tree = await git_ok(checkout, "write-tree", env=env)
    finally:
        index.unlink(missing_ok=True)
    return await git_ok(checkout, "-c", "user.name=stepline", "-c", "user.email=stepline@localhost",
                        "commit-tree", tree, "-p", "HEAD", "-m", message)


async def put_back(ctx: StepContext, checkout: Path, head: str, files: str, saved: Path) -> None:
    """The checkout back to the files of commit ``files`` with HEAD at ``head`` (later commits, the agent's, leave
    the branch) — the loop's ledgers as they are now: a board status never goes back. Done again from the start
    after a crash halfway (``saved`` keeps the ledgers across it)."""
    from stepline.store import atomic_write_bytes, atomic_write_json, read_json

    ledgers: dict[str, str] | None = read_json(saved, None)
    if ledgers is None:
        found = [checkout / rel for rel in own_paths(ctx)]
        ledgers = {str(path): path.read_text(encoding="utf-8") for path in found if path.is_file()}
        saved.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(saved, ledgers)
    await git_ok(checkout, "reset", "-q", "--hard", files)
    await git(checkout, "clean", "-q", "-fd", "--", ".", *excluded(ctx))
    if files != head:  # HEAD back to ``head``, the files kept, the index as HEAD (new files untracked again)
        await git_ok(checkout, "reset", "-q", head)
    for name, text in ledgers.items():
        atomic_write_bytes(Path(name), text.encode("utf-8"))
    saved.unlink()


async def stage_start(ctx: StepContext) -> dict[str, Any]:
    """How this stage found the checkout (journaled once per stage): its HEAD, and a snapshot commit of its files
    kept under ``refs/stepline/baseline/<story>/<stage>`` (git's gc keeps it) — what an interrupted attempt is
    put back to before the stage's agent works again."""
    key, checkout = story_key(ctx), workspace(ctx)

    async def record(redo: bool) -> dict[str, Any]:
        head = await git_ok(checkout, "rev-parse", "HEAD")
        files = await _snapshot(ctx, checkout, f"stepline: story {key} before {ctx.spec.id}")
        await git_ok(checkout, "update-ref", f"refs/stepline/baseline/{key}/{ctx.spec.id}", files)
        return {"head": head, "files": files}

    return await effect(ctx, "stage-start", {}, record)


async def back_to_stage_start(ctx: StepContext, start: dict[str, Any]) -> None:
    """Before the stage's agent works again: what the checkout holds now is kept on
    ``refs/stepline/preserve/<story>/<stage>/<n>``, and the checkout is put back to how the stage found it."""
    key, checkout = story_key(ctx), workspace(ctx)
    prefix = f"{ctx.spec.id}/sprint/put-back/"
    number = 1 + sum(1 for k in ctx.engine.calls.recorded if k.startswith(prefix))
    ref = f"refs/stepline/preserve/{key}/{ctx.spec.id}/{number}"

    async def restore(redo: bool) -> dict[str, Any]:
        code, kept = await git(checkout, "rev-parse", "--verify", "-q", ref)
        if not redo or code != 0:  # a redo after a crash halfway keeps what it preserved the first time
            kept = await _snapshot(ctx, checkout, f"stepline: story {key} {ctx.spec.id}, interrupted attempt")
            head = await git_ok(checkout, "rev-parse", "HEAD")
            if head == start["head"] and await _same_files(checkout, kept, start["files"]):
                return {"preserved": None}
            await git_ok(checkout, "update-ref", ref, kept)
        await put_back(ctx, checkout, start["head"], start["files"],
                       ctx.project_root / ".stepline" / "sprint" / "scratch" / f"{ctx.run.run_id}.ledgers.json")
        return {"preserved": ref}

    await effect(ctx, f"put-back/{number}", {"head": start["head"], "files": start["files"]}, restore)


async def _same_files(checkout: Path, one: str, other: str) -> bool:
    return await git_ok(checkout, "rev-parse", f"{one}^{{tree}}") == await git_ok(
        checkout, "rev-parse", f"{other}^{{tree}}")
