"""The native step driver: a native step is one ``work`` request to the executor."""

from __future__ import annotations

from stepline.engine import StepContext, register_driver

__all__ = ["run_native_step"]


async def run_native_step(ctx: StepContext) -> None:
    """Hand the step's rendered body to the executor as one ``work`` request."""
    outcome = await ctx.invoke("work", content=ctx.render(ctx.spec.body),
                               hints={"output": bool(ctx.spec.outputs), "outputs": ctx.spec.outputs})
    ctx.step.summary = outcome.summary
    ctx.step.choice = outcome.choice


register_driver("native", run_native_step)
