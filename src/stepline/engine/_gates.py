"""Human gates (R-G1): when a step must wait for a person, and the books that record who decided what.

``gates.json`` holds every gate with its status; ``approvals.json`` every decision with approver, time and
notes; ``drr.json`` (and ``drr/<id>.md``) a design rationale record per decision. The journal holds the
decision too (HumanGateApproved/Rejected), and that is what a resumed run reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from stepline import time
from stepline.engine._config import HitlPolicy
from stepline.errors import NotFoundError, RunStateError, UsageError
from stepline.evidence import drr_for_decision, drr_markdown
from stepline.executors import match_answer, options_named
from stepline.model import Approval, DesignRationale, Gate, GateChoice, StepSpec
from stepline.store import RunDir

__all__ = ["GateBook", "gate_choices", "gate_question", "gate_reason"]

_LISTED = re.compile(r"\s\[([^\[\]]+)\]$")  # a question gate's reason ends with its choices' keys: "… [A/P/C]"


def gate_choices(gate: Gate) -> list[GateChoice]:
    """The answers a question gate takes (empty: any): as recorded, or for a gate recorded before they were,
    the keys its reason ends with."""
    if gate.choices or gate.kind != "question":
        return list(gate.choices)
    listed = _LISTED.search(gate.reason)
    return [GateChoice(key=key) for key in listed[1].split("/")] if listed else []


def gate_question(gate: Gate) -> str:
    """A question gate's question: its reason without the keys of its choices at the end."""
    listed = _LISTED.search(gate.reason) if gate_choices(gate) else None
    return gate.reason[:listed.start()] if listed else gate.reason


def gate_reason(spec: StepSpec, workflow_id: str, policy: HitlPolicy) -> str | None:
    """Return why ``spec`` must wait for a person before it runs, or None (seed 004 decision table)."""
    gate = spec.human_gate
    if gate == "required":
        return "the step's human_gate is required"
    if spec.phase and spec.phase in policy.required_phases:
        return f"phase {spec.phase!r} is in hitl.policy.required_phases"
    lowered = workflow_id.lower()
    for word in policy.high_risk_keywords:
        if word and word.lower() in lowered:
            return f"workflow {workflow_id!r} matches high-risk keyword {word!r}"
    if policy.conditional_required:
        if gate == "conditional":
            return "the step's human_gate is conditional and hitl.policy.conditional_required is on"
        if spec.phase and spec.phase in policy.conditional_phases:
            return f"phase {spec.phase!r} is in hitl.policy.conditional_phases (conditional_required is on)"
        for word in policy.conditional_keywords:
            if word and word.lower() in lowered:
                return f"workflow {workflow_id!r} matches conditional keyword {word!r} (conditional_required is on)"
    if gate == "recommended" and policy.recommended_required:
        return "the step's human_gate is recommended and hitl.policy.recommended_required is on"
    return None


class GateBook:
    """The gates, approvals and DRRs of one run, kept in its directory."""

    def __init__(self, run_dir: RunDir, workflow_id: str, redact: Callable[[str], str] = str) -> None:
        self.run_dir = run_dir
        self.workflow_id = workflow_id
        self.redact = redact  # a question or reason may quote a secret; gates.json must not
        raw = run_dir.read("gates.json", []) or []
        self.gates: dict[str, Gate] = {g["gate_id"]: Gate.model_validate(g) for g in raw}

    def _save(self) -> None:
        self.run_dir.write("gates.json", [g.model_dump() for g in self.gates.values()])

    def get(self, gate_id: str) -> Gate | None:
        """The gate with ``gate_id``, if any."""
        return self.gates.get(gate_id)

    def pending(self) -> list[Gate]:
        """Gates still waiting for a decision."""
        return [g for g in self.gates.values() if g.status == "pending"]

    def open(self, gate_id: str, *, kind: Literal["human", "tool", "question"], step_id: str | None, reason: str,
             phase: str = "", choices: list[GateChoice] | None = None) -> Gate:
        """Record a pending gate (idempotent: opening an open gate changes nothing); a question's ``choices``
        are the only answers it takes."""
        existing = self.gates.get(gate_id)
        if existing is not None and existing.status == "pending":
            return existing
        reason = reason if not choices else f"{reason} [{'/'.join(c.key for c in choices)}]"
        gate = Gate(gate_id=gate_id, step_id=step_id, kind=kind, reason=self.redact(reason), phase=phase,
                    workflow=self.workflow_id, created_at=time.now_iso(), choices=list(choices or []))
        self.gates[gate_id] = gate
        self._save()
        return gate

    def choose(self, gate_id: str | None, *, kinds: tuple[str, ...] = ("human", "tool")) -> Gate:
        """Resolve the gate a person means: the id given, or the only pending one."""
        if gate_id:
            gate = self.gates.get(gate_id)
            if gate is None:
                pending = ", ".join(g.gate_id for g in self.pending()) or "none"
                raise NotFoundError(f"run {self.run_dir.run_id} has no gate {gate_id!r}",
                                    hint=f"pending gates: {pending}")
            return gate
        candidates = [g for g in self.pending() if g.kind in kinds]
        if not candidates:
            raise RunStateError(f"run {self.run_dir.run_id} has no pending gate",
                                hint="see `stepline gates` for the runs waiting for a person")
        if len(candidates) > 1:
            raise UsageError(f"run {self.run_dir.run_id} has {len(candidates)} pending gates",
                             hint="name one: " + ", ".join(g.gate_id for g in candidates))
        return candidates[0]

    @staticmethod
    def answer_taken(gate: Gate, answer: str) -> str:
        """The answer a pending question gate records: with choices, the key of the one ``answer`` names (by
        key or label, :func:`match_answer`), any other refused before anything is written; else ``answer``."""
        choices = gate_choices(gate) if gate.status == "pending" else []
        if not choices:
            return answer
        matched = match_answer(answer, choices)
        if matched is None:
            raise UsageError(f"{answer!r} is not an answer to {gate.gate_id} ({gate_question(gate)[:120]})",
                             hint=f"answer one of: {options_named(choices)}")
        return matched.key

    def decide(self, gate: Gate, *, approved: bool, by: str, notes: str | None,
               answer: str | None = None) -> tuple[Gate, Approval, DesignRationale]:
        """Record a person's decision on ``gate`` in gates.json, approvals.json and drr.json (``answer``: as
        :meth:`answer_taken` gave it)."""
        if not by.strip():
            raise UsageError("an approval needs the approver's name", hint="pass --by NAME")
        if gate.status != "pending":
            raise RunStateError(f"gate {gate.gate_id} was already {gate.status} by {gate.approver} at "
                                f"{gate.decided_at}", hint="a gate is decided once")
        now = time.now_iso()
        decision: Literal["approved", "rejected"] = "approved" if approved else "rejected"
        gate.status = decision
        gate.approver = by
        gate.decided_at = now
        gate.notes = self.redact(notes) if notes else notes
        gate.answer = self.redact(answer) if answer else answer
        self._save()
        approval = Approval(gate_id=gate.gate_id, decision=decision, approver=by, time=now, notes=notes,
                            step_id=gate.step_id, phase=gate.phase, workflow=self.workflow_id)
        approvals = list(self.run_dir.read("approvals.json", []) or [])
        approvals.append(approval.model_dump())
        self.run_dir.write("approvals.json", approvals)
        drr = drr_for_decision(gate, approval, options=("approved", "rejected") if gate.kind != "question"
                               else (answer or "",))
        drrs = list(self.run_dir.read("drr.json", []) or [])
        drrs.append(drr.model_dump())
        self.run_dir.write("drr.json", drrs)
        md_dir = self.run_dir.path / "drr"
        md_dir.mkdir(exist_ok=True)
        (md_dir / f"{drr.id}.md").write_text(drr_markdown(drr), encoding="utf-8")
        return gate, approval, drr
