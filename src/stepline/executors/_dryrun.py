"""The ``dry-run`` executor: deterministic placeholders, default branches, ``[C]`` — proves a workflow's structure."""

from __future__ import annotations

from typing import Any

from stepline.executors._base import Executor
from stepline.executors._protocol import StepRequest, StepSession

__all__ = ["DryRunExecutor", "default_choice"]


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


class DryRunExecutor(Executor):
    """Answers every request the same way every time, without a model."""

    name = "dry-run"
    pure = True

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = options or {}

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Fill the request with a placeholder that names the step, so outputs show where each part came from."""
        if request.kind == "decide":
            default = bool(request.hints.get("default", False))
            await session.decide(default, "dry-run takes the default branch")
            return
        if request.kind == "generate":
            await session.write_output(f"[dry-run] {request.section} — {request.title}\n",
                                       section=request.section, mode="section")
            await session.finish(summary=f"generated {request.section}")
            return
        if request.kind == "answer":
            answer = default_choice(request) or f"[dry-run answer] {request.question or ''}".strip()
            await session.finish(choice=answer, summary=answer)
            return
        if request.hints.get("output"):
            await session.write_output(f"[dry-run] {request.title}\n")
        await session.finish(choice=default_choice(request), summary=f"dry-run: {request.title}")
