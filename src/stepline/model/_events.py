"""The events a run emits (SPEC R-E10) and the other records its journal holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

__all__ = ["Event", "EventType", "dump_data"]


class EventType(StrEnum):
    """Every kind of journal record. The first group is the public event vocabulary of R-E10."""

    WORKFLOW_STARTED = "WorkflowStarted"
    WORKFLOW_RESUMED = "WorkflowResumed"
    WORKFLOW_COMPLETED = "WorkflowCompleted"
    WORKFLOW_FAILED = "WorkflowFailed"
    WORKFLOW_BLOCKED = "WorkflowBlocked"
    STEP_STARTED = "WorkflowStepStarted"
    STEP_COMPLETED = "WorkflowStepCompleted"
    STEP_FAILED = "WorkflowStepFailed"
    STEP_BLOCKED = "StepBlocked"
    STEP_RETRY = "StepRetry"
    STEP_SKIPPED = "StepSkipped"
    ARTIFACT_READY = "ArtifactReady"
    VALIDATION_PASSED = "ValidationPassed"
    VALIDATION_FAILED = "ValidationFailed"
    EVIDENCE_RECORDED = "EvidenceRecorded"
    HUMAN_GATE_REQUIRED = "HumanGateRequired"
    HUMAN_GATE_APPROVED = "HumanGateApproved"
    HUMAN_GATE_REJECTED = "HumanGateRejected"
    TOOL_STARTED = "ToolStarted"
    TOOL_COMPLETED = "ToolCompleted"
    TOOL_FAILED = "ToolFailed"
    TOOL_APPROVAL_REQUIRED = "ToolApprovalRequired"
    CONTEXT_RESOLVED = "ContextResolved"  # TELIS (R-C1): a step's context, journaled whole before its executor runs
    CONTEXT_DRIFT = "ContextDrift"  # a source of a step's context changed since it was last used
    # Journal-only records: what makes a resumed step replay instead of repeating.
    CALL_STARTED = "CallStarted"
    CALL_RECORDED = "CallRecorded"
    VARIABLE_SET = "VariableSet"
    CURSOR_MOVED = "CursorMoved"
    ANSWER_GIVEN = "AnswerGiven"


def dump_data(data: dict[str, Any]) -> bytes:
    """An event's ``data`` as JSON bytes (anything JSON has no type for becomes its ``str``)."""
    return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS)


@dataclass(slots=True)
class Event:
    """One journal record: ``seq`` orders it within the run, ``time`` is ISO 8601 from :mod:`stepline.time`."""

    seq: int
    type: str
    run_id: str
    time: str
    step_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self, data: bytes | None = None) -> bytes:
        """Serialise as one UTF-8 JSON line (no newline); ``data``: :attr:`data` already serialised.

        orjson, because the journal does this per event; the envelope is formatted around the data so that
        the journal can scan just the data for secrets.
        """
        return b'{"seq":%d,"type":%b,"run_id":%b,"time":%b,"step_id":%b,"data":%b}' % (
            self.seq, orjson.dumps(self.type), orjson.dumps(self.run_id), orjson.dumps(self.time),
            orjson.dumps(self.step_id), dump_data(self.data) if data is None else data)

    def to_json(self) -> str:
        """Serialise as one JSON line (no newline)."""
        return self.to_bytes().decode("utf-8")

    @classmethod
    def from_dict(cls, raw: Any) -> Event:
        """Build from a decoded journal line, which must be exactly what :meth:`to_bytes` writes: an object with
        these six fields, ``seq`` a positive integer, ``type`` a known :class:`EventType`, ``run_id`` and
        ``time`` strings, ``step_id`` a string or null, ``data`` an object.

        This is the one model of a journal line. Raises ValueError saying what is wrong (the reader adds the
        file and line, and checks what one line cannot show: ``seq`` contiguous, ``run_id`` the run's own).
        """
        if not isinstance(raw, dict):
            raise ValueError(f"{_json_kind(raw)}, not a JSON object")
        if raw.keys() != _FIELDS:
            missing, extra = sorted(_FIELDS - raw.keys()), sorted(set(raw) - _FIELDS)
            raise ValueError("; ".join([*(f"field {name!r} is missing" for name in missing),
                                        *(f"unknown field {_short(name)}" for name in extra)]))
        seq, kind, run_id, at, step_id, data = (raw["seq"], raw["type"], raw["run_id"], raw["time"], raw["step_id"],
                                                raw["data"])
        if type(seq) is not int or seq < 1:
            raise ValueError(f"seq is {_short(seq)}, not a positive integer")
        if not isinstance(kind, str) or kind not in _KINDS:
            raise ValueError(f"unknown event type {_short(kind)}")
        if not isinstance(run_id, str):
            raise ValueError(f"run_id is {_short(run_id)}, not a string")
        if not isinstance(at, str):
            raise ValueError(f"time is {_short(at)}, not a string")
        if step_id is not None and not isinstance(step_id, str):
            raise ValueError(f"step_id is {_short(step_id)}, not a string or null")
        if not isinstance(data, dict):
            raise ValueError(f"data is {_json_kind(data)}, not an object")
        return cls(seq=seq, type=kind, run_id=run_id, time=at, step_id=step_id, data=data)


_FIELDS = frozenset(("seq", "type", "run_id", "time", "step_id", "data"))
_KINDS = frozenset(kind.value for kind in EventType)


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words (an array, a string, null …)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


def _short(value: Any) -> str:
    """``value`` as JSON-ish text, at most 40 characters (for a one-line message)."""
    text = _json_kind(value) if isinstance(value, dict | list) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= 40 else text[:39] + "…"
