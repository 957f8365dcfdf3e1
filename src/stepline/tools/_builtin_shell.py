"""``shell``: run a shell command in the project root (high risk: it needs approval by default).

It is a command tool: ``/bin/sh -c <command>`` is started directly as its own process group (see
:mod:`stepline.tools._command`), so a timeout or cancellation kills the shell and everything it started, and
a call costs one process start instead of an interpreter. A non-zero exit code is a failed call. A command
that is one script call whose effect can be read back (``uv run …/memlog.py append …``) is checked after a
crash as ``runScript`` checks it; any other command interrupted mid-run waits for a person.
"""

from __future__ import annotations

from typing import Any

from stepline.tools._builtin_script import SHELL_SCRIPT_EFFECT
from stepline.tools._spec import ToolSpec

__all__ = ["shell_argv", "shell_tools"]


def shell_argv(args: dict[str, Any]) -> list[str]:
    """The program the ``shell`` tool runs: ``command`` given to ``/bin/sh -c``."""
    return ["/bin/sh", "-c", str(args["command"])]


def shell_tools() -> list[ToolSpec]:
    """Return the shell tool's spec."""
    return [ToolSpec(
        name="shell", description="Run a shell command in the project root; output and exit code captured.",
        command=shell_argv, risk="high", idempotent=False, effect=SHELL_SCRIPT_EFFECT,
        args_schema={"type": "object", "required": ["command"], "additionalProperties": False,
                     "properties": {"command": {"type": "string", "minLength": 1}}},
    )]
