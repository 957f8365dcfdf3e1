"""The engine's side of the tool pipeline: gates for risky tools, the journal, and ``tool_results.json``."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from stepline.engine._signals import StepBlocked
from stepline.errors import ToolError
from stepline.model import EventType, Risk

if TYPE_CHECKING:
    from stepline.engine._context import StepContext
    from stepline.engine._runner import Engine
    from stepline.tools import ToolPipeline, ToolRegistry, ToolSpec

__all__ = ["run_tool_for_step", "tool_is_idempotent", "tool_spec"]


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    args: dict[str, Any]
    required: bool
    risk: Risk | None


def _pipeline(engine: Engine) -> ToolPipeline:
    from stepline.tools import ToolPipeline, ToolPolicy, default_registry

    cached: ToolPipeline | None = getattr(engine, "_tool_pipeline", None)
    if cached is None:
        tools = engine.config.tools
        policy = ToolPolicy(allowlist=tools.allowlist, blocklist=tools.blocklist,
                            timeout_seconds=tools.timeout_seconds,
                            high_requires_approval=tools.risk_policy.high_requires_approval,
                            medium_requires_approval=tools.risk_policy.medium_requires_approval,
                            default_timezone=engine.config.time.default_timezone,
                            allowed_paths=tools.allowed_paths)
        cached = ToolPipeline(default_registry(), policy)
        engine._tool_pipeline = cached  # type: ignore[attr-defined]
    return cached


def tool_is_idempotent(name: str) -> bool:
    """Whether re-running ``name`` after an interruption is harmless (unknown tools are assumed not)."""
    from stepline.tools import default_registry

    registry = default_registry()
    return name in registry and registry.get(name).idempotent


@functools.cache
def _builtin_registry() -> ToolRegistry:
    """The built-in tools, built once (building validates every schema: tens of milliseconds)."""
    from stepline.tools import default_registry

    return default_registry()


def tool_spec(name: str) -> ToolSpec | None:
    """The spec of tool ``name`` (its risk, how to check its effect), None for a tool that does not exist."""
    registry = _builtin_registry()
    return registry.get(name) if name in registry else None


async def run_tool_for_step(engine: Engine, ctx: StepContext, name: str, args: dict[str, Any], *,
                            required: bool, risk: Risk | None, allowed_by: str | None = None) -> dict[str, Any]:
    """Run one tool call for ``ctx``'s step; block on its risk gate (unless ``allowed_by`` says why it may run
    without a person: journaled as a ToolApprovalRequired record that carries it), fail the step when a
    required tool fails."""
    pipeline = _pipeline(engine)
    approval_gates: list[str] = []

    def journal(kind: str, data: dict[str, Any]) -> None:  # the pipeline reports on the engine's loop, in order
        if kind == EventType.TOOL_APPROVAL_REQUIRED.value and data.get("gate_id"):
            approval_gates.append(str(data["gate_id"]))
        ctx.emit(EventType(kind), data)

    def approvals(gate_id: str) -> Literal["approved", "rejected", "pending"]:
        decision = engine.calls.decisions.get(gate_id)
        if decision is None:
            if allowed_by is None:
                return "pending"
            ctx.emit(EventType.TOOL_APPROVAL_REQUIRED, {"gate_id": gate_id, "tool": name, "allowed_by": allowed_by})
            return "approved"
        return "approved" if decision["decision"] == "approved" else "rejected"

    call = _Call(name=name, args=args, required=required, risk=risk)
    result = await pipeline.arun(call, step_id=ctx.spec.id, project_root=ctx.project_root, approvals=approvals,
                                 on_event=journal)
    record = result.model_dump(mode="json")
    engine.record_tool_result(record)
    if result.status == "blocked":
        gate_id = approval_gates[0] if approval_gates else f"tool:{name}:{ctx.spec.id}"
        engine.gates.open(gate_id, kind="tool", step_id=ctx.spec.id,
                          reason=f"{result.risk}-risk tool {name!r} needs approval", phase=ctx.spec.phase)
        raise StepBlocked(f"waiting for approval of gate {gate_id} ({result.risk}-risk tool {name!r})", gate_id)
    if result.status == "ok" and name == "recordEvidence":
        record["result"] = engine.record_evidence(ctx, dict(result.result or {}))
    if result.status != "ok" and required:
        raise ToolError(f"required tool {name!r} {result.status}: {result.error}",
                        retryable=result.status in ("error", "timeout"))
    return record
