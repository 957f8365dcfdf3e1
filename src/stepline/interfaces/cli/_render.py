"""Rendering helpers shared by commands: the console, progress lines, run summaries, JSON output."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from stepline.model import Event, Run

__all__ = [
    "console",
    "context_detail",
    "err_console",
    "one_line",
    "print_contexts",
    "print_errors",
    "print_json",
    "print_secrets_in_artifacts",
    "progress_listener",
    "run_exit_code",
    "run_summary",
    "secrets_in_artifacts",
]


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
        from rich.text import Text

        mark, style = _MARKS[event.type]
        data = event.data
        detail = one_line(data.get("error") or data.get("reason") or data.get("path") or data.get("summary")
                          or data.get("name"))
        if not data.get("error") and len(detail) > 160:  # an error is shown whole; a long summary is not
            detail = detail[:159] + "…"
        err_console.print(Text.assemble((mark, style), f" {event.step_id or ''} ", (detail, "dim")))

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
        "secrets_in_artifacts": secrets_in_artifacts(run),
    }


def secrets_in_artifacts(run: Run) -> list[dict[str, Any]]:
    """The files the run's steps wrote that hold a secret, from the steps' output guardrail reports:
    ``[{step_id, path, kinds: {kind: count}, redacted: False, blocked}]``; kinds and counts, never a secret."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for step in run.steps.values():
        for entry in step.guardrails:
            if entry.get("guardrail") != "secrets":
                continue
            for path, kinds in (entry.get("artifacts") or {}).items():  # the latest attempt's report wins
                found[(step.step_id, path)] = {"step_id": step.step_id, "path": path, "kinds": dict(kinds),
                                               "redacted": False, "blocked": bool(entry.get("blocking"))}
    return list(found.values())


def print_secrets_in_artifacts(run: Run) -> None:
    """Tell the user which file holds which kind of secret (never the secret): stepline does not rewrite them."""
    from rich.text import Text

    from stepline.guardrails import describe_secrets

    found = secrets_in_artifacts(run)
    if not found:
        return
    console.print(Text("warning: secrets in files the steps wrote (NOT redacted: the files keep them)",
                       style="yellow"))
    for item in found:
        failed = "; the step failed" if item["blocked"] else ""
        console.print(Text(f"  {item['path']}: {describe_secrets(item['kinds'])} (step {item['step_id']}{failed})"),
                      soft_wrap=True)
    if not any(item["blocked"] for item in found):
        console.print(Text("  remove them from the files; `guardrails.secrets_in_artifacts: block` in "
                           "config/runtime.yaml fails such a step instead"), soft_wrap=True)


def one_line(text: Any) -> str:
    """``text`` on one line (a table cell the console shortens to its width; the whole text is printed apart)."""
    return " ".join(str(text or "").split())


def print_errors(run: Run) -> None:
    """Every failed step's whole error (and the run's, when it is not one of them), never cut: the console's
    lines are not wrapped by rich (``soft_wrap``), the terminal wraps them."""
    from rich.text import Text

    errors = [(step.step_id, step.error) for step in run.steps.values()
              if step.status.value == "failed" and step.error]
    if run.error and not any(run.error.endswith(error) for _, error in errors):
        errors.append(("run", run.error))
    if not errors:
        return
    console.print(Text("errors:", style="red"))
    for step_id, error in errors:
        first, *rest = error.splitlines() or [""]
        text = "\n".join([f"  {step_id}: {first}", *(f"    {line}" for line in rest)])
        console.print(Text(text), soft_wrap=True)


def context_detail(data: dict[str, Any]) -> str | None:
    """What ``show`` says of a TELIS event (a context resolved, a source drifted); None for any other event."""
    context = data.get("context")
    if isinstance(context, dict):
        lsp = context.get("lsp") or {}
        parts = [f"{len(context.get('shards') or [])} shard(s), phase {context.get('phase', 0)}, "
                 f"{context.get('tokens', 0)}/{(context.get('request') or {}).get('budget_tokens', '?')} tokens"]
        if lsp:
            parts.append(f"{lsp.get('method')} {lsp.get('document')}:{lsp.get('line')}:{lsp.get('character')}"
                         f" via {lsp.get('server') or 'no server'}")
        if context.get("warnings"):
            parts.append(f"{len(context['warnings'])} warning(s)")
        return "; ".join(parts) + f"; {str(context.get('fingerprint', ''))[:19]}"
    if isinstance(data.get("sources"), list) and "replayed" in data:
        changed = ", ".join(f"{s.get('source')} changed" + (f" (since {s['since']})" if s.get("since") else "")
                            for s in data["sources"] if isinstance(s, dict))
        return ("drift in the replayed context: " if data["replayed"] else "drift: ") + changed
    return None


def print_contexts(run: Run) -> None:
    """Each step's TELIS context: its shards (tier, score, source), the language server's answer, warnings."""
    from rich.text import Text

    steps = [step for step in run.steps.values() if step.telis_context]
    if not steps:
        return
    console.print(Text("context (TELIS):", style="bold"))
    for step in steps:
        context = step.telis_context or {}
        lines = [f"  {step.step_id}: {context.get('fingerprint')}  {context.get('tokens', 0)} tokens, phase "
                 f"{context.get('phase', 0)} ({context.get('stopped')}); query: "
                 f"{(context.get('request') or {}).get('query') or '-'}"]
        for shard in context.get("shards") or []:
            lines.append(f"    [{shard.get('tier')}] {shard.get('title')} ({shard.get('source')}, score "
                         f"{shard.get('score')}, {shard.get('tokens')} tokens)")
        lsp = context.get("lsp")
        if lsp:
            result = lsp.get("result") or {}
            answer = result.get("text") or "; ".join(s.get("label", "") for s in result.get("signatures") or [])
            lines.append(f"    {lsp.get('method')} at {lsp.get('document')}:{lsp.get('line')}:{lsp.get('character')}"
                         f" ({lsp.get('server') or 'no server'}): {one_line(answer)[:160] or '-'}")
        lines += [f"    warning: {warning}" for warning in context.get("warnings") or []]
        console.print(Text("\n".join(lines)), soft_wrap=True)


def run_exit_code(run: Run) -> int:
    """0 completed, 8 failed, 9 blocked."""
    from stepline.interfaces.cli._app import EXIT_BLOCKED, EXIT_FAILED

    return {"completed": 0, "failed": EXIT_FAILED, "blocked": EXIT_BLOCKED}.get(run.status.value, 1)


def print_json(value: Any) -> None:
    """Print JSON to stdout."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")
