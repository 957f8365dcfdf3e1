"""Handlers for pipeline tests; module-level so tool workers can import them by reference."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from stepline.errors import ToolError
from stepline.time import now_iso
from stepline.tools import ToolContext, ToolOutput


def touch(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Leave a marker file: the side effect tests look for to prove a tool did or did not run."""
    marker = Path(ctx.project_root) / str(args.get("marker", "ran.marker"))
    marker.write_text("ran", encoding="utf-8")
    return {"marker": marker.name}


def sleepy(args: dict[str, Any], ctx: ToolContext) -> None:
    """Record the worker's pid, then sleep far longer than any test timeout."""
    (Path(ctx.project_root) / "worker.pid").write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(float(args.get("seconds", 60)))


def flaky(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Fail with a retryable error until called ``succeed_on`` times (counted in a file)."""
    counter = Path(ctx.project_root) / "attempts"
    attempts = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(attempts))
    if attempts < int(args.get("succeed_on", 1_000)):
        raise ToolError("flaky failure", retryable=bool(args.get("retryable", True)))
    return {"attempts": attempts}


def boom(args: dict[str, Any], ctx: ToolContext) -> None:
    """Raise a plain exception, as buggy third-party code would."""
    raise ValueError("boom")


def not_json(args: dict[str, Any], ctx: ToolContext) -> object:
    """Return something tool_results.json could not hold."""
    return {1, 2}


def chatty(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """print() to the worker's stdout, then return big captured output."""
    print("noise that must not corrupt the answer")
    return ToolOutput(result="fine", stdout="x" * int(args.get("size", 10)))


def clock(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Report what time the handler sees."""
    return {"now": now_iso(), "ctx_now": ctx.now.isoformat()}
