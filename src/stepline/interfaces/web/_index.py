"""The runs list for the dashboard: :meth:`RunStore.summaries`, kept until a run directory changes.

``summaries()`` reads every manifest (about 0.1 ms a run), too much to redo for each page of a list of
thousands of runs. A run's summary changes only when its manifest is rewritten (when a run starts, stops or a
gate is decided) or its lock is taken or dropped (the lock file is rewritten then), so the list is kept with
a fingerprint of those files' sizes and modification times, taken with one ``stat`` each, and read again
only when the fingerprint changes. A driver killed outright does not rewrite its lock file: a kept row's
``live_pid`` is dropped once that process is gone.

The index also knows each run's parent (``parent_run_id`` of its manifest), to link a run to its children.

A manifest can be whole while the journal beside it is damaged; the rows of the page shown are checked as
``stepline doctor`` checks them (``check``), each check kept until one of the run's files changes, so a
damaged run's row says so without every journal of the project being read for each page.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from stepline.store import RUN_FILES, RunDir, RunStore, RunSummary

__all__ = ["RunIndex", "RunPage", "file_stat", "shown_status"]

_Stat = tuple[int, int] | None


def file_stat(path: str | Path) -> _Stat:
    """A file's (modification time, size), or None when it is not there: what says it changed, in one stat."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True  # a holder whose pid could not be read: the lock is held, so someone is alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class RunPage:
    """One page of the filtered runs list, newest first."""

    rows: list[RunSummary]
    total: int
    page: int
    per_page: int
    #: The parent run of each row that has one.
    parents: dict[str, str]

    @property
    def pages(self) -> int:
        """How many pages the filtered list has (at least 1)."""
        return max(1, -(-self.total // self.per_page))


class RunIndex:
    """The summaries of every run under one store, read again only when a run directory changed."""

    def __init__(self, store: RunStore, check: Callable[[RunDir], str | None] | None = None) -> None:
        self.store = store
        #: What is wrong with a run directory (its first damage), or None: ``stepline doctor``'s check.
        self.check = check
        self._checked: dict[str, tuple[tuple[_Stat, ...], str | None]] = {}
        self._lock = threading.Lock()
        self._fingerprint: dict[str, tuple[_Stat, _Stat, _Stat]] | None = None
        self._rows: list[RunSummary] = []
        self._parents: dict[str, str] = {}

    def _take_fingerprint(self) -> dict[str, tuple[_Stat, _Stat, _Stat]]:
        root = str(self.store.root)
        try:
            names = os.listdir(root)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        found: dict[str, tuple[_Stat, _Stat, _Stat]] = {}
        for name in names:  # plain strings: a Path per file costs more than the stat itself
            folder = f"{root}/{name}/"
            manifest = file_stat(folder + "manifest.json")
            # Without a manifest the journal says whether the run is damaged or never started.
            journal = file_stat(folder + "journal.jsonl") if manifest is None else None
            found[name] = (manifest, file_stat(folder + "lock"), journal)
        return found

    def rows(self) -> list[RunSummary]:
        """Every run's summary, oldest first (as ``stepline list``)."""
        with self._lock:
            fingerprint = self._take_fingerprint()
            if fingerprint != self._fingerprint:
                previous = self._fingerprint or {}
                rows = list(self.store.summaries())
                parents = {}
                for row in rows:
                    if row.run_id in self._parents and previous.get(row.run_id) == fingerprint.get(row.run_id):
                        parents[row.run_id] = self._parents[row.run_id]
                    elif row.damage is None:
                        parent = self._read_parent(row.run_id)
                        if parent:
                            parents[row.run_id] = parent
                self._rows, self._parents, self._fingerprint = rows, parents, fingerprint
            else:
                self._rows = [replace(row, live_pid=None) if row.live_pid is not None and not _alive(row.live_pid)
                              else row for row in self._rows]
            return self._rows

    def _read_parent(self, run_id: str) -> str | None:
        try:
            manifest = orjson.loads((self.store.root / run_id / "manifest.json").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        parent = manifest.get("parent_run_id") if isinstance(manifest, dict) else None
        return parent if isinstance(parent, str) else None

    def parent_of(self, run_id: str) -> str | None:
        """The run that started ``run_id`` (an invoked workflow's caller), if any."""
        self.rows()
        return self._parents.get(run_id)

    def children_of(self, run_id: str) -> list[RunSummary]:
        """The runs ``run_id`` started, oldest first."""
        rows = self.rows()
        return [row for row in rows if self._parents.get(row.run_id) == run_id]

    def page(self, *, status: str | None = None, workflow: str | None = None, page: int = 1,
             per_page: int = 50) -> RunPage:
        """One page of the runs, newest first; ``status`` must match exactly (``interrupted``: a running run
        no process drives), ``workflow`` is a case-insensitive part of the workflow id."""
        rows = self.rows()
        wanted = (workflow or "").strip().lower()
        chosen = [row for row in reversed(rows)
                  if (not status or shown_status(row) == status or row.status == status)
                  and (not wanted or wanted in row.workflow.lower())]
        start = (page - 1) * per_page
        shown = [self._checked_row(row) for row in chosen[start:start + per_page]]
        parents = {row.run_id: self._parents[row.run_id] for row in shown if row.run_id in self._parents}
        return RunPage(rows=shown, total=len(chosen), page=page, per_page=per_page, parents=parents)

    def _checked_row(self, row: RunSummary) -> RunSummary:
        """``row``, marked damaged when its run directory is (checked again only when a file of it changed)."""
        if self.check is None or row.damage is not None or row.status in ("starting", "not started"):
            return row
        folder = self.store.root / row.run_id
        stats = tuple(file_stat(folder / name) for name in ("journal.jsonl", *RUN_FILES) if name != "timeline.json")
        kept = self._checked.get(row.run_id)
        if kept is None or kept[0] != stats:
            kept = (stats, self.check(RunDir(folder)))
            self._checked[row.run_id] = kept
        return row if kept[1] is None else replace(row, status="damaged", damage=kept[1])


def shown_status(row: RunSummary) -> str:
    """The status a person should read: a ``running`` run that no process drives is ``interrupted``."""
    if row.status == "running" and row.live_pid is None and row.damage is None:
        return "interrupted"
    return row.status
