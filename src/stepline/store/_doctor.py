"""``stepline doctor``: what is wrong with a run directory, whether the run can go on, and the one repair.

:func:`diagnose` reads everything a run is loaded from — the manifest (the workflow spec and the run's fields),
the journal (each line checked, then folded into the run by the engine's ``check``) and the audit files — and
never raises on damage: it says what is wrong where, and what can be saved.

:func:`truncate_to_last_good` is the repair: the run goes on from its last good record. Nothing is lost: the
journal, the manifest and every unreadable audit file are kept as they were in ``backup-<time>/`` inside the
run's folder, then the journal is cut after its last good record, the manifest's ``journal_seq`` is set to
that record, and the unreadable audit files are moved away (they are rebuilt as the run goes on). Whatever the
cut records did is then done again by ``stepline resume`` (a step whose completion was cut runs again, its
calls replayed as far as they are still in the journal).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from stepline import time
from stepline.errors import JournalError, OutsideRootError, RunStateError, StorageError
from stepline.model import Event, EventType, Run
from stepline.store._files import atomic_write_bytes, fsync_path, stale_temp_files, sweep_temp_files
from stepline.store._lock import lock_holder
from stepline.store._rundir import AUDIT_FILES, RunDir, missing_records
from stepline.store._scan import scan_journal

__all__ = ["Diagnosis", "Finding", "diagnose", "truncate_to_last_good"]

#: Folds a journal's records into the run its manifest describes; raises JournalError (with its line) at the
#: first record that cannot follow the ones before it. The engine's (stepline.engine fold): the store knows no
#: fold.
Check = Callable[[Run, list[Event]], None]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong: the file, the line when there is one, and what."""

    path: Path
    problem: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}" if self.line else f"{self.path}: {self.problem}"

    def short(self) -> str:
        """As :meth:`__str__`, the file named without its folder (the run's, named once above it)."""
        return f"{self.path.name}:{self.line}: {self.problem}" if self.line else f"{self.path.name}: {self.problem}"


@dataclass(slots=True)
class Diagnosis:
    """What :func:`diagnose` found in one run directory."""

    run_id: str
    path: Path
    #: The manifest's damage (the run cannot be loaded without its manifest), or None.
    manifest: Finding | None = None
    #: The journal's first damage, or None.
    journal: Finding | None = None
    #: Records before the first damage (all of them when there is none), and the seq of the last one.
    records: int = 0
    #: Complete lines from the damaged one to the end of the journal (what the repair cuts, kept in the backup).
    lines_after: int = 0
    #: Bytes after the last record that a crash mid-append left (a torn record, zeros): not damage.
    tail: int = 0
    torn: bool = False
    #: The record the manifest was written after (its journal_seq), when the manifest can be read.
    manifest_seq: int | None = None
    #: Where the journal's good records end, in bytes.
    good_bytes: int = 0
    #: The run's status by the good records, when the manifest can be read.
    status: str | None = None
    #: Audit files that cannot be read (not JSON, not a list).
    audit: list[Finding] = field(default_factory=list)
    #: Temporary files killed writers left (removed by the next resume).
    temp_files: list[Path] = field(default_factory=list)
    #: The pid driving the run now, if any.
    holder: int | None = None
    #: The run recorded nothing (no manifest, no journal record): it stopped before its first record.
    unstarted: bool = False
    #: Decisions of a person (approvals, rejections, answers) among the lines the repair cuts: asked again.
    cut_decisions: int = 0
    #: The manifest names another project than the one the run is in (edited, or the project moved here): not
    #: damage (the run loads and resumes here), but fork, replay and diff refuse it.
    elsewhere: Finding | None = None

    @property
    def damaged(self) -> bool:
        """Whether anything but a torn tail or stray temporary files is wrong."""
        return self.manifest is not None or self.journal is not None or bool(self.audit)

    @property
    def repairable(self) -> bool:
        """Whether :func:`truncate_to_last_good` can make the run loadable: its manifest is whole."""
        return self.damaged and self.manifest is None

    def first(self) -> Finding | None:
        """The damage to name in one line (the manifest's first: without it nothing loads)."""
        return self.manifest or self.journal or (self.audit[0] if self.audit else None)

    def verdict(self) -> str:
        """Whether and how the run can go on, in one sentence."""
        run = self.run_id
        if self.unstarted:
            if self.holder is not None:
                return f"being started by process {self.holder}: nothing recorded yet"
            return (f"nothing to resume: the run stopped before its first record (a full or read-only disk, say); "
                    f"remove {self.path} and start the workflow again")
        if not self.damaged:
            moved = ("; fork, replay and diff refuse it while its manifest names another project (restore the "
                     "manifest from a backup, or, if the project moved here, set its project_root to this folder)"
                     if self.elsewhere is not None else "")
            if self.status == "completed":
                return f"whole: the run is completed{moved}"
            return f"whole: `stepline resume {run}` continues the run{moved}"
        if self.manifest is not None:
            return ("cannot be resumed: manifest.json holds the workflow spec, which no other file has; restore it "
                    "from a backup (the journal is not changed by anything until then)")
        if self.journal is None:
            return (f"can be resumed after `stepline doctor {run} --truncate-to-last-good`, which moves the "
                    "unreadable audit files into a backup folder; the run then starts them afresh (what they held "
                    "is in the backup, and each decision, artifact and tool call in the journal)")
        upto = f"record {self.records}" if self.records else "its start (no record is good)"
        asked = (f"; {self.cut_decisions} decision(s) of a person among them (approvals, answers) are asked again"
                 if self.cut_decisions else "")
        if not self.records:
            asked = "; the run starts again from its first step, and the decisions of a person are asked again"
        return (f"can be resumed from {upto}: `stepline doctor {run} --truncate-to-last-good` keeps the journal "
                f"and the manifest as they are in a backup folder, cuts the journal after line {self.records} "
                f"({self.lines_after} line(s) from line {self.records + 1} on), then `stepline resume {run}` "
                f"does again what the cut records did{asked}")

    def report(self) -> list[str]:
        """Every line ``stepline doctor`` prints."""
        lines = [f"run {self.run_id}  ({self.path})"]
        if self.unstarted:
            return [*lines, "  manifest.json: none; journal.jsonl: no record", f"verdict: {self.verdict()}"]
        lines.append(f"  {self.manifest.short() if self.manifest else 'manifest.json: whole'}"
                     + (f" (written after record {self.manifest_seq})" if self.manifest_seq else ""))
        if self.elsewhere is not None:
            lines.append(f"  {self.elsewhere.short()}")
        if self.journal is not None:
            lines.append(f"  journal.jsonl: {self.records} good record(s), then damage: {self.journal.short()}")
            if self.lines_after > 1:
                lines.append(f"    {self.lines_after - 1} more line(s) after the damaged one are not read")
        else:
            lines.append(f"  journal.jsonl: {self.records} record(s), whole")
        if self.tail:
            what = "a torn last record (a crash mid-append)" if self.torn else "zeros the file was grown by"
            lines.append(f"    and {self.tail} byte(s) after them: {what}; ignored, cut off by the next resume")
        if self.status is not None:
            lines.append(f"  status by the good records: {self.status}")
        lines.extend(f"  {finding.short()}" for finding in self.audit)
        if not self.audit:
            lines.append("  audit files: whole")
        if self.temp_files:
            lines.append(f"  {len(self.temp_files)} temporary file(s) of killed writers (removed by the next "
                         f"resume): " + ", ".join(p.name for p in self.temp_files))
        if self.holder is not None:
            lines.append(f"  driven now by process {self.holder}")
        lines.append(f"verdict: {self.verdict()}")
        return lines

    def to_dict(self) -> dict[str, object]:
        """The JSON ``stepline doctor --json`` prints."""
        return {
            "run_id": self.run_id, "path": str(self.path), "damaged": self.damaged, "repairable": self.repairable,
            "manifest": str(self.manifest) if self.manifest else None,
            "journal": str(self.journal) if self.journal else None,
            "records": self.records, "lines_after": self.lines_after, "tail_bytes": self.tail, "torn": self.torn,
            "manifest_seq": self.manifest_seq, "status": self.status, "audit": [str(f) for f in self.audit],
            "temp_files": [str(p) for p in self.temp_files], "holder": self.holder, "unstarted": self.unstarted,
            "cut_decisions": self.cut_decisions, "elsewhere": str(self.elsewhere) if self.elsewhere else None,
            "verdict": self.verdict(),
        }


def diagnose(run_dir: RunDir, check: Check | None = None, project_root: Path | None = None) -> Diagnosis:
    """Everything wrong with ``run_dir`` (never raises for damage); ``check`` folds the records (see
    :data:`Check`): without it only each line and their order are checked. With ``project_root``, a manifest
    naming another project is found too (:meth:`RunDir.check_project`)."""
    found = Diagnosis(run_id=run_dir.run_id, path=run_dir.path, holder=lock_holder(run_dir.path / "lock"),
                      temp_files=stale_temp_files(run_dir.path))
    if not run_dir.recorded():
        found.unstarted = True
        return found
    run: Run | None = None
    try:
        run = run_dir.manifest()
        found.manifest_seq = run.journal_seq
    except JournalError as exc:
        found.manifest = Finding(run_dir.manifest_path, exc.detail, exc.line)
    if run is not None and project_root is not None:
        try:
            run_dir.check_project(run, project_root)
        except OutsideRootError as exc:
            found.elsewhere = Finding(run_dir.manifest_path, exc.detail)
    _journal(run_dir, found, run, check)
    for name in AUDIT_FILES:
        try:
            run_dir.audit(name)
        except JournalError as exc:
            found.audit.append(Finding(run_dir.path / name, exc.detail, exc.line))
    return found


def _journal(run_dir: RunDir, found: Diagnosis, run: Run | None, check: Check | None) -> None:
    path = run_dir.journal_path
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        found.journal = Finding(path, "missing: a run's journal is created before its manifest")
        return
    except OSError as exc:
        found.journal = Finding(path, f"cannot be read ({exc.strerror or exc})")
        return
    scan = scan_journal(data, run_dir.run_id)
    events = scan.events
    if scan.problem is not None:
        found.journal = Finding(path, scan.problem, scan.line)
        found.lines_after = scan.lines_after
    else:
        found.tail, found.torn = scan.tail, scan.torn
    found.good_bytes = scan.good
    if run is not None and check is not None:
        try:
            check(run, events)
        except (JournalError, OutsideRootError) as exc:
            line = exc.line or len(events)
            events = events[:line - 1]
            found.journal = Finding(path, exc.detail, line)
            found.good_bytes = _offset(data, len(events))
            found.lines_after = data.count(b"\n", found.good_bytes)
            found.tail, found.torn = 0, False
    found.records = len(events)
    if found.journal is not None:
        cut = data[found.good_bytes:]
        found.cut_decisions = sum(cut.count(b'"type":"%s"' % kind.encode()) for kind in _DECISIONS)
    if run is not None:
        if found.journal is None and found.records < (found.manifest_seq or 0):
            found.journal = Finding(path, missing_records(found.records, found.manifest_seq or 0), found.records + 1)
        if found.journal is None and check is not None:
            found.status = run.status.value


#: The records of a person's decision (what a cut journal asks again).
_DECISIONS = (EventType.HUMAN_GATE_APPROVED, EventType.HUMAN_GATE_REJECTED, EventType.ANSWER_GIVEN)


def _offset(data: bytes, lines: int) -> int:
    """The byte offset just after the first ``lines`` lines of ``data``."""
    offset = 0
    for _ in range(lines):
        offset = data.index(b"\n", offset) + 1
    return offset


def truncate_to_last_good(run_dir: RunDir, check: Check | None = None) -> tuple[Path, Diagnosis]:
    """Cut a damaged run back to its last good record (see the module); return the backup folder and the
    diagnosis after the repair. The caller holds nothing: this takes the run's lock.

    Raises:
        JournalError: the run cannot be repaired this way (its manifest is damaged), or is not damaged.
        RunLockedError: another process drives the run.
        StorageError: the disk refuses a write (the run is left as it was, or as repaired so far: still
            diagnosable, and the repair can be run again).
    """
    with run_dir.lock():
        found = diagnose(run_dir, check)
        if not found.damaged:
            raise RunStateError(f"run {run_dir.run_id} is not damaged: there is nothing to repair",
                                hint=found.verdict())
        if not found.repairable:
            first = found.first()
            raise JournalError(f"{first}: cannot be repaired here", hint=found.verdict())
        backup = _backup_folder(run_dir)
        try:
            _repair(run_dir, found, backup)
        except OSError as exc:
            raise StorageError.from_os(exc, exc.filename or run_dir.path) from exc
        sweep_temp_files(run_dir.path, any_pid=True)
    return backup, diagnose(run_dir, check)


def _backup_folder(run_dir: RunDir) -> Path:
    stamp = time.now().strftime("%Y%m%dT%H%M%S")
    backup = run_dir.path / f"backup-{stamp}"
    n = 1
    while backup.exists():
        n += 1
        backup = run_dir.path / f"backup-{stamp}-{n}"
    try:
        backup.mkdir()
    except OSError as exc:
        raise StorageError.from_os(exc, backup, "create") from exc
    return backup


def _repair(run_dir: RunDir, found: Diagnosis, backup: Path) -> None:
    journal, manifest = run_dir.journal_path, run_dir.manifest_path
    # 1. The backup: copies of the journal and the manifest (the journal moved when it is not a file).
    keep = b""
    if journal.is_file() and not journal.is_symlink():
        shutil.copy2(journal, backup / journal.name)
        fsync_path(backup / journal.name)
        with journal.open("rb") as handle:
            keep = handle.read(found.good_bytes)
    elif journal.exists() or journal.is_symlink():
        os.replace(journal, backup / journal.name)
    shutil.copy2(manifest, backup / manifest.name)
    fsync_path(backup / manifest.name)
    for finding in found.audit:
        os.replace(finding.path, backup / finding.path.name)  # unreadable: moved away, rebuilt by the run
    fsync_path(backup)
    fsync_path(run_dir.path)
    # 2. The journal cut after its last good record; 3. the manifest no later than that record.
    if found.journal is not None:
        atomic_write_bytes(journal, keep)
        raw = orjson.loads(manifest.read_bytes())
        if int(raw.get("journal_seq") or 0) > found.records:
            raw["journal_seq"] = found.records
            atomic_write_bytes(manifest, orjson.dumps(raw, option=orjson.OPT_APPEND_NEWLINE))

