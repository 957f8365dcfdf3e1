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
    def from_dict(cls, raw: dict[str, Any]) -> Event:
        """Build from a decoded journal line."""
        return cls(seq=int(raw["seq"]), type=str(raw["type"]), run_id=str(raw["run_id"]), time=str(raw["time"]),
                   step_id=raw.get("step_id"), data=dict(raw.get("data") or {}))
