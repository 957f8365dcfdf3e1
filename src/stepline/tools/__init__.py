"""Tools (R-T1): the registry, the pipeline that runs calls safely, and the built-in tools.

The engine builds one :class:`ToolPipeline` per run from a :class:`ToolRegistry` (start from
:func:`default_registry`, then register your own :class:`ToolSpec`) and the run's :class:`ToolPolicy`, and
calls :meth:`ToolPipeline.run` for each step tool call. Every handler runs in a killable worker process.
The validation runners are also plain functions for the engine's validation gates.
"""

from __future__ import annotations

from stepline.tools._builtin_files import file_tools
from stepline.tools._builtin_repo import repo_tools
from stepline.tools._builtin_shell import shell_tools
from stepline.tools._builtin_time import time_tools
from stepline.tools._builtin_validation import (
    ValidationIssue,
    ValidationReport,
    check_template_complete,
    validate_json,
    validate_python_files,
    validate_yaml,
    validation_tools,
)
from stepline.tools._pipeline import (
    ApprovalLookup,
    EventCallback,
    ToolCallLike,
    ToolPipeline,
    dump_tool_results,
    load_tool_results,
)
from stepline.tools._spec import (
    ToolContext,
    ToolHandler,
    ToolOutput,
    ToolPolicy,
    ToolRegistry,
    ToolSpec,
    tool_gate_id,
)

__all__ = [
    "ApprovalLookup",
    "EventCallback",
    "ToolCallLike",
    "ToolContext",
    "ToolHandler",
    "ToolOutput",
    "ToolPipeline",
    "ToolPolicy",
    "ToolRegistry",
    "ToolSpec",
    "ValidationIssue",
    "ValidationReport",
    "builtin_tools",
    "check_template_complete",
    "default_registry",
    "dump_tool_results",
    "load_tool_results",
    "tool_gate_id",
    "validate_json",
    "validate_python_files",
    "validate_yaml",
]


def builtin_tools() -> list[ToolSpec]:
    """Return the built-in tools: getCurrentTime, readFile, writeFile, listFiles, repo, shell, validate*."""
    return [*time_tools(), *file_tools(), *repo_tools(), *shell_tools(), *validation_tools()]


def default_registry() -> ToolRegistry:
    """Return a new registry holding the built-in tools (each call returns an independent registry)."""
    return ToolRegistry(builtin_tools())
