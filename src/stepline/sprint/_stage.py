"""What every stage of a story's run uses: journaled results and effects, the story's facts (its checkout, the
paths its change never includes, its config), its questions' keys, evidence, and the project's commands.

A stage's result (a check, a command) is journaled once per attempt (:func:`once`); an effect outside the process
(git, the board, deferred-work.md) journals its intent, fsynced, first and its result after (:func:`effect`): an
intent without a result is redone idempotently or looked up. What the loop hands a story's stages beside the
journal (its merge queue, its ledger, whether the story is being resumed) is the story engine's
:class:`~stepline.sprint._link.StoryLink` (:func:`link`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline import time
from stepline.model import EventType
from stepline.sprint._link import StoryEngine, StoryLink

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["effect", "excluded", "gate_key", "last_lines", "link", "local_board", "once", "own_paths",
           "record_evidence", "run_command", "set_var", "sprint_config", "story_key", "story_vars", "workspace"]


def story_vars(ctx: StepContext) -> dict[str, Any]:
    """The story run's variables (the loop set them when it started the run; the stages add theirs)."""
    return ctx.run.variables


def story_key(ctx: StepContext) -> str:
    return str(story_vars(ctx)["sprint_story"])


def link(ctx: StepContext) -> StoryLink:
    """What the loop driving this story hands its stages; a story run driven outside a loop has a link of its own."""
    engine = ctx.engine
    if isinstance(engine, StoryEngine):
        return engine.link
    return StoryLink.alone()


def set_var(ctx: StepContext, name: str, value: Any) -> None:
    """A run variable later stages read (journaled; set again identically when a stage is redone)."""
    if ctx.run.variables.get(name) != value:
        ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})


async def once(ctx: StepContext, name: str, compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """The journaled result of ``name`` in this attempt of this stage, or ``compute``'s, journaled (a check, a
    command): a resumed attempt replays it, a new attempt (after a failure) checks again."""
    key = f"{ctx.spec.id}/{ctx.attempt}/sprint/{name}"
    recorded = ctx.engine.calls.recorded.get(key)
    if recorded is not None:
        cached: dict[str, Any] = recorded["result"]
        return cached
    result = await compute()
    ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": f"sprint:{name}", "result": result})
    return result


async def effect(ctx: StepContext, name: str, args: dict[str, Any], do: Callable[[bool], Awaitable[dict[str, Any]]]
                 ) -> dict[str, Any]:
    """An effect outside the process, once: intent fsynced, then ``do(redo)``, then its result. ``redo`` is
    True when an earlier attempt journaled the intent and no result (the effect may have happened)."""
    key = f"{ctx.spec.id}/sprint/{name}"
    calls = ctx.engine.calls
    recorded = calls.recorded.get(key)
    if recorded is not None:
        cached: dict[str, Any] = recorded["result"]
        return cached
    redo = key in calls.started
    if not redo:
        ctx.emit(EventType.CALL_STARTED, {"key": key, "op": f"sprint:{name}", "args": args}, sync=True)
    result = await do(redo)
    ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": f"sprint:{name}", "args": args, "result": result})
    return result


def workspace(ctx: StepContext) -> Path:
    """The story's checkout: its worktree, or the project's."""
    return Path(str(story_vars(ctx).get("sprint_workspace") or ctx.project_root))


def excluded(ctx: StepContext) -> list[str]:
    """Pathspecs the story's change never includes: the loop's ledgers (the board, deferred-work.md beside
    it) and stepline's own folder."""
    board = Path(str(story_vars(ctx)["sprint_board"]))
    try:
        rel = board.relative_to(ctx.project_root)
    except ValueError:
        rel = Path(board.name)
    return [f":(exclude){rel.as_posix()}", f":(exclude){(rel.parent / 'deferred-work.md').as_posix()}",
            ":(exclude).stepline"]


def own_paths(ctx: StepContext) -> list[str]:
    """The board and stepline's folder, as paths (what :func:`excluded` excludes)."""
    return [spec.removeprefix(":(exclude)") for spec in excluded(ctx)]


def local_board(ctx: StepContext, checkout: Path) -> Path:
    """The board in the story's checkout: the main one, or a worktree's copy (which the agent edits there)."""
    board = Path(str(story_vars(ctx)["sprint_board"]))
    if board.is_relative_to(ctx.project_root) and (local := checkout / board.relative_to(ctx.project_root)).is_file():
        return local
    return board


def sprint_config(ctx: StepContext) -> dict[str, Any]:
    """config/sprint.yaml as the loop started the story with it."""
    config: dict[str, Any] = story_vars(ctx).get("sprint_config") or {}
    return config


def gate_key(ctx: StepContext, question: str) -> str:
    """The key of a question a person answers for this story at this stage's visit (``review-escalation:1-2-sub:2``
    is the second review round's): one answer settles that question only, never another story's or round's."""
    visit = ctx.spec.id.split("@", 1)
    return f"{question}:{story_key(ctx)}:{visit[1] if len(visit) > 1 else 1}"


def record_evidence(ctx: StepContext, claim: str, level: str) -> None:
    digest = hashlib.sha256(claim.encode("utf-8")).hexdigest()[:12]
    ctx.engine.record_evidence(ctx, {
        "id": f"sprint-{ctx.spec.id}-{digest}", "claim": claim[:500], "level": level, "source": "stepline sprint",
        "date": time.now_iso(), "valid_until": None, "congruence": "CL3", "wlnk": None,
        "carrier_ref": f"run {ctx.run.run_id} step {ctx.spec.id}", "reliability": 0.9 if level == "L1" else 0.5})


def last_lines(text: str, count: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])[:400]


async def run_command(command: str, cwd: Path, timeout: float) -> dict[str, Any]:
    """Run one of the project's checks (no shell: a list of words); its exit status and output."""
    try:
        process = await asyncio.create_subprocess_exec(*shlex.split(command), cwd=cwd, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except (OSError, ValueError) as exc:  # not found, not executable, unbalanced quotes
        return {"command": command, "exit": None, "output": f"cannot run it: {exc}"}
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout=timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # the check and everything it started
        await process.wait()
        return {"command": command, "exit": None, "output": f"timed out after {timeout:.0f}s"}
    text = out.decode("utf-8", "replace")
    return {"command": command, "exit": process.returncode, "output": text[-20000:]}
