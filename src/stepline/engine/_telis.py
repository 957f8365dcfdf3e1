"""The engine's side of TELIS context (SPEC R-C1): resolve a step's context before its executor runs, journal
it, replay it on resume, report drift.

A step that asks for context (its ``telis_*`` inputs, or a ``telis.inputs`` rule of the runtime config) gets
it resolved once per attempt and journaled whole (``ContextResolved``) before the executor sees it; the fold
puts it on the RunStep (``telis_context``), and every request of the step carries it. A resumed attempt never
resolves again: it gets the journaled context, the same fingerprint, even if a source changed since — and
then a ``ContextDrift`` event names each changed source. A new resolution whose source differs from when that
source was last used (an earlier step, attempt or run) is drift too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepline.model import EventType

if TYPE_CHECKING:
    from stepline.context import ContextResolver
    from stepline.engine._context import StepContext
    from stepline.engine._runner import Engine

__all__ = ["close_context", "resolve_step_context"]


async def resolve_step_context(engine: Engine, ctx: StepContext) -> None:
    """Give ``ctx``'s step its context: the journaled one of this attempt, or a new resolution (journaled)."""
    recorded = ctx.step.telis_context
    if recorded is not None and recorded.get("attempt") == ctx.attempt:
        resolver = _resolver(engine)
        changed = resolver.changed_sources(recorded)
        # What the step uses is the recorded context: its sources' digests are the ones last used.
        resolver.note_sources(recorded, run_id=ctx.run.run_id, step_id=ctx.spec.id)
        if changed:
            ctx.emit(EventType.CONTEXT_DRIFT, {"fingerprint": recorded.get("fingerprint"), "replayed": True,
                                               "sources": changed})
        return
    from stepline.context import request_for_step

    spec, workflow = ctx.spec, ctx.run.workflow
    if not engine.config.telis.inputs and not any(key.startswith("telis_") for key in spec.inputs):
        return  # the common case, decided without building anything
    request = request_for_step(
        {"id": spec.id, "name": spec.name, "description": spec.description, "phase": spec.phase,
         "inputs": spec.inputs, "outputs": spec.outputs, "meta": spec.meta},
        {"id": workflow.id, "name": workflow.name, "description": workflow.description, "format": workflow.format,
         "meta": workflow.meta, "variables": workflow.variables},
        ctx.variables, engine.config.telis, render=ctx.render, project_root=engine.project_root)
    if request is None:
        return
    resolver = _resolver(engine)
    context: dict[str, Any] = {**await resolver.resolve(request), "attempt": ctx.attempt}
    changed = resolver.note_sources(context, run_id=ctx.run.run_id, step_id=spec.id)
    ctx.emit(EventType.CONTEXT_RESOLVED, {"context": context, "fingerprint": context["fingerprint"]})
    if changed:
        ctx.emit(EventType.CONTEXT_DRIFT, {"fingerprint": context["fingerprint"], "replayed": False,
                                           "sources": changed})


def _resolver(engine: Engine) -> ContextResolver:
    """The run's resolver, made on first use (a run that asks for no context never builds one)."""
    if engine.telis is None:
        from stepline.context import ContextResolver

        state = (engine.project_root / engine.config.runtime.storage_root).parent / "telis-sources.json"
        engine.telis = ContextResolver(engine.project_root, engine.config.telis, state_path=state)
    return engine.telis


async def close_context(engine: Engine) -> None:
    """Shut the run's language servers down (with the run) and keep the sources' digests for the next run."""
    resolver, engine.telis = engine.telis, None
    if resolver is not None:
        await resolver.aclose()
