"""Facts about a run that every interface shows the same way: the JSON shape of a run, its errors, the files its
steps wrote that hold a secret, its TELIS contexts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepline.model import Run

__all__ = ["context_detail", "context_lines", "one_line", "run_errors", "run_summary", "secrets_in_artifacts"]


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


def one_line(text: Any) -> str:
    """``text`` on one line (a table cell the console shortens to its width; the whole text is printed apart)."""
    return " ".join(str(text or "").split())


def run_errors(run: Run) -> list[tuple[str, str]]:
    """Every failed step's whole error, and the run's when it is not one of them: ``[(step id or "run", error)]``."""
    errors = [(step.step_id, step.error) for step in run.steps.values()
              if step.status.value == "failed" and step.error]
    if run.error and not any(run.error.endswith(error) for _, error in errors):
        errors.append(("run", run.error))
    return errors


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


def context_lines(run: Run) -> list[list[str]]:
    """Each step's TELIS context, a list of lines a step: its shards (tier, score, source), the language
    server's answer, warnings."""
    found = []
    for step in run.steps.values():
        context = step.telis_context
        if not context:
            continue
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
        found.append(lines)
    return found
