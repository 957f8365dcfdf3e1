"""The ``commit`` and ``advance`` stages: the story's change as one commit on its baseline (the agent's own commits
squashed into it; they stay in the reflog), its message from the story's title, the story file marked done in it,
with ``Stepline-Run``/``Stepline-Story`` trailers that find it again after a crash; then the board moves to ``done``
(and the story's epic with it), the board never part of a story's commit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline.sprint._board import read_board, set_status
from stepline.sprint._project import find_project
from stepline.sprint._stage import effect, own_paths, set_var, story_key, story_vars, workspace
from stepline.tools import find_commit, git, git_ok, with_trailers

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["advance", "commit"]


def _story_title(path: Path | None, key: str) -> str:
    if path is None or not path.is_file():
        return key
    text = path.read_text(encoding="utf-8", errors="replace")
    match = re.search(r"^title:\s*['\"]?(.+?)['\"]?\s*$", text, re.MULTILINE) if text.startswith("---") else None
    heading = match or re.search(r"^#\s+(.+?)\s*$", text, re.MULTILINE)
    return heading.group(1) if heading else key


def _mark_story_done(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if text.startswith("---") and re.search(r"^status:.*$", text, re.MULTILINE):
        new = re.sub(r"^status:.*$", "status: done", text, count=1, flags=re.MULTILINE)
    else:
        new = re.sub(r"^(\s*\**Status\**\s*:\s*).*$", r"\1done", text, count=1, flags=re.MULTILINE)
    if new != text:
        path.write_text(new, encoding="utf-8")


async def commit(ctx: StepContext) -> None:
    key, base = story_key(ctx), str(story_vars(ctx)["sprint_baseline"])
    checkout = workspace(ctx)
    story = find_project(checkout).story_file(key)
    message = f"story {key}: {_story_title(story.path if story else None, key)}"
    trailers = {"Stepline-Run": ctx.run.run_id, "Stepline-Story": key}

    async def make(redo: bool) -> dict[str, Any]:
        if redo and (sha := await find_commit(checkout, trailers)):
            return {"sha": sha, "redo": "found in the history"}
        if story is not None:
            _mark_story_done(story.path)
        # One commit per story on the baseline: the agent's commits are squashed into it (still in the reflog).
        await git_ok(checkout, "reset", "-q", "--soft", base)
        await git_ok(checkout, "add", "-A", "--", ".")
        await git(checkout, "reset", "-q", base, "--", *own_paths(ctx))  # the board and .stepline stay out
        await git_ok(checkout, "commit", "-q", "--no-verify", "-m", with_trailers(message, trailers))
        return {"sha": await git_ok(checkout, "rev-parse", "HEAD"), "message": message}

    result = await effect(ctx, "commit", {"baseline": base, "message": message}, make)
    set_var(ctx, "sprint_commit", result["sha"])
    ctx.step.choice = "committed"
    ctx.step.summary = f"{result['sha'][:12]} {message}"


async def advance(ctx: StepContext) -> None:
    key = story_key(ctx)
    board_path = Path(str(story_vars(ctx)["sprint_board"]))
    lock = ctx.project_root / ".stepline" / "sprint" / "board.lock"

    async def move(redo: bool) -> dict[str, Any]:
        changed = set_status(board_path, key, "done", lock_path=lock)
        board = read_board(board_path)
        entry = board.entry(key)
        epic = f"epic-{entry.epic}" if entry is not None and entry.epic is not None else None
        if epic and board.entry(epic) is not None:
            mine = [s for s in board.stories if s.epic == entry.epic]  # type: ignore[union-attr]
            set_status(board_path, epic, "done" if all(s.status == "done" for s in mine) else "in-progress",
                       lock_path=lock)
        return {"changed": changed}

    await effect(ctx, "advance", {"key": key, "status": "done"}, move)
    ctx.step.choice = "done"
    ctx.step.summary = f"{key}: done on the board"
