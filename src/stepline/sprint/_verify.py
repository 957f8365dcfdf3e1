"""The ``verify`` and ``verify-final`` stages: trust nothing the agent says. The story's file says review or done, the
change is not empty (the story file and the board do not count), the history descends from the baseline, the board
is consistent (no status gone back, no other story moved), and every ``verify.commands`` exits 0 — each result
journaled once, with its output, and recorded as evidence.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from stepline.sprint._board import read_board, status_rank
from stepline.sprint._project import find_project
from stepline.sprint._stage import (
    excluded,
    last_lines,
    local_board,
    once,
    record_evidence,
    run_command,
    set_var,
    sprint_config,
    story_key,
    story_vars,
    workspace,
)
from stepline.tools import git, git_ok, is_ancestor

if TYPE_CHECKING:
    from pathlib import Path

    from stepline.engine import StepContext

__all__ = ["verify"]

_DONE_STATES = ("review", "in-review", "done", "ready for review")


async def _changed_files(ctx: StepContext, checkout: Path, base: str) -> list[str]:
    """Files the story changed since ``base`` (commits and working tree, untracked included), minus the board,
    stepline's folder and the story's own file."""
    _, committed = await git(checkout, "diff", "--name-only", base, "--", ".", *excluded(ctx))
    _, untracked = await git(checkout, "ls-files", "--others", "--exclude-standard", "--", ".", *excluded(ctx))
    files = {f for f in (committed + "\n" + untracked).splitlines() if f.strip()}
    story = find_project(checkout).story_file(story_key(ctx))
    if story is not None:
        files.discard(story.path.resolve().relative_to(checkout.resolve()).as_posix())
    return sorted(files)


async def verify(ctx: StepContext) -> None:
    key = story_key(ctx)
    base = str(story_vars(ctx)["sprint_baseline"])
    checkout = workspace(ctx)
    failures: list[str] = []

    async def story_status() -> dict[str, Any]:
        story = find_project(checkout).story_file(key)
        if story is None:
            return {"ok": False, "detail": f"no story or spec file for {key}"}
        ok = (story.status or "") in _DONE_STATES
        return {"ok": ok, "detail": f"{story.path.name} says status {story.status!r}"
                + ("" if ok else " (expected review or done)")}

    async def diff() -> dict[str, Any]:
        files = await _changed_files(ctx, checkout, base)
        return {"ok": bool(files), "detail": f"{len(files)} file(s) changed: {', '.join(files[:10])}" if files
                else "no change besides the story file and the board (the agent claimed work it did not do)"}

    async def history() -> dict[str, Any]:
        head = await git_ok(checkout, "rev-parse", "HEAD")
        if not await is_ancestor(checkout, base, head):
            return {"ok": False, "detail": f"HEAD {head[:12]} does not descend from the baseline {base[:12]} "
                                           "(history was rewritten)"}
        return {"ok": True, "detail": f"HEAD {head[:12]} descends from {base[:12]}"
                + (" (working-tree change only)" if head == base else "")}

    async def board() -> dict[str, Any]:
        try:
            now = read_board(local_board(ctx, checkout))
        except Exception as exc:  # a board the agent broke is the story's failure, said in one line
            return {"ok": False, "detail": f"the board cannot be read: {exc}"}
        before: dict[str, str] = story_vars(ctx).get("sprint_board_at_baseline") or {}
        problems = []
        for entry in now.entries:
            old = before.get(entry.key)
            if old is None:
                continue
            if status_rank(entry.kind, entry.status) < status_rank(entry.kind, old):
                problems.append(f"{entry.key} went back from {old} to {entry.status}")
            elif entry.kind == "story" and entry.key != key and entry.status != old:
                problems.append(f"another story {entry.key} moved {old} -> {entry.status}")
        if now.entry(key) is None:
            problems.append(f"{key} is no longer on the board")
        return {"ok": not problems, "detail": "; ".join(problems) or "consistent"}

    checks: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
        ("story-status", story_status), ("diff", diff), ("history", history), ("board", board)]
    verify_cfg = sprint_config(ctx).get("verify") or {}
    for index, command in enumerate(verify_cfg.get("commands") or []):
        async def run(command: str = command) -> dict[str, Any]:
            result = await run_command(command, checkout, float(verify_cfg.get("timeout_seconds") or 600))
            how = f"exited {result['exit']}" if result["exit"] is not None else "did not run to its end"
            return {**result, "ok": result["exit"] == 0,
                    "detail": f"`{command}` {how}" + ("" if result["exit"] == 0 else
                                                      ": " + last_lines(result["output"]))}
        checks.append((f"command-{index + 1}", run))
    for name, check in checks:
        result = await once(ctx, f"check/{name}", check)
        if not result["ok"]:
            failures.append(f"{name}: {result['detail']}")
    ctx.step.choice = "fail" if failures else "pass"
    ctx.step.summary = "; ".join(failures) if failures else f"{len(checks)} checks passed"
    if failures:
        set_var(ctx, "sprint_feedback", "\n".join(f"- {f}" for f in failures))
        set_var(ctx, "sprint_reason", f"verification failed: {ctx.step.summary}")
    record_evidence(ctx, f"{ctx.spec.id}: {ctx.step.summary}", "L1" if not failures else "invalid")
