"""A resolved context as the text a prompt carries (the LLM executors, the CLI agent)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_context"]


def render_context(context: dict[str, Any] | None) -> str:
    """Markdown for a prompt: the shards (best first, at their tiers), the language server's answer, warnings.

    Empty when there is no context.
    """
    if not context:
        return ""
    request = context.get("request") or {}
    lines = [f"Resolved by stepline before this step (fingerprint {str(context.get('fingerprint', ''))[:19]}…): "
             f"{len(context.get('shards') or [])} shard(s), phase {context.get('phase', 0)}, "
             f"{context.get('tokens', 0)} of {request.get('budget_tokens', '?')} tokens."]
    if request.get("query"):
        lines.append(f"Query: {request['query']}")
    for shard in context.get("shards") or []:
        lines += ["", f"### {shard['title']} ({shard['source']}; {shard['tier']}, score {shard['score']:g})", "",
                  str(shard["text"]).strip()]
    lsp = context.get("lsp")
    if lsp and lsp.get("result") is not None:
        where = f"{lsp.get('document')}:{lsp.get('line')}:{lsp.get('character')}"
        lines += ["", f"### {lsp.get('method')} at {where} ({lsp.get('server')})", ""]
        result = lsp["result"]
        if "text" in result:
            lines.append(str(result["text"]).strip() or "(the server had nothing to say here)")
        else:
            for signature in result.get("signatures") or []:
                lines.append(f"- `{signature['label']}`")
                if signature.get("documentation"):
                    documentation = str(signature["documentation"]).strip().split("\n")
                    lines += [f"  {line}" if line else "" for line in documentation]
                for parameter in signature.get("parameters") or []:
                    doc = f": {parameter['documentation']}" if parameter.get("documentation") else ""
                    lines.append(f"  - `{parameter['label']}`{doc}")
            if not result.get("signatures"):
                lines.append("(no signature at this position)")
    warnings = context.get("warnings") or []
    if warnings:
        lines += ["", "Warnings:"] + [f"- {w}" for w in warnings]
    return "\n".join(lines)
