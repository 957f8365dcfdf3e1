"""Design rationale records (R-Q1): every gate decision leaves a DRR in ``drr.json`` and as markdown."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from stepline.model import Approval, DesignRationale, Gate
from stepline.time import now_iso

__all__ = ["drr_for_decision", "drr_markdown", "make_drr"]


def make_drr(decision: str, context: str, *, options: Iterable[str] = (), evidence: Iterable[str] = (),
             rationale: str = "", signoff: str | None = None, gate_id: str | None = None,
             step_id: str | None = None, drr_id: str | None = None) -> DesignRationale:
    """Build a DRR stamped with the time provider's now.

    Without ``drr_id`` the id is ``drr-`` + a hash of the content and time, so the same decision recorded
    under a frozen clock gets the same id (deterministic tests and replays).
    """
    record = DesignRationale(id=drr_id or "", decision=decision, context=context, options=list(options),
                             evidence=list(evidence), rationale=rationale, signoff=signoff, time=now_iso(),
                             gate_id=gate_id, step_id=step_id)
    if drr_id is not None:
        return record
    content = json.dumps(record.model_dump(mode="json", exclude={"id"}), sort_keys=True)
    return record.model_copy(update={"id": f"drr-{hashlib.sha256(content.encode('utf-8')).hexdigest()[:12]}"})


def drr_for_decision(gate: Gate, approval: Approval, *, evidence: Iterable[str] = (),
                     options: Iterable[str] = ("approved", "rejected")) -> DesignRationale:
    """Build the DRR of a person's decision on a gate: what was decided, why it was asked, who signed off."""
    context = gate.reason or f"{gate.kind} gate {gate.gate_id}"
    return make_drr(f"{approval.decision}: {gate.gate_id}", context, options=options, evidence=evidence,
                    rationale=approval.notes or "", signoff=approval.approver, gate_id=gate.gate_id,
                    step_id=approval.step_id or gate.step_id)


def drr_markdown(drr: DesignRationale) -> str:
    """Render a DRR as markdown for people (the JSON in ``drr.json`` is the record)."""
    lines = [f"# {drr.id}: {drr.decision}", "", f"- Time: {drr.time}"]
    lines += [f"- {label}: {value}" for label, value in
              (("Gate", drr.gate_id), ("Step", drr.step_id), ("Sign-off", drr.signoff)) if value]
    lines += ["", "## Context", "", drr.context or "_none recorded_"]
    if drr.options:
        lines += ["", "## Options", "", *(f"- {option}" for option in drr.options)]
    lines += ["", "## Evidence", ""]
    lines += [f"- {ref}" for ref in drr.evidence] or ["_none_"]
    lines += ["", "## Rationale", "", drr.rationale or "_none recorded_", ""]
    return "\n".join(lines)
