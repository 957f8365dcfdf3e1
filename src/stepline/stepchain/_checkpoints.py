"""Running a step file's checkpoints: ``HALT and ask human: `[A] Approve` | `[E] Edit``` (read by
:mod:`stepline.stepchain._stops`).

A checkpoint is asked by the runtime after the step's work — of the person (terminal, MCP relay, else a question
gate the run blocks on), in #yolo of the executor as the user — and the executor then does what the step says for
the choice (``- **E**: …, then return to CHECKPOINT`` asks again). A checkpoint nested under a condition is asked
only when it holds: decided by the runtime when it can read it (:mod:`stepline.stepchain._conditions`), else by what
the executor said in the finish of the step's work, else by a ``decide`` request; journaled
(``checkpoint-condition``) with the reason and who decided. One turn per step: the step's work request asks for its
first stop in its ``finish`` choice (``line N: stop``; in #yolo ``line N: [K]``, the model answering as the user),
so neither the ``decide`` nor the ``answer`` request is sent when the executor says; an option's handler that only
moves on (``Continue to checkpoint``) is no request.
"""

from __future__ import annotations

import re

from stepline.engine import StepContext
from stepline.errors import StepFailed
from stepline.stepchain._chain import Host, ask, record, recorded
from stepline.stepchain._menus import Option, Route, match_answer
from stepline.stepchain._routes import Routes, routes_text
from stepline.stepchain._stops import Checkpoint

__all__ = ["checkpoint_applies", "handler_has_work", "run_checkpoint", "said_stops", "stop_choices", "stops_offered",
           "stops_text"]


#: A sentence of a checkpoint option's handler that only moves on (``Continue to checkpoint with full spec``,
#: ``→ Step 3``, ``then return to CHECKPOINT 1``): the runtime does it; the rest of a handler is the model's work.
_MOVE_ON = re.compile(r"^(?:(?:then|and)\s+)?(?:→|->|(?:continue|proceed|return|go(?: back)?|move on|loop back|skip)\b"
                      r"(?:.*\b(?:checkpoint|step|next|menu)\b.*)?$)", re.I)


def handler_has_work(handler: str) -> bool:
    """Whether a checkpoint option's handler asks for work beyond moving on (a handler that only continues,
    returns to the checkpoint or names the next step costs no request)."""
    body = re.sub(r"^\s*[-*]\s*(?:\*\*)?\[?\w\]?(?:\*\*)?\s*:\s*", "", handler.strip())
    sentences = [p.strip(" .*_`") for p in re.split(r"(?<=[.;!])\s+|,\s*then\s+|\n+", body)]
    return any(p and not _MOVE_ON.match(p) for p in sentences)


def stops_offered(ctx: StepContext, host: Host, checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints the step's work request asks about in its ``finish`` (so a step costs one turn): each
    conditional one the runtime cannot read now, up to the first unconditional one; in #yolo, where the model
    answers as the user, that unconditional one too (its option is the answer)."""
    offered = []
    for checkpoint in checkpoints:
        if checkpoint.condition is None:
            if ctx.run.mode == "yolo":
                offered.append(checkpoint)
            break
        if host.fact(ctx, checkpoint.condition) is None:
            offered.append(checkpoint)
    return offered


def stop_choices(ctx: StepContext, offered: list[Checkpoint]) -> list[str]:
    """The ``finish`` choices that name the step's first stop: ``line N: [K]`` (#yolo: the checkpoint stops and,
    as the user, you choose K) or ``line N: stop`` (the person is asked); the unconditional checkpoint's first."""
    ordered = sorted(offered, key=lambda c: c.condition is not None)
    if ctx.run.mode == "yolo":
        return [f"line {c.line}: [{key}]" for c in ordered for key, _ in c.options]
    return [f"line {c.line}: stop" for c in ordered]


def stops_text(ctx: StepContext, offered: list[Checkpoint], plain: str) -> str:
    """The part of the step's work request that asks for its first stop in the ``finish`` (``plain``: the choice
    that says no checkpoint stops, or None when one always does)."""
    lines = []
    for c in offered:
        options = " | ".join(f"[{k}] {label}" for k, label in c.options)
        lines.append(f"- line {c.line} ({options})" + (f" stops only if: {c.condition}" if c.condition else
                                                          " always stops"))
    answer = ("This run is unattended: answer as the user would, in the same finish — choose "
              "`line <line>: [<key>]`, the checkpoint that stops first and the option you choose there (the runtime "
              "then has its handler done)." if ctx.run.mode == "yolo" else
              "Choose `line <line>: stop` for the first one whose condition holds (the runtime then asks the person).")
    return ("\n\n## Checkpoints (say in your finish)\n" + "\n".join(lines) + "\n" + answer +
            (f" If none stops, choose {plain}." if plain else ""))


def said_stops(choice: str | None, offered: list[Checkpoint]) -> dict[int, tuple[bool, str | None, str]]:
    """What the work request's ``finish`` choice says of each offered checkpoint: ``line -> (stops, option key,
    why)``. A named checkpoint stops (the conditional ones before it do not); any other choice (a route, the
    plain one) says none stops; no choice says nothing."""
    if not choice or not offered:
        return {}
    match = re.fullmatch(r"line (\d+): (?:\[(\w+)\]|stop)", choice.strip())
    said: dict[int, tuple[bool, str | None, str]] = {}
    for c in offered:
        if match is None:
            if c.condition is not None:
                said[c.line] = False, None, f"the executor's finish of the step's work chose {choice!r}, no stop"
            continue
        if c.line == int(match[1]):
            said[c.line] = True, match[2], f"the executor's finish of the step's work chose {choice!r}"
            break
        if c.condition is not None:
            said[c.line] = False, None, f"the executor's finish named a later stop ({choice!r})"
    return said


async def checkpoint_applies(ctx: StepContext, host: Host, checkpoint: Checkpoint,
                              said: tuple[bool, str | None, str] | None = None) -> bool:
    """Whether a conditional checkpoint stops for the person: the runtime decides a condition it can read, else
    what the executor ``said`` in the finish of the step's work, else the executor's ``decide``; journaled with
    the reason and who decided."""
    name = str(ctx.spec.meta["file"])
    assert checkpoint.condition is not None
    earlier = recorded(ctx, f"checkpoint/{checkpoint.line}/condition")
    if isinstance(earlier, dict):  # decided before the run was interrupted: the same decision
        return bool(earlier["holds"])
    fact = host.fact(ctx, checkpoint.condition)
    if fact is not None:
        holds, reason = fact[0], f"{fact[1]}: {'holds' if fact[0] else 'does not hold'}"
        by = "runtime"
    elif said is not None:
        holds, reason, by = said[0], said[2], "executor"
    else:
        outcome = await ctx.invoke(
            "decide", title=f"checkpoint at {name}:{checkpoint.line}?", condition=checkpoint.condition,
            content=(f"You performed step {name}. Its checkpoint at line {checkpoint.line} (" +
                     " | ".join(f"[{k}] {label}" for k, label in checkpoint.options) +
                     ") stops for the person only if the condition below holds. Does it hold now?"),
            hints=host.hints(default=False), context=host.context)
        holds, reason, by = bool(outcome.decision), outcome.reason or "the executor's decision", "executor"
    record(ctx, f"checkpoint/{checkpoint.line}/condition", "checkpoint-condition",
            {"line": checkpoint.line, "condition": checkpoint.condition}, {"holds": holds, "reason": reason, "by": by})
    return holds


async def run_checkpoint(ctx: StepContext, host: Host, checkpoint: Checkpoint, proposal: str | None,
                      offered: Routes | None = None, said: str | None = None) -> str | None:
    """Present a step's checkpoint to the person (in #yolo the executor answers as the user) and have the
    executor do what the step says for the choice; an option that returns to the checkpoint asks again."""
    name = str(ctx.spec.meta["file"])
    options = [Option(key, label, Route("goto", None), default=i == 0)
               for i, (key, label) in enumerate(checkpoint.options)]
    where = f"{name}:{checkpoint.line}:"
    note = where
    for round_no in range(ctx.engine.config.runtime.max_step_visits):
        if round_no == 0 and said is not None and ctx.run.mode == "yolo" and \
                match_answer(said, options) is not None:  # answered as the user in the step's own finish
            key = f"{ctx.spec.id}/{ctx.attempt}/checkpoint/{checkpoint.line}/{round_no}"
            ctx.engine.human.record(ctx, key, said, by=ctx.engine.executor.name or "executor")
            answer: str | None = said
        else:  # the person's own choice, when their executor brought it with the step's work, is not asked again
            mine = proposal if round_no == 0 and ctx.run.mode != "yolo" and \
                match_answer(proposal, options) is not None else None
            answer = await ask(ctx, options, executor=False, round_no=round_no, hints=host.hints(), note=note,
                               proposal=mine, name=f"checkpoint/{checkpoint.line}")
        picked = match_answer(answer, options)
        if picked is None:
            note = f"{where} {answer!r} is not one of the options."
            continue
        chosen = (picked.key, picked.label)
        handler = checkpoint.handlers.get(chosen[0], "")
        record(ctx, f"checkpoint/{checkpoint.line}/{round_no}", "checkpoint", {"line": checkpoint.line},
                {"choice": chosen[0], "by": "executor" if ctx.run.mode == "yolo" else "person",
                 **({"asked": "in the finish of the step's work"} if answer is said else {}),
                 **({"handler": "moves on only: no request"} if handler and not handler_has_work(handler) else {})})
        ctx.step.choice = chosen[0]
        route: str | None = None
        # the step's last word so far: it names where the step leaves, when routes are offered
        if handler and handler_has_work(handler):
            outcome = await ctx.invoke(
                "work", title=f"[{chosen[0]}] {chosen[1]} at {name}:{checkpoint.line}",
                content=f"At {name}:{checkpoint.line} the person chose [{chosen[0]}] {chosen[1]}. Do what the step "
                        f"says for it:\n\n{host.render(handler)}" + (routes_text(ctx, offered) if offered else ""),
                context=host.context, hints=host.hints(),
                choices=["next", *(r[0]["file"] for r in offered.values())] if offered else None)
            route = outcome.choice
        if "return to checkpoint" not in handler.lower():
            return route
        note = where
    raise StepFailed(f"{name}:{checkpoint.line}: the checkpoint was not passed in "
                     f"{ctx.engine.config.runtime.max_step_visits} rounds", retryable=False,
                     hint="choose an option that moves on, or raise runtime.max_step_visits")
