"""The built-in tool set, assembled from the modules that define each tool."""

from __future__ import annotations

from stepline.tools._builtin_evidence import evidence_tools
from stepline.tools._builtin_files import file_tools
from stepline.tools._builtin_repo import repo_tools
from stepline.tools._builtin_script import script_tools
from stepline.tools._builtin_shell import shell_tools
from stepline.tools._builtin_time import time_tools
from stepline.tools._builtin_validation import validation_tools
from stepline.tools._spec import ToolRegistry, ToolSpec

__all__ = ["builtin_tools", "default_registry"]


def builtin_tools() -> list[ToolSpec]:
    """Return the built-in tools: getCurrentTime, readFile, writeFile, listFiles, repo, shell, runScript,
    validate*, recordEvidence."""
    return [*time_tools(), *file_tools(), *repo_tools(), *shell_tools(), *script_tools(), *validation_tools(),
            *evidence_tools()]


def default_registry() -> ToolRegistry:
    """Return a new registry holding the built-in tools (each call returns an independent registry)."""
    return ToolRegistry(builtin_tools())
