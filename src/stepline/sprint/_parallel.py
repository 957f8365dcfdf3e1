"""Parallel stories (``stepline sprint run -j N``): which stories may build at once, and merges one at a time.

A story waits while a story it depends on is unfinished — a dependency written in its story file or in the epics
document (``Depends on Story 1.2``, ``Prerequisites: 2-1``, ``Epic 3 depends on Epic 1``: BMAD's stories build
only on earlier ones, and say so in those words) — or while a running story declares or has touched a file it
declares (the story's ``File List``; a running story's diff so far). Each story builds in its own worktree;
merges land one at a time, in sprint order among the stories in flight (:class:`MergeQueue`): a finished story
waits until every story before it in sprint order that was already in flight when it started has landed or its
run has ended (deferred, failed, blocked on a person). A story not started yet (it waits on a dependency or a
file) holds no one, nor does one started after it (an earlier story whose dependency has just landed: waiting
for it would chain the independent stories' merges one after another's build).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from stepline.sprint._project import SprintProject
from stepline.tools import git

__all__ = ["MergeQueue", "Needs", "story_needs", "touched_files"]

#: A sentence naming what a story or epic needs first.
_NEEDS = re.compile(r"(?:depends? on|dependenc(?:y|ies)|prerequisites?|requires|blocked by|after)\b[^\n]*",
                    re.IGNORECASE)
_STORY_REF = re.compile(r"(?<![\w.])(\d+)[.-](\d+)(?![\d])")
_EPIC_REF = re.compile(r"\bepics?\s+(\d+)(?![.-]\d|\d)", re.IGNORECASE)  # "Epic 1", not "Epic 1.2"
_FILE_LIST = re.compile(r"^#+\s*File List\s*$", re.IGNORECASE | re.MULTILINE)
_FILE_ITEM = re.compile(r"^\s*[-*]\s+(?:\[[ x]\]\s*)?`?([^\s`(]+)`?", re.MULTILINE)
_SECTION = re.compile(r"^#+\s*(?:Story\s+(\d+)[.-](\d+)|Epic\s+(\d+))\b.*$", re.IGNORECASE | re.MULTILINE)


@dataclass(slots=True)
class Needs:
    """What a story needs before it builds: the stories it depends on, and the files it says it changes."""

    after: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)


def _prefix(key: str) -> str:
    return "-".join(key.split("-")[:2])


def _refs(text: str, epics: dict[int, list[str]], by_prefix: dict[str, str]) -> set[str]:
    """The story keys the dependency sentences of ``text`` name (an epic named: all its stories)."""
    found: set[str] = set()
    for sentence in _NEEDS.findall(text):
        for epic, number in _STORY_REF.findall(sentence):
            if (key := by_prefix.get(f"{epic}-{number}")) is not None:
                found.add(key)
        for epic in _EPIC_REF.findall(sentence):
            found.update(epics.get(int(epic), []))
    return found


def story_needs(project: SprintProject, keys: list[str], all_keys: list[str]) -> dict[str, Needs]:
    """Each of ``keys``' dependencies (among ``all_keys``, the board's stories) and declared files."""
    by_prefix = {_prefix(key): key for key in all_keys}
    epics: dict[int, list[str]] = {}
    for key in all_keys:
        if key.split("-")[0].isdigit():
            epics.setdefault(int(key.split("-")[0]), []).append(key)
    needs = {key: Needs() for key in keys}
    for document in sorted(project.artifacts.parent.glob("*/epic*.md")):  # planning-artifacts/epics.md
        text = document.read_text(encoding="utf-8", errors="replace")
        marks = list(_SECTION.finditer(text))
        for mark, following in zip(marks, [*marks[1:], None], strict=True):
            body = text[mark.end():following.start() if following else len(text)]
            if mark.group(3):  # an epic's section: what it depends on holds for each of its stories
                owners = epics.get(int(mark.group(3)), [])
                body = body.split("\n#", 1)[0]  # the epic's own lines, not its stories'
            else:
                owners = [k for k in [by_prefix.get(f"{mark.group(1)}-{mark.group(2)}")] if k]
            for owner in owners:
                if owner in needs:
                    needs[owner].after |= _refs(body, epics, by_prefix) - set(epics.get(int(owner.split("-")[0]), [])
                                                                             if mark.group(3) else []) - {owner}
    for key in keys:
        story = project.story_file(key)
        if story is None:
            continue
        text = story.path.read_text(encoding="utf-8", errors="replace")
        needs[key].after |= _refs(text, epics, by_prefix) - {key}
        if (heading := _FILE_LIST.search(text)) is not None:
            section = re.split(r"^#", text[heading.end():], maxsplit=1, flags=re.MULTILINE)[0]
            needs[key].files |= {path.strip("/") for path in _FILE_ITEM.findall(section)}
    return needs


async def touched_files(worktree: Path, integration: str) -> set[str]:
    """The files a running story's worktree has changed so far since it forked from ``integration`` (its commits
    and its working tree, new files included)."""
    if not (worktree / ".git").exists():
        return set()
    code, base = await git(worktree, "merge-base", "HEAD", integration)
    if code != 0:
        return set()
    _, changed = await git(worktree, "diff", "--name-only", base)
    _, untracked = await git(worktree, "ls-files", "--others", "--exclude-standard")
    return {line.strip() for line in (changed + "\n" + untracked).splitlines() if line.strip()}


class MergeQueue:
    """One merge at a time, in sprint order among the stories in flight: a story's turn comes once each story before
    it in ``order`` that was in flight when it started (started by the loop, neither landed nor ended) has landed or
    ended. A story sent back to build after its merge failed stays in flight, in its place. A lone run's queue has
    no story in flight: its turn is at once."""

    def __init__(self, order: list[str]) -> None:
        self._rank = {key: index for index, key in enumerate(order)}
        self._in_flight: set[str] = set()
        #: The stories each story's merge waits for: those before it in order, in flight when it started.
        self._after: dict[str, set[str]] = {}
        self._busy = False
        self._changed = asyncio.Condition()

    def started(self, key: str) -> None:
        """``key``'s run starts (or is resumed): its merge waits for the earlier stories in flight now."""
        rank = self._rank.get(key, len(self._rank))
        self._after[key] = {other for other in self._in_flight if self._rank.get(other, len(self._rank)) < rank}
        self._in_flight.add(key)

    async def left(self, key: str) -> None:
        """``key`` has landed, or its run has ended: no merge waits for it any more."""
        async with self._changed:
            self._in_flight.discard(key)
            self._changed.notify_all()

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """Wait for ``key``'s turn to merge, and hold it."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._busy and not self._after.get(key, set()) & self._in_flight)
            self._busy = True
        try:
            yield
        finally:
            async with self._changed:
                self._busy = False
                self._changed.notify_all()
