"""The human channel: how a question reaches a person — a terminal prompt, a relay, a simulated expert, or a
blocked run.

* ``#yolo``: the executor answers as a simulated expert user (an ``answer`` request).
* a relay (the MCP server: the person is behind the IDE agent): the question is published and the call waits
  for the answer the relay brings back (``answer`` over MCP).
* interactive (a terminal, or ``hitl.mode: interactive``): the person is asked there and then.
* non-interactive: the run blocks with the question recorded as a gate; ``stepline answer RUN "…"`` records
  the answer and ``stepline resume RUN`` continues from the same call.

Every answer a person gives is journaled the same way (``AnswerGiven`` for gate ``ask:<key>``, with who gave
it), so a resumed step never asks again. An answer a person already gave through the executor (the menu choice
a human or an IDE agent passed with ``finish``) is journaled with :meth:`HumanChannel.record` instead of asked.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from stepline.engine._signals import StepBlocked
from stepline.executors import MenuOption, ask_in_thread, match_answer, menu_text, options_named, terminal_input
from stepline.model import EventType, GateChoice

if TYPE_CHECKING:
    from stepline.engine._context import StepContext

__all__ = ["HumanChannel", "Prompt", "Question", "Relay", "terminal_prompt"]

#: Ask a person ``question`` (with ``choices`` when given) and return the answer.
Prompt = Callable[[str, list[str] | None], str]


@dataclass(frozen=True, slots=True)
class Question:
    """A question waiting for a person, as a relay publishes it.

    ``menu`` holds the options when the question is a step's menu (``choices`` are then their keys).
    """

    run_id: str
    step_id: str
    gate_id: str
    question: str
    choices: list[str] | None = None
    menu: list[MenuOption] = field(default_factory=list)


#: Hand ``Question`` to a person somewhere else and return their answer and who gave it (``"mcp"``).
Relay = Callable[[Question], Awaitable[tuple[str, str]]]


def terminal_prompt(question: str, choices: list[str] | None, *, read: Callable[[str], str] = input,
                    step: str = "", menu: Sequence[MenuOption] = ()) -> str:
    """Ask on the terminal: the ``step`` that asks, the question, a menu's options one per line (the default
    marked: Enter takes it, and only when there is one; the side trips said), then one line from ``read``. An
    answer that is not an option (:func:`match_answer`) is asked again; a menu's answer is its option's key."""
    options: list[MenuOption] = list(menu) or [MenuOption(key=choice, label="") for choice in choices or ()]
    default = next((o.key for o in menu if o.default), None)
    lead = question.removesuffix(menu_text(menu)).strip().rstrip(":") if menu else question
    if menu:
        lines = [f"{step} asks:" if step else "", f"  {lead}" if lead else "",
                 *(f"  [{o.key}] {o.label}" + ("   (default: Enter)" if o.key == default else "") for o in menu)]
        trips = [o for o in menu if o.side_trip]
        if trips:
            said = " and ".join(f"[{o.key}] {o.label}" for o in trips)
            lines.append(f"  {said} {'is a side trip' if len(trips) == 1 else 'are side trips'}: this menu comes "
                         "back after")
        print("\n".join(line for line in lines if line))
        ask = "> "
    else:
        keys = f" [{'/'.join(o.key for o in options)}]" if options else ""
        ask = f"{step}: {question}{keys} " if step else f"{question}{keys} "
    while True:
        answer = read(ask).strip()
        if not options:
            return answer
        if not answer and default is not None:
            return default
        matched = match_answer(answer, options)
        if matched is not None:
            return matched.key
        print(f"{answer!r} is not an option; answer one of: {options_named(options)}"
              + (" (Enter: " + default + ")" if default else ""))


#: Where a question stands, when it says so first (``step-01.md:12: Confirm …``).
_WHERE = re.compile(r"([^\s:]+:\d+): ")


class HumanChannel:
    """Routes ``ask`` calls and human gates to a person, the simulated expert, or a blocked run."""

    def __init__(self, *, interactive: bool | None = None, prompt: Prompt | None = None,
                 relay: Relay | None = None) -> None:
        self.interactive = sys.stdin.isatty() and sys.stdout.isatty() if interactive is None else interactive
        #: Set when a run is interrupted at the terminal prompt: the prompt's wait gives up (see terminal_input).
        self._stop = threading.Event()
        #: How a person is asked here; None: :func:`terminal_prompt` on this terminal (it names the step and shows
        #: a menu's options one per line).
        self.prompt = prompt
        #: Where questions go when the person is not at this terminal (the MCP server's agent); approvals
        #: (:meth:`confirm`) never go there: they stay gates, decided with ``decide_gate``.
        self.relay = relay

    async def ask(self, ctx: StepContext, question: str, choices: list[str] | None, key: str, *,
                  menu: list[MenuOption] | None = None, hints: dict[str, Any] | None = None) -> str:
        """Return the answer to ``question`` or raise :class:`StepBlocked` until someone gives it.

        ``menu``: the options, when the question is a step's menu (``choices`` are their keys); a relay shows them.
        ``hints``: the request's hints when the executor answers as the user (#yolo), e.g. the run's standing text.
        """
        if ctx.run.mode == "yolo":  # titled by where the question stands (``step.md:12``): the request says it once
            where = _WHERE.match(question)
            outcome = await ctx.invoke("answer", question=question, choices=choices, hints=hints,
                                       title="answer as the user" + (f": {where[1]}" if where else ""))
            return outcome.choice or outcome.summary or ""
        gate_id = f"ask:{key}"
        engine = ctx.engine
        given = engine.calls.answers.get(gate_id)
        if given is not None:
            return given
        if self.relay is not None and ctx.run.mode != "non-interactive":
            engine.journal_sync()  # the question leaves the process: what led to it is durable first
            answer, by = await self.relay(Question(run_id=ctx.run.run_id, step_id=ctx.spec.id, gate_id=gate_id,
                                                   question=question, choices=choices, menu=list(menu or [])))
            _journal_answer(ctx, gate_id, answer, by)
            return answer
        if self.interactive and ctx.run.mode != "non-interactive":
            answer = await self._at_terminal(ctx, question, choices, menu or [])
            _journal_answer(ctx, gate_id, answer, "terminal")
            return answer
        offered = [GateChoice(key=o.key, label=o.label) for o in menu] if menu else \
            [GateChoice(key=choice) for choice in choices or ()]
        engine.gates.open(gate_id, kind="question", step_id=ctx.spec.id, reason=question,
                          phase=ctx.spec.phase, choices=offered)
        raise StepBlocked(f"waiting for an answer: {question}", gate_id)

    def record(self, ctx: StepContext, key: str, answer: str, *, by: str) -> None:
        """Journal ``answer`` to the question ``key`` as given by a person through the executor (``by``): the
        same record as a terminal answer, so the question is never asked (and a resumed step reads it)."""
        gate_id = f"ask:{key}"
        if ctx.engine.calls.answers.get(gate_id) != answer:
            _journal_answer(ctx, gate_id, answer, by)

    async def confirm(self, ctx: StepContext, gate_id: str, reason: str) -> bool | None:
        """Ask a person to approve a gate in the terminal; None when nobody can be asked here."""
        if not self.interactive or ctx.run.mode == "non-interactive":
            return None
        answer = await self._at_terminal(ctx, f"Approve {gate_id}? ({reason})", ["y", "n"])
        return answer.lower() == "y"

    async def _at_terminal(self, ctx: StepContext, question: str, choices: list[str] | None,
                           menu: Sequence[MenuOption] = ()) -> str:
        """The prompt's answer, asked in a thread that Ctrl-C does not wait for (it stops the run at once)."""
        step = ctx.spec.id + (f" ({ctx.spec.name})" if ctx.spec.name and ctx.spec.name != ctx.spec.id else "")
        ask = partial(self.prompt, question, choices) if self.prompt is not None else \
            partial(terminal_prompt, question, choices, read=partial(terminal_input, stop=self._stop), step=step,
                    menu=menu)
        return await ask_in_thread(ask, self._stop, run_id=ctx.run.run_id, step_id=ctx.spec.id)


def _journal_answer(ctx: StepContext, gate_id: str, answer: str, by: str) -> None:
    """Journal a person's answer; a question gate left open by an earlier blocked attempt is decided with it."""
    engine = ctx.engine
    gate = engine.gates.get(gate_id)
    if gate is not None and gate.status == "pending":
        engine.record_decision(gate_id, approved=True, by=by, notes=None, answer=answer)
        return
    engine.emit(EventType.ANSWER_GIVEN, {"gate_id": gate_id, "answer": answer, "by": by}, step_id=ctx.spec.id,
                sync=False)
