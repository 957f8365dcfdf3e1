"""``ccw execute --with-commit`` (CCW v7): one git commit per completed task, of the files that task changed.

CCW's rule, from its ``workflow-execute`` skill: after a task completes, commit only the files it modified
(minimal principle), with the message ``{type}: {task-title} - {summary-first-line}``, the type taken from
``meta.type`` (feature → feat, bugfix → fix, refactor → refactor); no changes or no summary means no commit,
and a failed commit is logged and the session goes on.

Exactly once across a crash: the commit's intent is journaled (fsynced) before git runs and its result after.
A commit carries the trailers ``Stepline-Run`` and ``Stepline-Task``, so a resumed task whose intent has no
result looks for its commit in the history before committing again. Commits of a run are made one at a time
(tasks run in parallel; git has one index).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from stepline.model import EventType
from stepline.tools import find_commit, git, with_trailers

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["commit_message", "commit_task"]

_TYPES = {"feature": "feat", "feat": "feat", "bugfix": "fix", "fix": "fix", "refactor": "refactor",
          "test": "test", "tests": "test", "docs": "docs", "documentation": "docs"}


def commit_message(task_type: object, title: str, summary: str) -> str | None:
    """CCW's commit message for a task: its summary's first line that is not a heading; None when there is
    none (no commit then)."""
    lines = [line.strip() for line in summary.splitlines()]
    first = next((line for line in lines if line and not line.startswith("#")), "")  # headings are not the summary
    if not first:
        return None
    kind = _TYPES.get(str(task_type or "").lower(), "chore")
    return f"{kind}: {title} - {first}"


def _trailers(ctx: StepContext) -> dict[str, str]:
    return {"Stepline-Run": ctx.run.run_id, "Stepline-Task": ctx.spec.id}


def _lock(ctx: StepContext) -> asyncio.Lock:
    engine: Any = ctx.engine
    lock: asyncio.Lock | None = getattr(engine, "_ccw_commit_lock", None)
    if lock is None:
        lock = engine._ccw_commit_lock = asyncio.Lock()
    return lock


async def commit_task(ctx: StepContext, files: list[str], summary: str) -> None:
    """Commit ``files`` (project-relative, what the task wrote) for ``ctx``'s task, once; journal the result
    (the commit's sha, or why there is none)."""
    spec, calls, root = ctx.spec, ctx.engine.calls, ctx.project_root
    key = f"{spec.id}/ccw/commit"
    if key in calls.recorded:
        return
    async with _lock(ctx):
        result: dict[str, Any]
        if key in calls.started and (sha := await find_commit(root, _trailers(ctx))):
            result = {"sha": sha, "redo": "found in the history"}
        else:
            message = commit_message(spec.meta.get("type"), spec.name or spec.id, summary)
            result = await _commit(ctx, key, files, message)
        ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": "ccw_commit", "result": result})
    if "error" in result:  # told, not only journaled
        ctx.step.summary = f"{ctx.step.summary or 'completed'} (commit failed: {result['error']})"


async def _commit(ctx: StepContext, key: str, files: list[str], message: str | None) -> dict[str, Any]:
    root = ctx.project_root
    if not files:
        return {"skipped": "the task changed no file"}
    if message is None:
        return {"skipped": "the task's summary is empty"}
    ctx.emit(EventType.CALL_STARTED, {"key": key, "op": "ccw_commit", "args": {"files": files, "message": message}},
             sync=True)
    code, out = await git(root, "add", "--", *files)
    if code == 0:
        code, out = await git(root, "commit", "--no-verify", "-m", with_trailers(message, _trailers(ctx)), "--", *files)
    if code != 0 and "nothing to commit" in out:
        return {"skipped": "no change to commit"}
    if code != 0:  # CCW: log the error and go on with the session
        return {"error": out.splitlines()[0] if out else f"git exited {code}"}
    _, sha = await git(root, "rev-parse", "HEAD")
    return {"sha": sha, "message": message}
