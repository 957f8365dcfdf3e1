"""``recordEvidence``: how a step claims evidence (R-Q1). The pipeline checks the record against the shipped
evidence schema; the engine then validates it fully, computes its WLNK and keeps it in ``evidence.json``."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from stepline.tools._spec import ToolContext, ToolSpec

__all__ = ["evidence_tools", "record_evidence"]


def record_evidence(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Return the record, stamped with the calling step (the engine persists it)."""
    return {**args, "step_id": args.get("step_id") or ctx.step_id}


def evidence_tools() -> list[ToolSpec]:
    """Return the evidence tool's spec; its argument schema is the evidence schema itself."""
    text = resources.files("stepline.evidence").joinpath("evidence.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    for key in ("$id", "$schema", "title"):
        schema.pop(key, None)
    return [ToolSpec(name="recordEvidence", description="Record a QUINT evidence record for this step's claim.",
                     handler=record_evidence, args_schema=schema, risk="low", idempotent=True)]
