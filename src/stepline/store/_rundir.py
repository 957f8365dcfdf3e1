"""Run directories: ``<storage_root>/<run-id>/`` holding the journal, the manifest and the audit files."""

from __future__ import annotations

import difflib
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from stepline import time
from stepline.errors import JournalError, NotFoundError, OutsideRootError, RunStateError, StorageError, UsageError
from stepline.model import Approval, Artifact, DesignRationale, Event, Evidence, Gate, Run, RunStatus, ToolResult
from stepline.store._files import atomic_write_bytes, atomic_write_json, read_json, state_folder
from stepline.store._journal import Journal, read_journal
from stepline.store._lock import RunLock, lock_holder
from stepline.store._scan import json_problem as _json_problem

__all__ = ["AUDIT_FILES", "DEFAULT_STORAGE_ROOT", "MANIFEST_COUNTS", "RUN_FILES", "RunDir", "RunStore", "RunSummary",
           "new_run_id"]

#: Where runs live, relative to the project root, unless ``runtime.storage_root`` says otherwise.
DEFAULT_STORAGE_ROOT = ".stepline/runs"

#: The JSON documents a run directory may hold besides the journal (R-P1).
RUN_FILES = ("manifest.json", "tool_results.json", "approvals.json", "gates.json", "evidence.json", "drr.json",
             "artifacts.json", "timeline.json")

#: The audit files (R-P1) and the model of each of their records: each is a JSON list of such records, read
#: back by the engine and by ``show``/``export``. timeline.json is derived (rebuilt by its readers), not one.
AUDIT_FILES: dict[str, type[BaseModel]] = {
    "artifacts.json": Artifact, "tool_results.json": ToolResult, "gates.json": Gate, "approvals.json": Approval,
    "evidence.json": Evidence, "drr.json": DesignRationale,
}
_AUDIT_LISTS: dict[str, TypeAdapter[list[Any]]] = {}

#: The manifest's count of the run's steps by status (``{"completed": 12, "pending": 3}``): what
#: ``stepline list`` shows without replaying the journal. The manifest holds no step records.
MANIFEST_COUNTS = "steps_by_status"
_DONE = ("completed", "skipped")

_RUN_ID = re.compile(r"^run-\d{14}-[0-9a-f]{8}$")
#: How many of the runs an ambiguous part of a run id matches are named.
_LISTED = 10


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

    def step_log(self, step_id: str) -> Path:
        """The log a step's running agent prints into (``logs/<step>.log``, one line per line it printed, appended
        as they come): for watching (``stepline logs -f``), not state — the journal stays the truth."""
        return self.path / "logs" / (re.sub(r"[^A-Za-z0-9._@-]", "_", step_id).lstrip(".") + ".log")

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

    def check_project(self, run: Run, project_root: Path) -> None:
        """Refuse (:class:`OutsideRootError`, at the manifest) a run whose manifest names a project other than
        ``project_root``, the one its directory is in: what puts a run's files back (fork, replay) or reads them
        (diff) acts in the project the manifest names, so an edited one would act on another folder."""
        try:
            same = Path(run.project_root).resolve() == project_root.resolve()
        except (OSError, ValueError):  # a NUL in it, a loop of links
            same = False
        if not same:
            raise OutsideRootError(
                f"project_root {run.project_root} is not the project this run is in ({project_root}): the manifest "
                "was edited, or the project moved here", path=str(self.manifest_path),
                hint=f"fork, replay and diff refuse it; if the project moved, set project_root to {project_root}")

    def manifest(self) -> Run:
        """The run as its manifest has it: the workflow spec, the run's fields, no step records.

        Its status, error and blocked reason are those of a run that has just started: the journal's fold
        decides them (the journal is the truth; the manifest is a snapshot of it, perhaps an older one). Every
        field is checked against the model of a run, strictly: a value of the wrong type is damage, never
        converted (``"journal_seq": "5"`` is not 5).

        Raises:
            RunStateError: the run recorded nothing (no manifest, no journal record): it stopped before its
                first record, a full disk say, and there is nothing to resume.
            JournalError: the manifest is missing, not JSON, or not a manifest of this run (naming the field).
        """
        path = self.manifest_path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if not self.recorded():
                holder = self.holder()
                if holder is not None and holder != os.getpid():  # not the resume that holds it to load it
                    raise RunStateError(f"run {self.run_id} is being started by process {holder} and has recorded "
                                        "nothing yet", hint="try again in a moment") from None
                raise RunStateError(f"run {self.run_id} recorded nothing: it stopped before its first record "
                                    f"(a full or read-only disk, say)",
                                    hint=f"remove {self.path} and start the workflow again") from None
            raise JournalError("missing: the run's workflow spec is in no other file", path=str(path),
                               hint=self.doctor_hint()) from None
        except OSError as exc:
            raise JournalError(f"cannot be read ({exc.strerror or exc})", path=str(path),
                               hint=self.doctor_hint()) from exc
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise JournalError(f"not valid JSON ({_json_problem(exc)})", path=str(path), line=exc.lineno,
                               hint=self.doctor_hint()) from exc
        problem = _manifest_shape(raw, self.run_id)
        if problem is not None:
            raise JournalError(problem, path=str(path), hint=self.doctor_hint())
        raw["steps"] = {}  # older manifests held step records: the journal rebuilds them
        raw.pop(MANIFEST_COUNTS, None)
        raw["variables"] = dict(raw["workflow"].get("variables") or {}) | dict(raw.get("variables") or {})
        try:
            # From JSON text, strictly: JSON's own types only (a string is not a number), as the engine wrote them.
            run = Run.model_validate_json(orjson.dumps(raw), strict=True)
        except ValidationError as exc:
            raise JournalError(_validation_problem(exc), path=str(path), hint=self.doctor_hint()) from None
        problem = _steps_problem(run)
        if problem is not None:
            raise JournalError(problem, path=str(path), hint=self.doctor_hint())
        run.status, run.error, run.blocked_reason = RunStatus.RUNNING, None, None
        for spec in run.workflow.steps:
            run.step(spec.id).name = spec.name or spec.id
        return run

    def recorded(self) -> bool:
        """Whether the run recorded anything: a manifest, or a journal holding more than zeros.
        A run that did not stopped before its first record: a new run whose first write failed."""
        if self.manifest_path.exists() or self.manifest_path.is_symlink():
            return True
        try:
            with self.journal_path.open("rb") as handle:
                while block := handle.read(1 << 16):
                    if block.strip(b"\0"):
                        return True
        except FileNotFoundError:
            return False
        except OSError:
            return True  # there, but unreadable (a folder, say): damage, not "nothing recorded"
        return False

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

    def audit(self, name: str) -> list[dict[str, Any]]:
        """One of the run's audit files (:data:`AUDIT_FILES`), every record checked against its model strictly;
        an absent file has no records.

        Raises:
            JournalError: the file cannot be read, is not JSON, is not a list, or a record is not one of its
                kind (naming the record, 1-based, and the field).
        """
        path = self.path / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise JournalError(f"cannot be read ({exc.strerror or exc})", path=str(path),
                               hint=self.doctor_hint()) from exc
        adapter = _audit_adapter(name)
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise JournalError(f"not valid JSON ({_json_problem(exc)})", path=str(path), line=exc.lineno,
                               hint=self.doctor_hint()) from exc
        if not isinstance(raw, list):
            raise JournalError("not a list of records", path=str(path), hint=self.doctor_hint())
        try:
            adapter.validate_json(data, strict=True)
        except ValidationError as exc:
            raise JournalError(_validation_problem(exc, record=True), path=str(path),
                               hint=self.doctor_hint()) from None
        return raw

    def check_audit(self) -> None:
        """Check every audit file (:meth:`audit`); raise the first :class:`JournalError`."""
        for name in AUDIT_FILES:
            self.audit(name)

    def read(self, name: str, default: Any = None) -> Any:
        """Read one of the run's JSON documents (unchecked: :meth:`audit` checks an audit file)."""
        try:
            return read_json(self.path / name, default)
        except JournalError as exc:
            exc.hint = self.doctor_hint()
            raise

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
        state_folder(self.root)
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
        if len(matches) > 1:
            shown = ", ".join(matches[:_LISTED]) + (f" and {len(matches) - _LISTED} more" if len(matches) > _LISTED
                                                     else "")
            raise UsageError(f"{run_id!r} is part of {len(matches)} run ids: {shown}",
                             hint="give more of the one you mean")
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

    def run_ids(self) -> list[str]:
        """Every run's id, oldest first."""
        return [path.name for path in self._run_paths()]

    def summaries(self) -> Iterator[RunSummary]:
        """Yield a summary of every run, oldest first (:meth:`summary`)."""
        for path in self._run_paths():
            yield self.summary(path.name)

    def summary(self, run_id: str) -> RunSummary:
        """The summary of one run, from its manifest: a run whose manifest cannot be read is ``damaged`` (its
        :attr:`RunSummary.damage` says why) and one that recorded nothing is ``not started``."""
        path = self.root / run_id
        try:
            manifest = read_json(path / "manifest.json", None)
        except JournalError as exc:
            return _unreadable(path, f"manifest.json: {exc.detail}")
        if manifest is None:
            return _unreadable(path, None)
        problem = _manifest_shape(manifest, path.name)
        if problem is not None:
            return _unreadable(path, f"manifest.json: {problem}")
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
        return RunSummary(
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


def _steps_problem(run: Run) -> str | None:
    """What makes a manifest's steps no workflow a reader could have made: an id twice, a dependency on no step."""
    ids: set[str] = set()
    for number, step in enumerate(run.workflow.steps):
        if step.id in ids:
            return f"workflow.steps.{number}.id: {step.id!r} is the id of an earlier step too"
        ids.add(step.id)
    for number, step in enumerate(run.workflow.steps):
        for dep in step.depends_on:
            if dep not in ids:
                return f"workflow.steps.{number}.depends_on: {_short(dep)} is no step of the workflow"
    return None


def _audit_adapter(name: str) -> TypeAdapter[list[Any]]:
    """The validator of one audit file, built on first use (a few milliseconds each: not at import)."""
    adapter = _AUDIT_LISTS.get(name)
    if adapter is None:
        model = AUDIT_FILES[name]
        adapter = _AUDIT_LISTS[name] = TypeAdapter(list[model])  # type: ignore[valid-type]
    return adapter


def _validation_problem(exc: ValidationError, *, record: bool = False) -> str:
    """The first problem pydantic found, in one line: where (``record 2: status``) and what."""
    first = exc.errors()[0]
    loc = list(first["loc"])
    where = ""
    index = loc[0] if record and loc else None
    if isinstance(index, int):
        loc.pop(0)
        where = f"record {index + 1}" + (": " if loc else "")
    where += ".".join(str(part) for part in loc)
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where or 'the document'}: {first['msg']}{more}"


def missing_records(records: int, manifest_seq: int) -> str:
    """What is wrong with a journal of ``records`` records whose manifest was written after record
    ``manifest_seq`` (more): records are missing at its end (a journal cut short, emptied, replaced)."""
    held = f"ends after record {records}" if records else "holds no record"
    missing = (f"record {manifest_seq} is" if records + 1 == manifest_seq else
               f"records {records + 1}..{manifest_seq} are")
    return f"{held}, but manifest.json was written after record {manifest_seq}: {missing} missing"


def _unreadable(path: Path, problem: str | None) -> RunSummary:
    """The summary of a run whose manifest cannot be read (``problem``), or that has none (None)."""
    status = "damaged"
    holder = lock_holder(path / "lock")
    if problem is None:
        if RunDir(path).recorded():
            problem = "manifest.json: missing"
        elif holder is not None:  # a run being started: its first manifest waits for its first steps
            status = "starting"
        else:  # a run that failed before its first record (a full disk): nothing to resume
            status, problem = "not started", f"nothing was recorded: remove {path} and start the workflow again"
    return RunSummary(run_id=path.name, workflow="?", status=status, created_at="", updated_at="", steps_done=0,
                      steps_total=0, live_pid=holder, damage=problem)


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
    status = raw.get("status")
    if not isinstance(status, str) or status not in _STATUSES:
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
