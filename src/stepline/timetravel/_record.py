"""A recorded run as time travel reads it: its journal, the artifacts' versions, model requests, answers, usage.

Everything comes from the run directory (journal, manifest, ``blobs/``). A record this reading needs and cannot
read (an older stepline wrote no copy of an artifact, a record of an unexpected shape) is a
:class:`~stepline.errors.JournalError` naming the record's line. A run is read only in the project it was
recorded in, and no file outside that project is read or named (:class:`~stepline.errors.OutsideRootError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepline._paths import inside
from stepline.engine import Engine
from stepline.errors import JournalError, NotFoundError
from stepline.executors import Usage, memo_digest, usage_row
from stepline.model import Event, EventType, Run
from stepline.store import RunDir, read_blob

__all__ = ["ModelRequest", "RecordedRun", "read_run"]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model request a step made (a ``memo`` record): its label, the request as sent and the answer."""

    step_id: str
    label: str
    payload: dict[str, Any]
    result: dict[str, Any]

    def prompt_text(self) -> str:
        """The request as text, for a diff: the prompt the executor recorded, else the whole payload."""
        prompt = self.payload.get("prompt", self.payload)
        if isinstance(prompt, dict) and isinstance(prompt.get("messages"), list):
            lines = [f"[system]\n{prompt.get('system', '')}"]
            for message in prompt["messages"]:
                content = message.get("content") if isinstance(message, dict) else message
                role = message.get("role", "?") if isinstance(message, dict) else "?"
                lines.append(f"[{role}]\n{content if isinstance(content, str) else _json(content)}")
            return "\n".join(lines) + "\n"
        return _json(prompt) + "\n"

    def usage(self) -> Usage:
        """Its tokens and recorded cost (none where the answer records none)."""
        raw = self.result.get("usage") if isinstance(self.result, dict) else None
        return Usage.from_record(raw) if isinstance(raw, dict) else Usage()


@dataclass(slots=True)
class RecordedRun:
    """A run's records, read once."""

    run_dir: RunDir
    run: Run
    events: list[Event]
    requests: list[ModelRequest] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.run_id

    def step_order(self) -> list[str]:
        """The steps in the order they first started."""
        order: list[str] = []
        for event in self.events:
            if event.type == EventType.STEP_STARTED.value and event.step_id and event.step_id not in order:
                order.append(event.step_id)
        return order

    def cut_before(self, step_id: str) -> int:
        """How many records precede the step's first record (the journal as it was when the step began)."""
        for index, event in enumerate(self.events):
            if event.step_id == step_id:
                return index
        known = ", ".join(self.step_order()) or "none"
        raise NotFoundError(f"step {step_id!r} never started in run {self.run_id}",
                            hint=f"fork at a step the run started: {known}")

    def artifacts(self, upto: int | None = None) -> dict[str, tuple[str, int]]:
        """Each artifact's last recorded version among the first ``upto`` records: path -> (sha256, line)."""
        state: dict[str, tuple[str, int]] = {}
        for index, event in enumerate(self.events[:upto]):
            if event.type == EventType.ARTIFACT_READY.value:
                path, digest = event.data.get("path"), event.data.get("sha256")
                if not isinstance(path, str) or not isinstance(digest, str):
                    raise self.unreadable(index, "an ArtifactReady record without a path and a sha256")
                state[path] = (digest, index + 1)
        return state

    def content(self, path: str, digest: str, line: int) -> bytes:
        """The bytes of version ``digest`` of ``path``: from the run's blobs, else the project file if it still
        holds that version; neither is the record the run cannot be read past."""
        data = read_blob(self.run_dir.path, digest)
        if data is not None:
            return data
        current = inside(self.run.project_root, path)
        try:
            found = current.read_bytes() if current is not None else None
        except OSError:
            found = None
        if found is not None and _sha256(found) == digest:
            return found
        raise JournalError(f"record {line} (ArtifactReady {path}) has no stored copy of its content: the run was "
                           "recorded by a stepline that kept none, and the file has changed since",
                           path=str(self.run_dir.journal_path), line=line,
                           hint="fork or compare a run recorded by this version")

    def shown(self, path: str | Path) -> str:
        """``path`` as the user is shown it: relative to the run's project when it is inside it."""
        found = Path(path)
        root = Path(self.run.project_root)
        return str(found.relative_to(root)) if found.is_absolute() and found.is_relative_to(root) else str(path)

    def answers(self, start: int = 0) -> dict[str, str]:
        """The answers people gave (``ask:<key>`` -> answer) from record ``start`` on."""
        found: dict[str, str] = {}
        for event in self.events[start:]:
            data = event.data
            if event.type == EventType.ANSWER_GIVEN.value or (
                    event.type == EventType.HUMAN_GATE_APPROVED.value and "answer" in data):
                found[str(data.get("gate_id"))] = str(data.get("answer", ""))
        return found

    def given_variables(self) -> dict[str, Any]:
        """The variables the run was started with beyond its workflow's own (``--var``): those no record of the
        run set, that the workflow does not declare."""
        changed = set()
        for event in self.events:
            if event.type == EventType.VARIABLE_SET.value:
                changed.add(event.data.get("name"))
            elif event.type == EventType.CALL_RECORDED.value and event.data.get("op") == "set_var":
                changed.add(_mapping(event.data.get("args")).get("name"))
        return {name: value for name, value in self.run.variables.items()
                if name not in changed and name not in self.run.workflow.variables}

    def workflow_mode(self) -> str | None:
        """The ``--mode`` the run's workflow was read with (a router's ``validate``, a skill's intent), so that a
        replay reads the changed workflow the same way."""
        meta = self.run.workflow.meta
        mode = meta.get("mode") or meta.get("intent")
        return mode if isinstance(mode, str) else None

    def served_answers(self) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
        """The recorded model answers keyed by :func:`memo_digest`, in order (what a replay serves)."""
        table: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for request in self.requests:
            table.setdefault(memo_digest(request.step_id, request.label, request.payload), []).append(request.result)
        return table

    def usage(self) -> dict[str, float]:
        """The run's model usage: tokens and recorded cost summed over its requests, and their number."""
        return {**usage_row(sum((request.usage() for request in self.requests), Usage())),
                "requests": float(len(self.requests))}

    def unreadable(self, index: int, what: str) -> JournalError:
        """The error for record ``index`` (0-based) that time travel cannot read."""
        return JournalError(f"record {index + 1} cannot be read for time travel: {what}",
                            path=str(self.run_dir.journal_path), line=index + 1, hint=self.run_dir.doctor_hint())


def read_run(engine: Engine, run_id: str) -> RecordedRun:
    """Load run ``run_id`` (checked as a resume checks it) and its model requests; nothing is written."""
    run_dir = engine.store.open(run_id)
    run = engine.load(run_dir)
    run_dir.check_project(run, engine.project_root)
    events = run_dir.events()
    recorded = RecordedRun(run_dir=run_dir, run=run, events=events)
    for index, event in enumerate(events):
        op = event.data.get("op")
        if event.type != EventType.CALL_RECORDED.value or not isinstance(op, str) or not op.startswith("memo:"):
            continue
        args, result = event.data.get("args"), event.data.get("result")
        payload = args.get("payload") if isinstance(args, dict) else None
        if not isinstance(payload, dict) or not isinstance(result, dict) or not event.step_id:
            raise recorded.unreadable(index, f"a {op} record without its step, request payload or answer")
        recorded.requests.append(ModelRequest(event.step_id, op.removeprefix("memo:"), payload, result))
    return recorded


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
