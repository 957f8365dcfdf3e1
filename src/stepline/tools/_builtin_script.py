"""``runScript``: run a Python script of the project (a workflow's helper) with ``uv run``, else this Python.

BMAD's skills ship helpers meant to be run as ``uv run {project-root}/_bmad/scripts/memlog.py append …``.
This is that call as a command tool: ``uv run <script> <args…>`` when ``uv`` is on the PATH, otherwise the
interpreter stepline runs on (the project's Python), in the project root, output and exit code captured. A
script changes files, so the call is not idempotent: interrupted mid-run, it is never re-run blindly.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

from stepline.tools._spec import ToolSpec

__all__ = ["script_argv", "script_tools"]


def script_argv(args: dict[str, Any]) -> list[str]:
    """The program ``runScript`` runs: ``uv run <script> <args…>`` or ``<this python> <script> <args…>``."""
    uv = shutil.which("uv")
    prefix = [uv, "run", "--no-project"] if uv else [sys.executable]
    return [*prefix, str(args["script"]), *(str(a) for a in args.get("args") or [])]


def script_tools() -> list[ToolSpec]:
    """Return the runScript tool's spec."""
    return [ToolSpec(
        name="runScript", description="Run a Python script file (path relative to the project root, or absolute) "
                                      "with its arguments, via `uv run` when available, else the project's Python.",
        command=script_argv, risk="medium", idempotent=False,
        args_schema={"type": "object", "required": ["script"], "additionalProperties": False,
                     "properties": {"script": {"type": "string", "minLength": 1, "pattern": r"\.py$"},
                                    "args": {"type": "array", "items": {"type": "string"}}}},
    )]
