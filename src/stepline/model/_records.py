"""Audit records a run keeps beside its journal: artifacts, tool results, gates, approvals, evidence, DRRs."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepline.model._spec import Risk

__all__ = [
    "Approval",
    "Artifact",
    "DesignRationale",
    "Evidence",
    "Gate",
    "GateChoice",
    "GateStatus",
    "ToolResult",
]

GateStatus = Literal["pending", "approved", "rejected"]


class _Record(BaseModel):
    # Built on first use: a run without gates, tools or artifacts never needs these validators.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Artifact(_Record):
    """A file a step produced, with its content hash at the time it was recorded."""

    path: str
    sha256: str
    step_id: str | None = None
    kind: str = "output"
    recorded_at: str
    size: int = 0


class ToolResult(_Record):
    """The outcome of one tool call through the pipeline (R-T1), appended to ``tool_results.json``."""

    name: str
    status: Literal["ok", "error", "refused", "timeout", "blocked"]
    risk: Risk = "low"
    started_at: str
    ended_at: str
    duration_ms: float = 0.0
    result: Any = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    artifacts: list[str] = Field(default_factory=list)
    step_id: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    #: Set on a call a crash interrupted: why it was (not) run again (read back from the disk, or a person's
    #: decision at its ``rerun:`` gate).
    after_crash: str | None = None


class GateChoice(_Record):
    """One answer a question gate takes: a menu option's key and label (a plain choice: its label is its key)."""

    key: str
    label: str = ""


class Gate(_Record):
    """A blocking checkpoint waiting for a person (R-G1), kept in ``gates.json``."""

    gate_id: str
    step_id: str | None = None
    kind: Literal["human", "tool", "question"] = "human"
    status: GateStatus = "pending"
    reason: str = ""
    phase: str = ""
    workflow: str = ""
    created_at: str
    decided_at: str | None = None
    approver: str | None = None
    notes: str | None = None
    #: A question gate's answers (empty: any answer); its ``reason`` names their keys too, as ``… [A/C]``.
    choices: list[GateChoice] = Field(default_factory=list)
    #: A question gate's answer, once given (one of ``choices`` when there are any).
    answer: str | None = None


class Approval(_Record):
    """A person's decision on a gate, kept in ``approvals.json``."""

    gate_id: str
    decision: Literal["approved", "rejected"]
    approver: str = Field(min_length=1)
    time: str
    notes: str | None = None
    step_id: str | None = None
    phase: str = ""
    workflow: str = ""


class Evidence(_Record):
    """A QUINT evidence record (R-Q1)."""

    id: str
    claim: str
    level: Literal["L0", "L1", "L2", "invalid"]
    source: str
    date: str
    valid_until: str | None = None
    congruence: Literal["CL1", "CL2", "CL3"] = "CL3"
    reliability: float = Field(ge=0, le=1)
    wlnk: float | None = None
    carrier_ref: str = ""
    artifacts: list[str] = Field(default_factory=list)
    step_id: str | None = None


class DesignRationale(_Record):
    """A design rationale record written for every gate decision (R-Q1), kept in ``drr.json``."""

    id: str
    decision: str
    context: str
    options: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    rationale: str = ""
    signoff: str | None = None
    time: str
    gate_id: str | None = None
    step_id: str | None = None
