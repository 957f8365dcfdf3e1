"""Tools (R-T1): the registry, the pipeline that runs calls safely, and the built-in tools.

The engine builds one :class:`ToolPipeline` per run from a :class:`ToolRegistry` (start from
:func:`default_registry`, then register your own :class:`ToolSpec`) and the run's :class:`ToolPolicy`, and
awaits :meth:`ToolPipeline.arun` for each step tool call. A tool is a Python handler, run in a killable worker
process, or a command (a program such as ``shell``'s ``/bin/sh -c``), run directly in its own process group.
The validation runners are also plain functions for the engine's validation gates.

Names are loaded on first use: a tool worker process imports only the worker and its handler's module, so
it starts without pydantic, jsonschema or the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from stepline.tools._builtin_validation import (
        ValidationIssue,
        ValidationReport,
        check_template_complete,
        validate_json,
        validate_python_files,
        validate_yaml,
    )
    from stepline.tools._builtins import builtin_tools, default_registry
    from stepline.tools._git import find_commit, git, git_error, git_ok, is_ancestor, with_trailers
    from stepline.tools._pipeline import (
        ApprovalLookup,
        EventCallback,
        ToolCallLike,
        ToolPipeline,
        dump_tool_results,
        load_tool_results,
    )
    from stepline.tools._policy import ToolPolicy
    from stepline.tools._spec import (
        EffectCheck,
        ToolCommand,
        ToolContext,
        ToolHandler,
        ToolOutput,
        ToolRegistry,
        ToolSpec,
        tool_gate_id,
    )

__all__ = [
    "ApprovalLookup",
    "EffectCheck",
    "EventCallback",
    "ToolCallLike",
    "ToolCommand",
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
    "find_commit",
    "git",
    "git_error",
    "git_ok",
    "is_ancestor",
    "load_tool_results",
    "tool_gate_id",
    "validate_json",
    "validate_python_files",
    "validate_yaml",
    "with_trailers",
]


_EXPORTS: dict[str, str] = {
    "find_commit": "_git",
    "git": "_git",
    "git_error": "_git",
    "git_ok": "_git",
    "is_ancestor": "_git",
    "with_trailers": "_git",
    "ApprovalLookup": "_pipeline",
    "EffectCheck": "_spec",
    "EventCallback": "_pipeline",
    "ToolCallLike": "_pipeline",
    "ToolCommand": "_spec",
    "ToolContext": "_spec",
    "ToolHandler": "_spec",
    "ToolOutput": "_spec",
    "ToolPipeline": "_pipeline",
    "ToolPolicy": "_policy",
    "ToolRegistry": "_spec",
    "ToolSpec": "_spec",
    "ValidationIssue": "_builtin_validation",
    "ValidationReport": "_builtin_validation",
    "builtin_tools": "_builtins",
    "check_template_complete": "_builtin_validation",
    "default_registry": "_builtins",
    "dump_tool_results": "_pipeline",
    "load_tool_results": "_pipeline",
    "tool_gate_id": "_spec",
    "validate_json": "_builtin_validation",
    "validate_python_files": "_builtin_validation",
    "validate_yaml": "_builtin_validation",
}


__getattr__, __dir__ = _lazy_exports("stepline.tools", globals(), {k: "." + v for k, v in _EXPORTS.items()})
