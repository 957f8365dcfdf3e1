"""The canonical model: what a workflow and a run ARE. Pure data and invariants; imports nothing else of stepline."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from stepline.model._events import Event, EventType, dump_data
from stepline.model._records import (
    Approval,
    Artifact,
    DesignRationale,
    Evidence,
    Gate,
    GateChoice,
    GateStatus,
    ToolResult,
)
from stepline.model._run import (
    ALLOWED_TRANSITIONS,
    InvalidTransition,
    Run,
    RunMode,
    RunStatus,
    RunStep,
    StepStatus,
)
from stepline.model._spec import (
    HumanGate,
    NativeWorkflowFile,
    RetryPolicy,
    Risk,
    SourceRef,
    StepSpec,
    ToolCall,
    WorkflowFormat,
    WorkflowSpec,
)

__all__ = [
    "ALLOWED_TRANSITIONS",
    "Approval",
    "Artifact",
    "DesignRationale",
    "Event",
    "EventType",
    "Evidence",
    "Gate",
    "GateChoice",
    "GateStatus",
    "HumanGate",
    "InvalidTransition",
    "NativeWorkflowFile",
    "RetryPolicy",
    "Risk",
    "Run",
    "RunMode",
    "RunStatus",
    "RunStep",
    "SourceRef",
    "StepSpec",
    "StepStatus",
    "ToolCall",
    "ToolResult",
    "WorkflowFormat",
    "WorkflowSpec",
    "build_workflow_schema",
    "dump_data",
    "workflow_schema",
]

SCHEMA_ID = "https://stepline.dev/schemas/workflow.schema.json"


def build_workflow_schema() -> dict[str, Any]:
    """Generate the JSON Schema of native workflow files from :class:`NativeWorkflowFile`."""
    schema = NativeWorkflowFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    return schema


def workflow_schema() -> dict[str, Any]:
    """Return the shipped JSON Schema of native workflow files (``workflow.schema.json`` in this package)."""
    text = resources.files("stepline.model").joinpath("workflow.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded
