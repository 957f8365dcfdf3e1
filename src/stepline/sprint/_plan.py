"""Which stories a sprint loop takes, in sprint order (pure: a board in, keys out)."""

from __future__ import annotations

from collections.abc import Collection

from stepline.errors import NotFoundError, RunStateError, UsageError
from stepline.sprint._board import Board

__all__ = ["plan_stories"]

#: Statuses a story may be taken in: ready for development, or one the loop started and did not finish.
_TAKEN = ("ready-for-dev", "contexted")


def plan_stories(board: Board, *, epic: int | None = None, story: str | None = None, max_stories: int | None = None,
                 unfinished: Collection[str] = (), settled: Collection[str] = ()) -> list[str]:
    """The story keys to run, in the board's order.

    A story is taken when it is ``ready-for-dev`` (or has an ``unfinished`` run of the loop, whatever its
    status says now) and is not ``settled`` (committed or deferred by an earlier loop). ``epic`` keeps one
    epic's stories; ``story`` names one story (a key, or its ``N-M`` prefix); ``max_stories`` caps the count.
    """
    stories = board.stories
    if epic is not None:
        stories = [s for s in stories if s.epic == epic]
        if not stories:
            raise NotFoundError(f"{board.path}: epic {epic} has no stories",
                                hint="see `stepline sprint status` for the epics")
    if story is not None:
        named = [s for s in stories if s.key == story or s.key.startswith(story + "-")]
        if len(named) != 1:
            found = ", ".join(s.key for s in named) or "none"
            raise NotFoundError(f"{board.path}: {story!r} names no single story (matches: {found})",
                                hint="pass a story key as `stepline sprint status` shows it")
        stories = named
    chosen = [s.key for s in stories
              if s.key not in settled and (s.status in _TAKEN or s.key in unfinished)]
    if story is not None and not chosen:  # asked for by name: say why it is not taken, not "nothing to do"
        named_story = stories[0]
        why = ("an earlier loop settled it (committed or deferred)" if named_story.key in settled
               else f"its status is {named_story.status}, not ready-for-dev")
        raise RunStateError(f"{board.path}: story {named_story.key} is not taken: {why}",
                            hint="see `stepline sprint status`; a story is taken once it is ready-for-dev, a deferred "
                                 f"one again with `stepline sprint retry {named_story.key}`")
    if max_stories is not None:
        if max_stories < 1:
            raise UsageError("--max-stories must be at least 1")
        chosen = chosen[:max_stories]
    return chosen
