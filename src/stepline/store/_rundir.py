"""Run directories: ``<storage_root>/<run-id>/`` holding the journal, the manifest and the audit files."""

from __future__ import annotations

import difflib
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline import time
from stepline.errors import NotFoundError
from stepline.store._files import atomic_write_bytes, atomic_write_json, read_json
from stepline.store._journal import Journal, read_journal
from stepline.store._lock import RunLock, lock_holder

__all__ = ["DEFAULT_STORAGE_ROOT", "MANIFEST_COUNTS", "RUN_FILES", "RunDir", "RunStore", "RunSummary", "new_run_id"]

#: Where runs live, relative to the project root, unless ``runtime.storage_root`` says otherwise.
DEFAULT_STORAGE_ROOT = ".stepline/runs"

#: The JSON documents a run directory may hold besides the journal (R-P1).
RUN_FILES = ("manifest.json", "tool_results.json", "approvals.json", "gates.json", "evidence.json", "drr.json",
             "artifacts.json", "timeline.json")

#: The manifest's count of the run's steps by status (``{"completed": 12, "pending": 3}``): what
#: ``stepline list`` shows without replaying the journal. The manifest holds no step records.
MANIFEST_COUNTS = "steps_by_status"
_DONE = ("completed", "skipped")

_RUN_ID = re.compile(r"^run-\d{14}-[0-9a-f]{8}$")


def new_run_id() -> str:
    """Return a new run id ``run-YYYYmmddHHMMSS-<8 hex>`` stamped by :mod:`stepline.time`."""
    return f"run-{time.now().strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What ``stepline list`` shows of a run, read from its manifest without replaying the journal."""

    run_id: str
    workflow: str
    status: str
    created_at: str
    updated_at: str
    steps_done: int
    steps_total: int
    live_pid: int | None


class RunDir:
    """One run's directory. Reading is always allowed; writing requires :meth:`lock`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_id = path.name

    @property
    def journal_path(self) -> Path:
        """The append-only journal."""
        return self.path / "journal.jsonl"

    @property
    def manifest_path(self) -> Path:
        """The atomic snapshot of the run (its spec, its fields and variables, its steps counted by status)."""
        return self.path / "manifest.json"

    def lock(self) -> RunLock:
        """Return the run's lock (not yet acquired)."""
        return RunLock(self.path / "lock", self.run_id)

    def holder(self) -> int | None:
        """Return the pid driving this run now, or None."""
        return lock_holder(self.path / "lock")

    def open_journal(self) -> Journal:
        """Open the journal for appending (the caller holds the lock)."""
        return Journal(self.journal_path)

    def events(self) -> list[Any]:
        """Return every intact journal record."""
        return read_journal(self.journal_path)

    def read(self, name: str, default: Any = None) -> Any:
        """Read one of the run's JSON documents."""
        return read_json(self.path / name, default)

    def write(self, name: str, value: Any, *, compact: bool = False, durable: bool = True) -> None:
        """Write one of the run's JSON documents atomically (the caller holds the lock); ``durable=False``
        only for a document derived from the others (see :func:`atomic_write_bytes`)."""
        atomic_write_json(self.path / name, value, indent=not compact, durable=durable)

    def write_text(self, name: str, text: str) -> None:
        """Write an already-serialised document atomically (a pydantic ``model_dump_json``, say)."""
        atomic_write_bytes(self.path / name, text.encode("utf-8"))


class RunStore:
    """All runs under one storage root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, run_id: str | None = None) -> RunDir:
        """Create the directory of a new run."""
        run_id = run_id or new_run_id()
        path = self.root / run_id
        path.mkdir(parents=True, exist_ok=False)
        return RunDir(path)

    def open(self, run_id: str) -> RunDir:
        """Return an existing run's directory, or :class:`NotFoundError` suggesting close ids."""
        path = self.root / run_id
        if run_id and (path / "manifest.json").is_file():
            return RunDir(path)
        known = [p.name for p in self._run_paths()]
        matches = [name for name in known if run_id and run_id in name]
        if len(matches) == 1:
            return RunDir(self.root / matches[0])
        close = difflib.get_close_matches(run_id, known, n=1)
        hint = f"did you mean {close[0]}?" if close else "see `stepline list` for the runs in " + str(self.root)
        raise NotFoundError(f"no run {run_id!r} under {self.root}", hint=hint)

    def latest(self) -> RunDir | None:
        """Return the most recently created run, or None."""
        paths = self._run_paths()
        return RunDir(paths[-1]) if paths else None

    def _run_paths(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted((p for p in self.root.iterdir() if _RUN_ID.match(p.name) and p.is_dir()),
                      key=lambda p: p.name)

    def summaries(self) -> Iterator[RunSummary]:
        """Yield a summary of every run, oldest first."""
        for path in self._run_paths():
            manifest = read_json(path / "manifest.json", None)
            if not isinstance(manifest, dict):
                continue
            counts = manifest.get(MANIFEST_COUNTS)
            if not isinstance(counts, dict):  # an older manifest, with a record per step
                counts = {}
                for step in (manifest.get("steps") or {}).values():
                    counts[step.get("status")] = counts.get(step.get("status"), 0) + 1
            done = sum(int(counts.get(status) or 0) for status in _DONE)
            yield RunSummary(
                run_id=path.name,
                workflow=str((manifest.get("workflow") or {}).get("id", "?")),
                status=str(manifest.get("status", "?")),
                created_at=str(manifest.get("created_at", "")),
                updated_at=str(manifest.get("updated_at", "")),
                steps_done=done,
                steps_total=len((manifest.get("workflow") or {}).get("steps") or ()) or sum(counts.values()),
                live_pid=lock_holder(path / "lock"),
            )
