"""``shell``: run a shell command in the project root (high risk: it needs approval by default).

The command runs inside the tool's worker, which leads its own process group, so a timeout kills the shell
and everything it started as one group. Output is captured to temporary files (not pipes: a chatty command
cannot fill memory or block) and only the first ``max_output_bytes`` of each stream are kept.
"""

from __future__ import annotations

import subprocess
import tempfile
from typing import IO, Any

from stepline.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["run_shell", "shell_tools"]


def _head(stream: IO[bytes], limit: int) -> str:
    stream.seek(0, 2)
    size = stream.tell()
    stream.seek(0)
    text = stream.read(limit).decode("utf-8", "replace")
    return text if size <= limit else f"{text}\n…[truncated {size - limit} bytes]"


def run_shell(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """Run ``command`` with ``/bin/sh`` in the project root; a non-zero exit code is a failed call."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code = subprocess.call(str(args["command"]), shell=True, cwd=ctx.project_root,
                               stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        stdout, stderr = _head(out, ctx.max_output_bytes), _head(err, ctx.max_output_bytes)
    error = None if code == 0 else f"command exited with code {code}"
    return ToolOutput(result={"exit_code": code}, stdout=stdout, stderr=stderr, error=error)


def shell_tools() -> list[ToolSpec]:
    """Return the shell tool's spec."""
    return [ToolSpec(
        name="shell", description="Run a shell command in the project root; output and exit code captured.",
        handler=run_shell, risk="high", idempotent=False,
        args_schema={"type": "object", "required": ["command"], "additionalProperties": False,
                     "properties": {"command": {"type": "string", "minLength": 1}}},
    )]
