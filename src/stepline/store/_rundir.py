"""Run directories: ``<storage_root>/<run-id>/`` holding the journal, the manifest and the audit files."""

from __future__ import annotations

import difflib
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from stepline import time
from stepline.errors import JournalError, NotFoundError, StorageError
from stepline.model import Event, Run, RunStatus
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
    #: Why the run cannot be read (its status is then ``damaged``), from its manifest alone: ``stepline list``
    #: does not read journals. ``stepline doctor RUN`` checks the whole run directory.
    damage: str | None = None


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

    def events(self) -> list[Event]:
        """Return every journal record, each checked (:func:`read_journal`; a torn last line is left out)."""
        return read_journal(self.journal_path, self.run_id)

    def doctor_hint(self) -> str:
        """The hint of every damage error: where to learn more."""
        return f"`stepline doctor {self.run_id}` explains it and what can be saved"

    def manifest(self) -> Run:
        """The run as its manifest has it: the workflow spec, the run's fields, no step records.

        Its status, error and blocked reason are those of a run that has just started: the journal's fold
        decides them (the journal is the truth; the manifest is a snapshot of it, perhaps an older one).

        Raises:
            JournalError: the manifest is missing, not JSON, or not a manifest of this run (naming the field).
        """
        path = self.manifest_path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise JournalError("missing: the run's workflow spec is in no other file", path=str(path),
                               hint=self.doctor_hint()) from None
        except OSError as exc:
            raise JournalError(f"cannot be read ({exc.strerror or exc})", path=str(path),
                               hint=self.doctor_hint()) from exc
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise JournalError(f"not valid JSON ({exc})", path=str(path), line=exc.lineno,
                               hint=self.doctor_hint()) from exc
        problem = _manifest_shape(raw, self.run_id)
        if problem is not None:
            raise JournalError(problem, path=str(path), hint=self.doctor_hint())
        raw["steps"] = {}  # older manifests held step records: the journal rebuilds them
        raw.pop(MANIFEST_COUNTS, None)
        raw["variables"] = dict(raw["workflow"].get("variables") or {}) | dict(raw.get("variables") or {})
        try:
            run = Run.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the document"
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise JournalError(f"{where}: {first['msg']}{more}", path=str(path), hint=self.doctor_hint()) from None
        run.status, run.error, run.blocked_reason = RunStatus.RUNNING, None, None
        for spec in run.workflow.steps:
            run.step(spec.id).name = spec.name or spec.id
        return run

    def records(self, manifest_seq: int) -> list[Event]:
        """The journal's records, each checked, for a run whose manifest was written after record
        ``manifest_seq`` (its ``journal_seq``): the journal must exist and hold at least those records.

        Raises:
            JournalError: the journal is missing, damaged, or shorter than the manifest says (naming the line).
        """
        path = self.journal_path
        if not path.exists() and not path.is_symlink():
            raise JournalError("missing: a run's journal is created before its manifest", path=str(path),
                               hint=self.doctor_hint())
        events = read_journal(path, self.run_id)
        if len(events) < manifest_seq:
            raise JournalError(missing_records(len(events), manifest_seq), path=str(path), line=len(events) + 1,
                               hint=self.doctor_hint())
        return events

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
        try:
            path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise
        except OSError as exc:
            raise StorageError.from_os(exc, path, "create") from exc
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
        """Yield a summary of every run, oldest first; a run whose manifest cannot be read is ``damaged`` (its
        :attr:`RunSummary.damage` says why) and one that recorded nothing is ``not started``."""
        for path in self._run_paths():
            try:
                manifest = read_json(path / "manifest.json", None)
            except JournalError as exc:
                yield _unreadable(path, f"manifest.json: {exc.detail}")
                continue
            if manifest is None:
                yield _unreadable(path, None)
                continue
            problem = _manifest_shape(manifest, path.name)
            if problem is not None:
                yield _unreadable(path, f"manifest.json: {problem}")
                continue
            journal = path / "journal.jsonl"
            if not journal.is_file():
                problem = f"journal.jsonl: {'not a file' if journal.exists() else 'missing'}"
            workflow = manifest["workflow"]
            counts = manifest.get(MANIFEST_COUNTS)
            if not isinstance(counts, dict):  # an older manifest, with a record per step
                counts = {}
                steps = manifest.get("steps")
                for step in (steps.values() if isinstance(steps, dict) else ()):
                    status = step.get("status") if isinstance(step, dict) else None
                    counts[status] = counts.get(status, 0) + 1
            numbers = [n for n in counts.values() if type(n) is int]
            spec_steps = workflow.get("steps")
            yield RunSummary(
                run_id=path.name,
                workflow=workflow["id"],
                status="damaged" if problem else manifest["status"],
                created_at=str(manifest.get("created_at", "")),
                updated_at=str(manifest.get("updated_at", "")),
                steps_done=sum(n for status, n in counts.items() if status in _DONE and type(n) is int),
                steps_total=(len(spec_steps) if isinstance(spec_steps, list) else 0) or sum(numbers),
                live_pid=lock_holder(path / "lock"),
                damage=problem,
            )


def missing_records(records: int, manifest_seq: int) -> str:
    """What is wrong with a journal of ``records`` records whose manifest was written after record
    ``manifest_seq`` (more): records are missing at its end (a journal cut short, emptied, replaced)."""
    held = f"ends after record {records}" if records else "holds no record"
    return (f"{held}, but manifest.json was written after record {manifest_seq}: records {records + 1}.."
            f"{manifest_seq} are missing")


def _unreadable(path: Path, problem: str | None) -> RunSummary:
    """The summary of a run whose manifest cannot be read (``problem``), or that has none (None)."""
    status = "damaged"
    if problem is None:
        journal = path / "journal.jsonl"
        try:
            recorded = journal.stat().st_size > 0 and bool(journal.read_bytes().strip(b"\0"))
        except OSError:
            recorded = journal.exists()
        if recorded:
            problem = "manifest.json: missing"
        else:  # a run that failed before its first record (a full disk): nothing to resume
            status, problem = "not started", "nothing was recorded: delete the folder"
    return RunSummary(run_id=path.name, workflow="?", status=status, created_at="", updated_at="", steps_done=0,
                      steps_total=0, live_pid=lock_holder(path / "lock"), damage=problem)


_STATUSES = frozenset(status.value for status in RunStatus)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _manifest_shape(raw: Any, run_id: str) -> str | None:
    """What is wrong with a decoded manifest's shape, or None: what ``stepline list`` reads of it, before the
    whole check (:meth:`RunDir.manifest` validates it as a :class:`Run`, some milliseconds a run)."""
    if not isinstance(raw, dict):
        return "not a JSON object"
    if raw.get("run_id") != run_id:
        return f"run_id is {_short(raw.get('run_id'))}, not this run's ({run_id})"
    workflow = raw.get("workflow")
    if workflow is None:
        return "has no workflow spec ('workflow')"
    if not isinstance(workflow, dict):
        return "'workflow' is not an object"
    if raw.get("status") not in _STATUSES:
        return f"'status' is not one of {', '.join(sorted(_STATUSES))}"
    for name in ("variables", MANIFEST_COUNTS):
        if raw.get(name) is not None and not isinstance(raw[name], dict):
            return f"{name!r} is not an object"
    if workflow.get("variables") is not None and not isinstance(workflow["variables"], dict):
        return "'workflow.variables' is not an object"
    if not isinstance(workflow.get("id"), str):
        return "'workflow.id' is not a string"
    steps = workflow.get("steps")
    if steps is not None and not (isinstance(steps, list) and all(isinstance(step, dict) for step in steps)):
        return "'workflow.steps' is not a list of steps"
    return None
