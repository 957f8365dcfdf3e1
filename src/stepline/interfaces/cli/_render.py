"""Rendering helpers shared by commands: the console, progress lines, run summaries, JSON output."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from stepline.model import Event, Run

__all__ = ["console", "err_console", "print_json", "progress_listener", "run_exit_code", "run_summary"]


class _LazyConsole:
    """A rich Console created on first use: importing rich costs more than `stepline --help` may take."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


console: Any = _LazyConsole(highlight=False)
err_console: Any = _LazyConsole(stderr=True, highlight=False)

_MARKS = {
    "WorkflowStepStarted": ("…", "cyan"),
    "WorkflowStepCompleted": ("✓", "green"),
    "WorkflowStepFailed": ("✗", "red"),
    "StepBlocked": ("⏸", "yellow"),
    "StepRetry": ("↻", "yellow"),
    "StepSkipped": ("–", "dim"),
    "HumanGateRequired": ("?", "yellow"),
    "ArtifactReady": ("📄", "blue"),
}


def progress_listener(quiet: bool) -> Any:
    """A listener that prints one line per step event (to stderr, so ``--json`` stdout stays clean)."""

    def listen(event: Event) -> None:
        if quiet or event.type not in _MARKS:
            return
        if event.type == "WorkflowStepStarted" and not sys.stderr.isatty():
            return
        mark, style = _MARKS[event.type]
        data = event.data
        detail = (data.get("error") or data.get("reason") or data.get("path") or data.get("summary")
                  or data.get("name") or "")
        err_console.print(f"[{style}]{mark}[/{style}] {event.step_id or ''} [dim]{str(detail)[:160]}[/dim]")

    return listen


def run_summary(run: Run) -> dict[str, Any]:
    """The JSON shape of a run that ``--json`` prints."""
    return {
        "run_id": run.run_id,
        "workflow": run.workflow.id,
        "format": run.workflow.format,
        "status": run.status.value,
        "blocked_reason": run.blocked_reason,
        "error": run.error,
        "steps": [{"step_id": s.step_id, "name": s.name, "status": s.status.value, "attempts": s.attempts,
                   "error": s.error, "outputs": s.outputs} for s in run.steps.values()],
    }


def run_exit_code(run: Run) -> int:
    """0 completed, 8 failed, 9 blocked."""
    from stepline.interfaces.cli._app import EXIT_BLOCKED, EXIT_FAILED

    return {"completed": 0, "failed": EXIT_FAILED, "blocked": EXIT_BLOCKED}.get(run.status.value, 1)


def print_json(value: Any) -> None:
    """Print JSON to stdout."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")
