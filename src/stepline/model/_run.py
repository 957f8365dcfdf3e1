"""What a run IS: RunStep with its transition table (seed 004), and Run."""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepline.model._spec import WorkflowSpec

__all__ = [
    "ALLOWED_TRANSITIONS",
    "InvalidTransition",
    "Run",
    "RunMode",
    "RunStatus",
    "RunStep",
    "StepStatus",
]


class StepStatus(StrEnum):
    """Where a RunStep is in its life."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    SKIPPED = "skipped"


class RunStatus(StrEnum):
    """Where a run is in its life."""

    RUNNING = "running"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"


RunMode = Literal["normal", "yolo", "non-interactive"]

#: Seed 004: pending → running → completed | failed | blocked; failed → running; blocked → running;
#: completed is terminal. ``skipped`` (a CCW task whose dependency failed) is reached only from pending
#: and is terminal too.
ALLOWED_TRANSITIONS: dict[StepStatus, frozenset[StepStatus]] = {
    StepStatus.PENDING: frozenset({StepStatus.RUNNING, StepStatus.SKIPPED}),
    StepStatus.RUNNING: frozenset({StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.BLOCKED}),
    StepStatus.FAILED: frozenset({StepStatus.RUNNING}),
    StepStatus.BLOCKED: frozenset({StepStatus.RUNNING}),
    StepStatus.COMPLETED: frozenset(),
    StepStatus.SKIPPED: frozenset(),
}


class InvalidTransition(RuntimeError):
    """A status change outside the transition table: a bug in stepline, never a user mistake."""


@dataclass(slots=True)
class RunStep:
    """The runtime record of one step of one run (seed 004 RunStep).

    A plain dataclass, not a pydantic model: the engine mutates it on every event, and pydantic's
    ``__setattr__`` costs more than the rest of a no-op step. :class:`Run` (pydantic) still validates and
    serialises it in the manifest.
    """

    step_id: str
    name: str = ""
    status: StepStatus = StepStatus.PENDING
    attempts: int = 0
    started_at: str | None = None
    ended_at: str | None = None
    error: str | None = None
    blocked_reason: str | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    telis_context: dict[str, Any] | None = None
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    summary: str | None = None
    choice: str | None = None

    def transition(self, to: StepStatus) -> None:
        """Move to ``to``; raise :class:`InvalidTransition` when the table does not allow it."""
        if to not in ALLOWED_TRANSITIONS[self.status]:
            raise InvalidTransition(f"step {self.step_id!r}: {self.status.value} -> {to.value} is not allowed")
        self.status = to


class Run(BaseModel):
    """One execution of a workflow: its spec, its steps' records and its variables (the manifest)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    workflow: WorkflowSpec
    status: RunStatus  # no default: the manifest leaves defaults out, and this field it must always show
    mode: RunMode = "normal"
    executor: str = "dry-run"
    executor_options: dict[str, Any] = Field(default_factory=dict)
    project_root: str
    created_at: str
    updated_at: str
    parent_run_id: str | None = None
    #: Set on a fork (``stepline fork``): the step of the parent run (``parent_run_id``) it continues from.
    forked_at: str | None = None
    variables: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, RunStep] = Field(default_factory=dict)
    blocked_reason: str | None = None
    error: str | None = None
    journal_seq: int = Field(default=0, description="last journal seq folded into this snapshot")
    cursor: dict[str, Any] = Field(default_factory=dict, description="format-specific position (goto pc, …)")

    def __repr__(self) -> str:
        # asyncio reprs a coroutine's result (Python 3.11); the default repr of a 10,000-step run is slow.
        return f"Run(run_id={self.run_id!r}, status={self.status.value!r}, steps={len(self.steps)})"

    def step(self, step_id: str) -> RunStep:
        """Return the RunStep for ``step_id``, creating a pending one the first time."""
        found = self.steps.get(step_id)
        if found is None:
            found = self.steps[step_id] = RunStep(step_id=step_id)
        return found
