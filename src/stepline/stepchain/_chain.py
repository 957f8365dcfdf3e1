"""Running a chain of step files with the engine: what a micro-file workflow and an Agent Skill share.

* **Visits**: a revisited step (a "go back" option, a loop) runs as ``<step>@<n>``; more visits than
  ``runtime.max_step_visits`` fail the step instead of running forever.
* **Hand-overs**: what the executor is about to receive is journaled (path, sha256 of the file and of what was
  sent), once per invocation, also across a resume.
* **Menus** (and a halt's options) are presented and settled by the runtime: in normal mode an authored menu is
  the person's, so it is asked through the human channel (a terminal, an MCP client, else a question the run
  blocks on: exit 9, ``stepline answer``, ``resume``), unless the executor speaks for the person
  (``speaks_for_user``: the human executor, an IDE agent over MCP), whose ``finish`` choice *is* the person's
  answer and is journaled as such. In #yolo the executor answers as the user; the channel journals who
  answered. ``[A]``/``[P]`` run their side trip and the menu is presented again; ``[X]`` stops the run where it
  is; an answer that is not an option is asked again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline.engine import StepBlocked, StepContext
from stepline.errors import StepFailed
from stepline.model import EventType, Run, StepStatus
from stepline.stepchain._conditions import condition_fact
from stepline.stepchain._menus import Option, match_answer, menu_text

__all__ = ["Host", "SideTrip", "ask", "base_id", "check_visits", "choose", "entry_after", "hand_over", "leave", "move",
           "record", "recorded", "settle", "side_trip", "skip_pending", "visit_id"]

#: What a family does for an ``[A]``/``[P]`` option: hand the executor the elicitation or party-mode text.
SideTrip = Callable[[Option], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Host:
    """What a family lends the chain's runtime for one step's requests: how it renders text (its placeholders:
    a skill's ``{workflow.x}``, a workflow's ``{var}``), the hints every request carries (the run's standing
    text; ``hints(**more)`` adds to them) and the context."""

    render: Callable[[str], str]
    hints: Callable[..., dict[str, Any]]
    context: dict[str, Any]

    def fact(self, ctx: StepContext, condition: str) -> tuple[bool, str] | None:
        """``(holds, why)`` for a condition the runtime reads itself, None for prose (see :mod:`._conditions`)."""
        # normal mode has a person answering; in #yolo the executor plays the user and judges it itself
        return condition_fact(condition, self.render, ctx.project_root,
                              attended=True if ctx.run.mode == "normal" else None)


def base_id(sid: str) -> str:
    """The step a visit id is a visit of (``step-02@3`` -> ``step-02``)."""
    return sid.split("@", 1)[0]


def visit_id(run: Run, base: str) -> str:
    """``base`` for a first visit, else ``base@n`` for the n-th."""
    first = run.steps.get(base)
    if first is None or first.status == StepStatus.PENDING:
        return base
    return f"{base}@{2 + sum(1 for sid in run.steps if sid.startswith(base + '@'))}"


def check_visits(ctx: StepContext, *, why: list[str] | None = None, hint: str) -> None:
    """Fail the step when it would run more than ``runtime.max_step_visits`` times (``why``: the diagnostics
    that explain the loop)."""
    visit = int(ctx.spec.id.split("@", 1)[1]) if "@" in ctx.spec.id else 1
    limit = ctx.engine.config.runtime.max_step_visits
    if visit > limit:
        raise StepFailed(f"step {base_id(ctx.spec.id)!r} would run a {visit}th time (runtime.max_step_visits is "
                         f"{limit}): the workflow loops without reaching an end"
                         + (f"; {'; '.join(why)}" if why else ""), retryable=False, hint=hint)


def record(ctx: StepContext, name: str, op: str, args: dict[str, Any], result: Any) -> None:
    """Journal a fact of this attempt of the step under ``<step>/<attempt>/<name>`` (once: a resumed step keeps it)."""
    key = f"{ctx.spec.id}/{ctx.attempt}/{name}"
    if key not in ctx.engine.calls.recorded:
        ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": op, "args": args, "result": result})


def recorded(ctx: StepContext, name: str) -> Any:
    """What :func:`record` journaled under ``name`` for this attempt (a resumed step keeps its decisions), or None."""
    entry = ctx.engine.calls.recorded.get(f"{ctx.spec.id}/{ctx.attempt}/{name}")
    return entry["result"] if entry is not None else None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hand_over(ctx: StepContext, role: str, path: Path, raw: str, sent: str, **extra: Any) -> None:
    """Journal what the executor is about to receive: the file, its hash and the hash of the text sent."""
    entry = {"role": role, "path": str(path), "sha256": _sha(raw), "sent_sha256": _sha(sent), **extra}
    ctx.handed_over.append(entry)
    record(ctx, f"handover/{ctx.invocations}", "handover", {"path": str(path), "role": role}, entry)


def skip_pending(ctx: StepContext, reason: str, only: set[str] | None = None) -> None:
    """Skip the steps not run yet (or those of ``only``): the chain did not lead there."""
    for spec in ctx.run.workflow.steps:
        step = ctx.run.steps.get(spec.id)
        if spec.id != ctx.spec.id and (step is None or step.status == StepStatus.PENDING) and (
                only is None or spec.id in only):
            ctx.engine.emit(EventType.STEP_SKIPPED, {"reason": reason}, step_id=spec.id)


def move(ctx: StepContext, following: str | None, **why: Any) -> str | None:
    """Set the run's cursor to the next visit of ``following``. At the end of a chain (None) that a route or a
    hand-over led into — or at the end of a step a route called (``Run `## Reviewer Gate```), whatever its own next
    — the run goes back where that route returns (the step that routed, after the route; or the step after it);
    else the steps off the path are skipped. The visit, or None when the run's chain ends."""
    returns = list(ctx.run.cursor.get("returns") or [])
    after = None
    if (following is None or _entry(ctx)["call"]) and returns:
        back = returns.pop()
        following, after = str(back["step"]), back.get("after")
        why = {**why, "returned": True}
    visit = visit_id(ctx.run, following) if following else None
    ctx.emit(EventType.CURSOR_MOVED, {"next": visit, "from": ctx.spec.id, "returns": returns, "continue_after": after,
                                      "call": False, **why})
    if visit is None:
        skip_pending(ctx, "not on the path this run took")
    return visit


def leave(ctx: StepContext, target: str, *, back: str | None, after: int | None, call: bool = False,
          **why: Any) -> None:
    """Go to step ``target`` (a route's file, a handed-over skill) and, when its chain ends, to ``back`` (None: where
    the chain that led here returns) — from its ``after``-th point on, a step continued (None: from its start).
    ``call``: ``target`` is one step that returns when it ends, whatever its own next (a section a route runs)."""
    returns = list(ctx.run.cursor.get("returns") or [])
    if back is not None:
        returns.append({"step": base_id(back), "after": after})
    ctx.emit(EventType.CURSOR_MOVED, {"next": visit_id(ctx.run, target), "from": ctx.spec.id, "returns": returns,
                                      "continue_after": None, "call": call, **why})


def _entry(ctx: StepContext) -> dict[str, Any]:
    """How this visit was entered: ``after`` (how many of its points a visit continued after a route or hand-over
    has behind it; 0: it starts afresh) and ``call`` (a route called it: it returns when it ends). Read from the
    cursor that led here and journaled with the visit, so a resumed visit is entered the same way."""
    key = f"{ctx.spec.id}/entry"
    entry = ctx.engine.calls.recorded.get(key)
    if entry is not None:
        return dict(entry["result"])
    cursor = ctx.run.cursor
    here = cursor.get("next") == ctx.spec.id
    found = {"after": int(cursor.get("continue_after") or 0) if here else 0, "call": bool(cursor.get("call")) and here}
    if found["after"] or found["call"]:
        ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": "entry", "args": {}, "result": found})
    return found


def entry_after(ctx: StepContext) -> int:
    """How many of its points a visit continued after a route or hand-over has behind it (0: it starts afresh)."""
    return int(_entry(ctx)["after"])


def _check_rounds(ctx: StepContext, round_no: int) -> None:
    limit = ctx.engine.config.runtime.max_step_visits
    if round_no >= limit:
        raise StepFailed(f"step {ctx.spec.id!r}: {round_no} menu rounds without moving on "
                         f"(runtime.max_step_visits is {limit})", retryable=False,
                         hint="the executor keeps choosing options that return to the menu")


async def ask(ctx: StepContext, options: list[Option], *, executor: bool, round_no: int, hints: dict[str, Any],
              note: str = "", proposal: str | None = None, name: str = "menu") -> str | None:
    """One round of a menu: the executor's proposal, a ``choose`` request, or the human channel.

    For a person's menu (``executor`` False), a ``proposal`` is the person's own choice, given through an
    executor that speaks for them (:attr:`Executor.speaks_for_user`): it is journaled as the answer, exactly as
    if typed at the prompt, instead of asking the same menu twice.
    """
    question = (note + " " if note else "") + menu_text(options)
    if executor:
        if proposal is not None:
            return proposal
        outcome = await ctx.invoke("choose", question=question, menu=[o.as_menu_option() for o in options],
                                   content=question, hints=hints)
        return outcome.choice
    key = f"{ctx.spec.id}/{ctx.attempt}/{name}/{round_no}"
    speaker = ctx.engine.executor
    if proposal is not None and speaker.speaks_for_user:
        ctx.engine.human.record(ctx, key, proposal, by=speaker.name or "executor")
        return proposal
    return await ctx.engine.human.ask(ctx, question, [o.key for o in options], key,
                                      menu=[o.as_menu_option() for o in options], hints=hints)


async def choose(ctx: StepContext, options: list[Option], *, hints: dict[str, Any], name: str,
                 note: str = "") -> Option:
    """Ask the person (in #yolo the executor as the user) to pick one of ``options``, until an answer is one;
    ``note`` leads the question (what the options are about)."""
    said = note
    round_no = 0
    while True:
        _check_rounds(ctx, round_no)
        answer = await ask(ctx, options, executor=False, round_no=round_no, note=said, hints=hints, name=name)
        chosen = match_answer(answer, options)
        if chosen is not None:
            return chosen
        said = f"{answer!r} is not one of the options. {note}".strip()
        round_no += 1


async def settle(ctx: StepContext, options: list[Option], *, executor: bool, proposal: str | None,
                 hints: dict[str, Any], side_trip: SideTrip, context: dict[str, Any]) -> Option:
    """Present the menu until an option that moves on is chosen; act on the others and ask again. Each answer
    is journaled (by the human channel, with who gave it) and the settled choice with the options presented."""
    note = ""
    round_no = 0
    while True:
        _check_rounds(ctx, round_no)
        answer = await ask(ctx, options, executor=executor, round_no=round_no, note=note, hints=hints,
                           proposal=proposal if round_no == 0 else None)
        chosen = match_answer(answer, options)
        round_no += 1
        note = ""
        if chosen is None:
            note = f"{answer!r} is not one of the options."
            continue
        record(ctx, f"menu-choice/{round_no}", "menu", {"options": [f"[{o.key}] {o.label}" for o in options]},
               {"choice": chosen.key, "by": _who(ctx, executor)})
        kind = chosen.route.kind
        if kind == "goto":
            return chosen
        if kind in ("elicit", "party"):
            await side_trip(chosen)
        elif kind == "local":
            await ctx.invoke("work", title=f"[{chosen.key}] {chosen.label}",
                             content=f"The user chose [{chosen.key}] {chosen.label}. {chosen.handler}".strip(),
                             context=context, hints=hints)
        else:
            key = f"{ctx.spec.id}/{ctx.attempt}/exit/{round_no}"
            if key not in ctx.engine.calls.recorded:  # a resumed run shows the menu again instead
                record(ctx, f"exit/{round_no}", "exit", {"choice": chosen.key}, None)
                raise StepBlocked(f"exited at [{chosen.key}] {chosen.label}; `stepline resume "
                                  f"{ctx.run.run_id}` (or running the workflow again) continues here")


async def side_trip(ctx: StepContext, option: Option, path: Path, text: str, content: str, *,
                    context: dict[str, Any], hints: dict[str, Any]) -> None:
    """``[A]``/``[P]``: hand the executor the advanced-elicitation or party-mode text (``text`` read from
    ``path``, ``content`` as rendered; journaled), then the caller presents the menu again."""
    elicit = option.route.kind == "elicit"
    hand_over(ctx, "advanced-elicitation" if elicit else "party-mode", path, text, content)
    await ctx.invoke("work", title=f"{option.label} — {ctx.spec.name or ctx.spec.id}", content=content,
                     context={**context, "workflow": str(path), "handler": option.handler}, hints=hints)


def _who(ctx: StepContext, executor: bool) -> str:
    """Who answered a menu: the executor (its own menu, or as the user in #yolo) or the person."""
    if executor or ctx.run.mode == "yolo":
        return "executor"
    return ctx.engine.executor.name if ctx.engine.executor.speaks_for_user else "person"
