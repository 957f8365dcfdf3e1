"""The ``dry-run`` executor: deterministic placeholders, default branches, ``[C]`` — proves a workflow's structure.

A step with an evidence requirement gets a placeholder evidence record at the required level, recorded with the
same ``recordEvidence`` tool call a real executor makes (so it is checked and journaled the same way) and marked
so it is never taken for evidence: ``source: dry-run``, an id and a claim that say so, reliability 0 (WLNK 0).
"""

from __future__ import annotations

from typing import Any

from stepline.executors._base import Executor
from stepline.executors._protocol import StepRequest, StepSession

__all__ = ["DRY_RUN_SOURCE", "DryRunExecutor", "default_choice", "placeholder_evidence"]

#: The ``source`` of every evidence record the dry-run executor makes: a placeholder, not evidence of anything.
DRY_RUN_SOURCE = "dry-run"


def default_choice(request: StepRequest) -> str | None:
    """The option a person pressing Enter would get: the menu default, else ``C``, else the first option."""
    if request.menu:
        for option in request.menu:
            if option.default:
                return option.key
        keys = [option.key for option in request.menu]
        return "C" if "C" in keys else keys[0]
    if request.choices:
        return request.choices[0]
    return None


def placeholder_evidence(request: StepRequest) -> dict[str, Any] | None:
    """The placeholder evidence record that meets ``request``'s evidence requirement, or None if it has none.

    A requirement that names no level gets none: the runtime's check reports it.
    """
    if not request.evidence:
        return None
    from stepline.evidence import EvidenceError, required_level
    from stepline.time import now_iso

    try:
        level = required_level(request.evidence)
    except EvidenceError:
        return None
    return {"id": f"{DRY_RUN_SOURCE}:{request.step_id}",
            "claim": f"[dry-run placeholder] stands in for the {request.evidence!r} evidence of step "
                     f"{request.step_id!r}; nothing was checked",
            "level": level, "source": DRY_RUN_SOURCE, "date": now_iso(), "valid_until": None, "congruence": "CL1",
            "reliability": 0.0, "wlnk": None, "carrier_ref": "dry-run placeholder"}


class DryRunExecutor(Executor):
    """Answers every request the same way every time, without a model.

    Options: ``placeholder_evidence`` (default true): meet a step's evidence requirement with a placeholder record
    on its ``work`` and ``generate`` requests. Another executor falling back to this one for the requests it does
    not cover (the scripted executor's ``default: dry-run``) should pass false, so that a requirement it left
    unmet is not met by a placeholder.
    """

    name = "dry-run"
    pure = True

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = options or {}
        self.placeholder_evidence = bool(self.options.get("placeholder_evidence", True))

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Fill the request with a placeholder that names the step, so outputs show where each part came from."""
        if request.kind == "decide":
            default = bool(request.hints.get("default", False))
            await session.decide(default, "dry-run takes the default branch")
            return
        if request.kind == "generate":
            await session.write_output(f"[dry-run] {request.section} — {request.title}\n",
                                       section=request.section, mode="section")
            await self._record_evidence(request, session)
            await session.finish(summary=f"generated {request.section}")
            return
        if request.kind == "answer":
            answer = default_choice(request) or f"[dry-run answer] {request.question or ''}".strip()
            await session.finish(choice=answer, summary=answer)
            return
        if request.hints.get("output"):
            await session.write_output(f"[dry-run] {request.title}\n")
        if request.kind == "work":
            await self._record_evidence(request, session)
        await session.finish(choice=default_choice(request), summary=f"dry-run: {request.title}")

    async def _record_evidence(self, request: StepRequest, session: StepSession) -> None:
        """Record the placeholder for the step's evidence requirement, after its output (so it links the output)."""
        record = placeholder_evidence(request) if self.placeholder_evidence else None
        if record is not None:
            await session.call_tool("recordEvidence", record)
