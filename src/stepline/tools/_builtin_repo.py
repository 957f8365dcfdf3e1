"""``repo``: read-only inspection of the project's git repository (status, diff, log)."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from stepline.errors import ToolError
from stepline.tools._spec import ToolContext, ToolOutput, ToolSpec

__all__ = ["inspect_repo", "repo_tools"]

# Options that keep git from writing (optional index refresh) or running user programs (pager, external
# diff, textconv filters, fsmonitor hooks): inspection must have no side effects.
_READ_ONLY = ["git", "--no-pager", "-c", "core.fsmonitor=false", "-c", "color.ui=false"]


def inspect_repo(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """Run ``git status``, ``git diff`` or ``git log`` in the project root and return its text."""
    action = args["action"]
    paths = [str(p) for p in args.get("paths", [])]
    if action == "status":
        command = ["status", "--porcelain=v1", "--branch"]
    elif action == "diff":
        command = ["diff", "--no-ext-diff", "--no-textconv", *(["--staged"] if args.get("staged") else []),
                   *(["--stat"] if args.get("stat") else [])]
    else:
        command = ["log", f"--max-count={int(args.get('max_count', 20))}", "--format=%H %ad %an%n    %s",
                   "--date=iso-strict"]
    argv = [*_READ_ONLY, *command, "--", *paths]
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(argv, cwd=ctx.project_root, capture_output=True, env=env, check=False)
    except FileNotFoundError as exc:
        raise ToolError("git is not installed", hint="install git to use the repo tool") from exc
    stdout = done.stdout.decode("utf-8", "replace")[: ctx.max_output_bytes]
    stderr = done.stderr.decode("utf-8", "replace")[: ctx.max_output_bytes]
    error = None if done.returncode == 0 else f"git {action} exited with {done.returncode}: {stderr.strip()}"
    return ToolOutput(result={"action": action, "exit_code": done.returncode, "output": stdout},
                      stdout=stdout, stderr=stderr, error=error)


def repo_tools() -> list[ToolSpec]:
    """Return the repo tool's spec."""
    return [ToolSpec(
        name="repo", description="Inspect the project's git repository: status, diff or log (read-only).",
        handler=inspect_repo, risk="low", idempotent=True,
        args_schema={"type": "object", "required": ["action"], "additionalProperties": False,
                     "properties": {"action": {"enum": ["status", "diff", "log"]},
                                    "paths": {"type": "array", "items": {"type": "string"}},
                                    "staged": {"type": "boolean"}, "stat": {"type": "boolean"},
                                    "max_count": {"type": "integer", "minimum": 1, "maximum": 1000}}},
    )]
