"""``sprint-status.yaml``: the sprint board BMAD's sprint planning writes (old era and skill era alike).

The file is a YAML mapping whose ``development_status`` lists, in sprint order, ``epic-N`` entries, their
stories (``N-M-slug``) and ``epic-N-retrospective`` entries, each with a status. Stories move
``backlog → (drafted) → ready-for-dev → in-progress → review → done``; epics ``backlog → in-progress → done``.

Writing keeps the file as the user wrote it (comments, order, quoting): only the status after one key (and a
``last_updated:`` stamp, when the file has one) changes; the new text replaces the old atomically, under an
exclusive lock so one writer at a time changes the board, and a status never moves backwards.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stepline import time
from stepline._yaml import compose_yaml_text, find_yaml_line
from stepline.errors import NotFoundError, ReaderError, RunStateError
from stepline.formats import read_text

__all__ = ["STORY_ORDER", "Board", "BoardEntry", "read_board", "set_status", "status_rank"]

EntryKind = Literal["epic", "story", "retrospective", "other"]

#: The story statuses in the order a story moves through them (``drafted``/``contexted``: early v6 alphas).
STORY_ORDER = ("backlog", "drafted", "ready-for-dev", "contexted", "in-progress", "review", "done")
_EPIC_ORDER = ("backlog", "contexted", "in-progress", "done")
_RETRO_ORDER = ("optional", "done", "completed")
_EPIC = re.compile(r"^epic-(\d+)$")
_RETRO = re.compile(r"^epic-(\d+)-retrospective$")
_STORY = re.compile(r"^(\d+)-(\d+)(?:-.*)?$")


def _kind(key: str) -> tuple[EntryKind, int | None]:
    if match := _EPIC.match(key):
        return "epic", int(match.group(1))
    if match := _RETRO.match(key):
        return "retrospective", int(match.group(1))
    if match := _STORY.match(key):
        return "story", int(match.group(1))
    return "other", None


def status_rank(kind: EntryKind, status: str) -> int:
    """Where ``status`` stands in the order of ``kind``'s statuses (-1: not a known status)."""
    order = {"story": STORY_ORDER, "epic": _EPIC_ORDER, "retrospective": _RETRO_ORDER}.get(kind, ())
    return order.index(status) if status in order else -1


@dataclass(frozen=True, slots=True)
class BoardEntry:
    """One line of ``development_status``."""

    key: str
    status: str
    kind: EntryKind
    epic: int | None
    line: int | None


@dataclass(frozen=True, slots=True)
class Board:
    """A sprint board as read from disk."""

    path: Path
    entries: tuple[BoardEntry, ...]
    story_location: str | None

    def entry(self, key: str) -> BoardEntry | None:
        """The entry of ``key``, if the board has one."""
        return next((e for e in self.entries if e.key == key), None)

    @property
    def stories(self) -> list[BoardEntry]:
        """The stories in sprint order."""
        return [e for e in self.entries if e.kind == "story"]

    def statuses(self) -> dict[str, str]:
        """Every key's status."""
        return {e.key: e.status for e in self.entries}


def read_board(path: Path) -> Board:
    """Read a ``sprint-status.yaml``; a file that is not a board is one :class:`ReaderError` naming file:line."""
    if not path.is_file():
        raise NotFoundError(f"{path}: no sprint board here",
                            hint="run BMAD's sprint planning (bmad-sprint-planning / sprint-planning) first")
    text = read_text(path)
    data, root = compose_yaml_text(text, path=str(path))
    if not isinstance(data, dict) or not isinstance(data.get("development_status"), dict):
        raise ReaderError("has no 'development_status:' mapping of keys to statuses", path=str(path),
                          hint="a sprint-status.yaml from BMAD's sprint planning has one")
    entries: list[BoardEntry] = []
    for raw_key, raw_status in data["development_status"].items():
        key, status = str(raw_key), str(raw_status).strip()
        kind, epic = _kind(key)
        line = find_yaml_line(root, ("development_status", raw_key))
        if kind != "other" and status_rank(kind, status) < 0:
            known = {"story": STORY_ORDER, "epic": _EPIC_ORDER, "retrospective": _RETRO_ORDER}[kind]
            raise ReaderError(f"{key}: unknown {kind} status {status!r}", path=str(path), line=line,
                              hint="use one of " + ", ".join(known))
        entries.append(BoardEntry(key=key, status=status, kind=kind, epic=epic, line=line))
    location = data.get("story_location")
    return Board(path=path, entries=tuple(entries), story_location=str(location) if location else None)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # one writer at a time; released when the fd closes (or its process dies)
        yield
    finally:
        os.close(fd)


def _replace_status(text: str, key: str, status: str) -> str:
    pattern = re.compile(r"^(?P<lead>[ \t]+)(?P<q>['\"]?)" + re.escape(key) + r"(?P=q)(?P<colon>[ \t]*:[ \t]*)"
                         r"(?P<value>['\"]?[^\s#'\"]+['\"]?)(?P<rest>[ \t]*(?:#.*)?)$", re.MULTILINE)
    replaced, count = pattern.subn(lambda m: f"{m['lead']}{m['q']}{key}{m['q']}{m['colon']}{status}{m['rest']}", text,
                                   count=1)
    if count != 1:
        raise RunStateError(f"cannot find the line of {key!r} to update", hint="keep one 'key: status' line per entry")
    return replaced


def set_status(path: Path, key: str, status: str, *, lock_path: Path) -> bool:
    """Move ``key`` to ``status`` on the board at ``path``; return whether the file changed.

    A status never moves backwards: asking for an earlier one (or the same) changes nothing. The new file
    replaces the old atomically, and ``lock_path`` is held meanwhile so writers take turns.
    """
    from stepline.store import atomic_write_bytes

    with _exclusive(lock_path):
        board = read_board(path)
        entry = board.entry(key)
        if entry is None:
            raise RunStateError(f"{path}: has no entry {key!r}", hint="run sprint planning again to add it")
        if status_rank(entry.kind, status) <= status_rank(entry.kind, entry.status):
            return False
        text = _replace_status(read_text(path), key, status)
        stamp = time.now().strftime("%m-%d-%Y %H:%M")
        text = re.sub(r"^last_updated:.*$", f"last_updated: {stamp}", text, count=1, flags=re.MULTILINE)
        atomic_write_bytes(path, text.encode("utf-8"))
        return True
