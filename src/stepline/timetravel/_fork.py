"""``stepline fork``: a new run that starts as a recorded run's journal up to the start of a step.

The fork's journal is a copy of the parent's records before the step's first one — exactly the journal a
process killed just before the step would have left — so the engine's resume continues it from there, and
the steps before it are the parent's, byte for byte. Its manifest names the parent and the step
(``parent_run_id``, ``forked_at``). Changed variables are journaled after the copy (``VariableSet``); answers
come from :class:`Answers`. The project's files are put back to what they were when the step began (from the
parent's content-addressed copies); the parent's directory is only read. Each file put back must be in the
project, as the journal names it and through symlinks: one that is not refuses the fork before anything changes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from stepline import time
from stepline._paths import confine, escape
from stepline.ccw import Completion, SessionWriter
from stepline.engine import Engine, HumanChannel
from stepline.errors import OutsideRootError, StorageError, UsageError
from stepline.model import Event, EventType
from stepline.store import RunDir, atomic_write_bytes, link_blob, read_blob
from stepline.timetravel._record import RecordedRun

if TYPE_CHECKING:
    from stepline.engine import StepContext
    from stepline.executors import MenuOption

__all__ = ["Answers", "Restoration", "prepare_fork", "rewind"]

#: CCW's task list, in its session folder.
_TODO = "TODO_LIST.md"

#: Audit files a fork takes the parent's records of (those of the steps before the fork point).
_AUDIT = ("artifacts.json", "tool_results.json", "gates.json", "approvals.json", "evidence.json", "drr.json")


@dataclass(slots=True)
class Restoration:
    """What putting the project back did: files rewritten, removed, truncated, and those left as they are."""

    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    unchanged: int = 0

    def lines(self) -> list[str]:
        """What to tell the user."""
        out = [f"  restored  {path}" for path in self.restored]
        out += [f"  removed   {path} (the run created it after that point)" for path in self.removed]
        out += [f"  left alone {path} (the run changed it without recording its earlier content)"
                for path in self.left_alone]
        return out


class Answers(HumanChannel):
    """The human channel of a fork or replay: the answers given on the command line first (in order), then the
    recorded run's answer to the same question (``ask:<key>``), then a person as usual."""

    def __init__(self, base: HumanChannel, given: list[str], recorded: dict[str, str], *, by: str) -> None:
        super().__init__(interactive=base.interactive, prompt=base.prompt, relay=base.relay)
        self.given = list(given)
        self.recorded = recorded
        self.by = by

    async def ask(self, ctx: StepContext, question: str, choices: list[str] | None, key: str, *,
                  menu: list[MenuOption] | None = None, hints: dict[str, Any] | None = None) -> str:
        """An answer from the command line or the record, else :meth:`HumanChannel.ask`."""
        gate_id = f"ask:{key}"
        if gate_id not in ctx.engine.calls.answers:
            # in #yolo the executor answered the recorded run's questions: its answers are model answers, served
            # from the record by a replay; an answer given on the command line is the user's, in any mode
            answer = self.given.pop(0) if self.given else None
            if answer is None and ctx.run.mode != "yolo":
                answer = self.recorded.get(gate_id)
            if answer is not None:
                self.record(ctx, key, answer, by=self.by)
                return answer
        return await super().ask(ctx, question, choices, key, menu=menu, hints=hints)


def prepare_fork(engine: Engine, parent: RecordedRun, step_id: str, variables: dict[str, Any]
                 ) -> tuple[RunDir, Restoration]:
    """Make the fork's run directory (journal prefix, manifest, audit records, blobs) and put the project's
    files back to the start of ``step_id``; return the directory (resume it) and what was put back."""
    cut = parent.cut_before(step_id)
    if cut == 0:
        raise UsageError(f"step {step_id!r} is the run's first record", hint="start the workflow again instead")
    prefix = parent.events[:cut]
    plan = _plan(parent, cut)  # read (and checked) before anything is written
    child = engine.store.create()
    try:
        return child, _make(engine, parent, child, prefix, step_id, variables, plan)
    except BaseException as exc:
        # A fork is made whole or not at all: one a full disk stopped must not be offered as a run to resume
        # with its files (blobs, or the project's files put back) missing.
        shutil.rmtree(child.path, ignore_errors=True)
        error = StorageError.from_os(exc, exc.filename or child.path) if isinstance(exc, OSError) else exc
        if isinstance(error, StorageError):
            error.hint = (f"{error.remedy}; the fork was not made (no run is left to resume; files already put "
                          "back stay so): then fork again")
        if error is exc:
            raise
        raise error from exc


def _make(engine: Engine, parent: RecordedRun, child: RunDir, prefix: list[Event], step_id: str,
          variables: dict[str, Any], plan: _Plan) -> Restoration:
    """Write the fork's run directory and put the project's files back (:func:`prepare_fork`)."""
    stamp = time.now_iso()
    events = [Event(seq=e.seq, type=e.type, run_id=child.run_id, time=e.time, step_id=e.step_id, data=e.data)
              for e in prefix]
    for name, value in variables.items():
        events.append(Event(seq=len(events) + 1, type=EventType.VARIABLE_SET.value, run_id=child.run_id,
                            time=stamp, data={"name": name, "value": engine.redact(value)}))
    atomic_write_bytes(child.journal_path, b"".join(event.to_bytes() + b"\n" for event in events))
    before = {e.step_id for e in prefix if e.step_id}
    for name in _AUDIT:
        kept = [record for record in parent.run_dir.audit(name) if record.get("step_id") in before]
        if kept:
            child.write(name, kept)
    for digest in [digest for digest, _ in parent.artifacts(len(prefix)).values()] + _ccw_before(prefix):
        link_blob(parent.run_dir.path, child.path, digest)
    manifest = orjson.loads(parent.run_dir.manifest_path.read_bytes())
    for stale in ("error", "blocked_reason"):
        manifest.pop(stale, None)
    # The parent's manifest holds its variables as they ended; the fork starts from those it was given, and the
    # copied records set the others as they were at the fork point.
    manifest.update(run_id=child.run_id, parent_run_id=parent.run_id, forked_at=step_id, status="running",
                    journal_seq=len(events), created_at=stamp, updated_at=stamp,
                    variables=parent.given_variables())
    child.write_text("manifest.json", orjson.dumps(manifest).decode("utf-8") + "\n")
    return _restore(parent, plan)


def rewind(run: RecordedRun, cut: int) -> Restoration:
    """Put the project's files back to what they were when ``run``'s journal held ``cut`` records (0: before
    the run)."""
    return _restore(run, _plan(run, cut))


@dataclass(slots=True)
class _Plan:
    write: dict[str, bytes] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    truncate: dict[str, int] = field(default_factory=dict)
    left_alone: list[str] = field(default_factory=list)
    #: The journal line that first names each path.
    lines: dict[str, int] = field(default_factory=dict)


def _plan(parent: RecordedRun, cut: int) -> _Plan:
    """How to put the project's files back to the point ``cut`` of ``parent``'s journal; refused
    (:class:`OutsideRootError`) when a file it would change is not in the project."""
    plan = _Plan()
    target = parent.artifacts(cut)
    for path, (digest, line) in target.items():
        plan.lines.setdefault(path, line)
        plan.write[path] = parent.content(path, digest, line)
    later: dict[str, dict[str, Any] | None] = {}  # a path the run wrote after the cut -> its first write's intent
    for line, event in enumerate(parent.events[cut:], cut + 1):
        data = event.data
        args = _mapping(data.get("args"))
        if event.type == EventType.CALL_STARTED.value and data.get("op") == "write_output":
            written = args.get("path")
            if isinstance(written, str) and written not in later:
                later[written] = args
                plan.lines.setdefault(written, line)
        elif event.type == EventType.ARTIFACT_READY.value and isinstance(data.get("path"), str):
            later.setdefault(data["path"], None)
            plan.lines.setdefault(data["path"], line)
        elif event.type == EventType.CALL_STARTED.value and data.get("op") == "ccw_complete":
            # CCW's own files (relative to its session): the intent holds the sha256 of each one's content before
            # the completion (None: no file; a run recorded before it was kept holds none: the file is named)
            completion, before = _mapping(args.get("completion")), _mapping(args.get("before"))
            for name in ("task_json", "summary_path"):
                rel = completion.get(name)
                if isinstance(rel, str):
                    shown = parent.shown(_session(parent) / rel)
                    later.setdefault(shown, {"before_sha256": before[rel]} if rel in before else None)
                    plan.lines.setdefault(shown, line)
    todo = _ccw_todo(parent, cut)
    if todo is not None and todo[0] not in target:
        later.pop(todo[0], None)
        if todo[1] is None:
            plan.left_alone.append(todo[0])
        else:
            plan.write[todo[0]] = todo[1]
    for path, intent in later.items():
        if path in target:
            continue
        if intent is not None and "before_sha256" in intent:
            digest = intent["before_sha256"]
            kept = read_blob(parent.run_dir.path, digest) if isinstance(digest, str) else None
            if digest is None:
                plan.remove.append(path)
            elif kept is not None:
                plan.write[path] = kept
            else:  # its content held a secret, or the copy was lost
                plan.left_alone.append(path)
        elif intent is not None and "pre_size" in intent and intent.get("pre_size") is None:
            plan.remove.append(path)  # the file did not exist before the run's first write to it
        elif intent is not None and intent.get("mode") == "append" and isinstance(intent.get("pre_size"), int):
            plan.truncate[path] = intent["pre_size"]  # appends only add: the first pre_size bytes are as they were
        else:
            plan.left_alone.append(path)
    _confined(parent, plan)
    return plan


def _confined(run: RecordedRun, plan: _Plan) -> None:
    """Refuse ``plan`` when a file it changes is outside ``run``'s project: named so by the journal (an edited
    record, or an edited session folder in the manifest), or led there by a symlink (a folder of the project
    that links elsewhere is not followed)."""
    root = run.run.project_root
    for path in [*plan.write, *plan.remove, *plan.truncate]:
        found = escape(root, path)
        if found is None:
            continue
        line = plan.lines.get(path)
        if not found.symlink:
            raise OutsideRootError(f"record {line} names {path!r}, outside the project {root}" if line else
                                   f"{path!r} is outside the project {root}", path=str(run.run_dir.journal_path),
                                   line=line, hint=run.run_dir.doctor_hint())
        raise OutsideRootError(f"{path} leads out of the project through a symlink (to {found.real}): putting it "
                               "back would change a file out there; nothing was changed",
                               hint="make the linked folder a folder of the project, then fork again")


def _ccw_before(events: list[Event]) -> list[str]:
    """The contents CCW completion intents among ``events`` kept of their files (a fork of the fork puts them
    back)."""
    return [digest for event in events
            if event.type == EventType.CALL_STARTED.value and event.data.get("op") == "ccw_complete"
            for digest in _mapping(_mapping(event.data.get("args")).get("before")).values()
            if isinstance(digest, str)]


def _ccw_todo(parent: RecordedRun, cut: int) -> tuple[str, bytes | None] | None:
    """A CCW run's TODO_LIST.md as it was at record ``cut`` (None as its content: the copy is missing): the copy the
    last completion intent before ``cut`` that kept one holds (each process's first does), with the boxes of the
    completions since ticked again, else the first copy after it. None when no intent kept one (not a CCW run, or
    one recorded before they did)."""
    base: tuple[int, str] | None = None
    for index, event in enumerate(parent.events):
        if event.type != EventType.CALL_STARTED.value or event.data.get("op") != "ccw_complete":
            continue
        kept = _mapping(_mapping(event.data.get("args")).get("before")).get(_TODO)
        if isinstance(kept, str) and (base is None or index < cut):
            base = (index, kept)
        if index >= cut and base is not None:
            break
    if base is None:
        return None
    path = parent.shown(_session(parent) / _TODO)
    data = read_blob(parent.run_dir.path, base[1])
    completions: list[Completion] = []
    for index in range(base[0], cut):
        event = parent.events[index]
        if event.type == EventType.CALL_STARTED.value and event.data.get("op") == "ccw_complete":
            try:
                completions.append(Completion.from_json(_mapping(event.data.get("args")).get("completion")))
            except ValueError as exc:
                raise parent.unreadable(index, str(exc)) from None
    if data is None or not completions:
        return path, data
    with tempfile.TemporaryDirectory() as scratch:  # the session's own ticking, on a copy
        atomic_write_bytes(Path(scratch) / _TODO, data)
        SessionWriter(Path(scratch)).write(completions, files=False)
        return path, (Path(scratch) / _TODO).read_bytes()


def _session(run: RecordedRun) -> Path:
    """A CCW run's session folder."""
    return Path(str(_mapping(run.run.workflow.meta.get("paths")).get("session_dir", "")))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _restore(run: RecordedRun, plan: _Plan) -> Restoration:
    """Carry out ``plan`` in ``run``'s project (each path confined again as it is changed)."""
    root = run.run.project_root
    done = Restoration()
    for path, data in plan.write.items():
        target = confine(root, path)
        try:
            same = target.read_bytes() == data
        except OSError:
            same = False
        if same:
            done.unchanged += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data)
        done.restored.append(run.shown(path))
    for path in plan.remove:
        target = confine(root, path)
        if target.is_file():
            target.unlink()
            done.removed.append(run.shown(path))
    for path, size in plan.truncate.items():
        target = confine(root, path)
        if target.is_file() and target.stat().st_size > size:
            os.truncate(target, size)
            done.restored.append(run.shown(path))
        elif not target.is_file():
            done.left_alone.append(run.shown(path))
    done.left_alone += plan.left_alone
    return done
