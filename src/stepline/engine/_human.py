"""The human channel: how a question reaches a person — a terminal prompt, a simulated expert, or a blocked run.

* ``#yolo``: the executor answers as a simulated expert user (an ``answer`` request).
* interactive (a terminal, or ``hitl.mode: interactive``): the person is asked there and then.
* non-interactive: the run blocks with the question recorded as a gate; ``stepline answer RUN "…"`` records
  the answer and ``stepline resume RUN`` continues from the same call.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from stepline.engine._signals import StepBlocked
from stepline.model import EventType

if TYPE_CHECKING:
    from stepline.engine._context import StepContext

__all__ = ["HumanChannel", "Prompt", "terminal_prompt"]

#: Ask a person ``question`` (with ``choices`` when given) and return the answer.
Prompt = Callable[[str, list[str] | None], str]


def terminal_prompt(question: str, choices: list[str] | None) -> str:
    """Ask on the terminal; an answer that is not one of ``choices`` is asked again."""
    shown = f" [{'/'.join(choices)}]" if choices else ""
    while True:
        answer = input(f"{question}{shown} ").strip()
        if not choices:
            return answer
        for choice in choices:
            if answer.lower() == choice.lower():
                return choice
        print(f"Please answer one of: {', '.join(choices)}")


class HumanChannel:
    """Routes ``ask`` calls and human gates to a person, the simulated expert, or a blocked run."""

    def __init__(self, *, interactive: bool | None = None, prompt: Prompt | None = None) -> None:
        self.interactive = sys.stdin.isatty() and sys.stdout.isatty() if interactive is None else interactive
        self.prompt = prompt or terminal_prompt

    async def ask(self, ctx: StepContext, question: str, choices: list[str] | None, key: str) -> str:
        """Return the answer to ``question`` or raise :class:`StepBlocked` until someone gives it."""
        if ctx.run.mode == "yolo":
            outcome = await ctx.invoke("answer", question=question, choices=choices,
                                       title=f"answer as the user: {question}")
            return outcome.choice or outcome.summary or ""
        gate_id = f"ask:{key}"
        engine = ctx.engine
        given = engine.calls.answers.get(gate_id)
        if given is not None:
            return given
        if self.interactive and ctx.run.mode != "non-interactive":
            answer = await asyncio.to_thread(self.prompt, question, choices)
            engine.emit(EventType.ANSWER_GIVEN, {"gate_id": gate_id, "answer": answer, "by": "terminal"},
                        step_id=ctx.spec.id, sync=False)
            return answer
        engine.gates.open(gate_id, kind="question", step_id=ctx.spec.id, reason=question,
                          phase=ctx.spec.phase, choices=choices)
        raise StepBlocked(f"waiting for an answer: {question}", gate_id)

    async def confirm(self, ctx: StepContext, gate_id: str, reason: str) -> bool | None:
        """Ask a person to approve a gate in the terminal; None when nobody can be asked here."""
        if not self.interactive or ctx.run.mode == "non-interactive":
            return None
        answer = await asyncio.to_thread(self.prompt, f"Approve {gate_id}? ({reason})", ["y", "n"])
        return answer.lower() == "y"
