"""What a workflow IS: StepSpec (seed 004) and WorkflowSpec, the canonical model every reader produces."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "HumanGate",
    "NativeWorkflowFile",
    "RetryPolicy",
    "Risk",
    "SourceRef",
    "StepSpec",
    "ToolCall",
    "WorkflowFormat",
    "WorkflowSpec",
]

HumanGate = Literal["required", "conditional", "optional", "recommended"]
Risk = Literal["low", "medium", "high"]
WorkflowFormat = Literal["native", "bmad-legacy", "bmad-microfile", "bmad-hybrid", "bmad-skill", "ccw", "sprint"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SourceRef(_Model):
    """Where a thing was read from, for file:line diagnostics."""

    path: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


class RetryPolicy(_Model):
    """How often and how patiently a failing step is tried again (seed 004 ``retries``).

    ``max`` counts retries after the first attempt. The delay before retry ``n`` (1-based) is
    ``backoff_seconds * 2**(n-1)`` when ``exponential``, capped at ``max_backoff_seconds``, then spread by
    ``±jitter`` (a fraction) with the run's seeded random source.
    """

    max: int = Field(default=0, ge=0, description="retries after the first attempt")
    backoff_seconds: float = Field(default=0.0, ge=0)
    exponential: bool = True
    jitter: float = Field(default=0.1, ge=0, le=1)
    max_backoff_seconds: float = Field(default=300.0, ge=0)


class ToolCall(_Model):
    """A tool the step calls before its executor runs (seed 004 ``tools``)."""

    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    required: bool = False
    risk: Risk | None = None
    gate: str | None = None


class StepSpec(_Model):
    """One step of a workflow: the seed-004 contract plus what the engine needs to run it.

    ``body`` is what the step asks for (the instruction text for native steps; readers of other formats put
    the step's source there). ``meta`` carries reader-specific data (the instruction tree index of a BMAD
    step, the step file of a micro-file step, the task JSON path of a CCW task) that the engine module for
    that format understands.
    """

    id: str = Field(min_length=1, pattern=r"^[^\s/\\]+$")
    name: str = ""
    description: str = ""
    phase: str = ""
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: list[str] = Field(default_factory=list)
    templates: list[str] = Field(default_factory=list)
    tools: list[ToolCall] = Field(default_factory=list)
    validation: str | None = None
    evidence: str | None = None
    human_gate: HumanGate | None = None
    on_reject: Literal["fail", "skip"] = Field(
        default="fail", description="when a person rejects the step's gate: fail the step (and the run), or "
                                    "skip its work and go on")
    retries: RetryPolicy | None = None
    timeout_seconds: float | None = Field(default=None, gt=0)
    depends_on: list[str] = Field(default_factory=list)
    execution_group: str | None = None
    body: str = ""
    source: SourceRef | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class WorkflowSpec(_Model):
    """A workflow read from disk, in any format: an ordered list of steps plus its variables."""

    id: str
    name: str = ""
    description: str = ""
    format: WorkflowFormat = "native"
    source: SourceRef | None = None
    root: str | None = Field(default=None, description="folder the workflow's relative paths start from")
    variables: dict[str, Any] = Field(default_factory=dict)
    steps: list[StepSpec] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)

    def step(self, step_id: str) -> StepSpec:
        """Return the step with ``step_id``; KeyError names the missing id."""
        for spec in self.steps:
            if spec.id == step_id:
                return spec
        raise KeyError(step_id)


class NativeWorkflowFile(_Model):
    """The file format for workflows written for stepline directly (YAML or JSON).

    Its JSON Schema ships as ``stepline/model/workflow.schema.json`` (see :func:`stepline.model.workflow_schema`).
    """

    id: str = Field(min_length=1)
    name: str = ""
    description: str = ""
    version: str = "1"
    variables: dict[str, Any] = Field(default_factory=dict)
    steps: list[StepSpec] = Field(min_length=1)
