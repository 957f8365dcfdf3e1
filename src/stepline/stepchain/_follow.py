"""Following a step's plan: every point where its text hands the turn to the person, in the text's order.

A step whose text has points (:mod:`stepline.stepchain._plan`) runs as turns. A turn is one ``work`` request: the
executor does the step's work up to the next point that applies and says where it stopped (the points under a
condition before the next one that always applies are offered together, the finish naming the first that holds: one
turn per stop). The point is asked by the executor's own ``ask`` during that request, which counts, or else by the
runtime with the point's question and its options through the human channel (a terminal prompt; exit 9, ``stepline
answer`` and ``resume``; MCP ``waiting_for_answer``). In #yolo the executor answers as the user: in the finish of
the turn that stops at the point (``line N: <answer>``), else in an ``answer`` request of its own. Each answer is
journaled with who gave it and handed to the next turn; the family's own last request does the rest of the step.

* a **choice** is answered with one of its options (:func:`~stepline.stepchain._menus.match_answer`, the one
  matcher); another answer is asked again;
* a **confirmation** is answered yes or no (the next turn acts on a no, as the text says);
* a **conversation loop** goes on, a turn and a question at a time, until the person's answer ends it;
* a point under a **condition** is asked when it holds: the runtime reads it when it can, else the turn's finish
  names it (or ``none``); a finish that names none of them stops at the first question (asking is the safe side);
* a **route** or **hand-over** the family follows ends the turns there: the step leaves for its target.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stepline.engine import StepContext
from stepline.errors import StepFailed
from stepline.executors import REPEATED_HINT, with_notes
from stepline.stepchain._chain import ask, choose, entry_after, leave, record
from stepline.stepchain._menus import Option, Route, match_answer
from stepline.stepchain._plan import Point, PointKind

__all__ = ["PERSON_KINDS", "Answer", "Followed", "Turn", "follow", "follow_or_leave", "person_points"]

#: the kinds of point that hand the turn to the person (an unclassified sentence is the plan's to show, not asked:
#: the executor asks it if it is a question)
PERSON_KINDS = frozenset({PointKind.QUESTION, PointKind.CHOICE, PointKind.CONFIRM, PointKind.LOOP})
_LEAVES = frozenset({PointKind.ROUTE, PointKind.HANDOVER})
_ENDS_LOOP = re.compile(r"^\W*(?:done|i'?m done|we'?re done|finish(?:ed)?|end|stop|exit|quit|enough|that'?s (?:all|it)|"
                        r"no more|nothing (?:else|more)|move on|let'?s move on|next)\W*$", re.I)
_QUOTED = re.compile(r"[\"“'`]([^\"”'`]{1,30})[\"”'`]")
#: a point's condition that is the other case of the one before it: ``Otherwise ask for what's missing``
_OTHERWISE = re.compile(r"(?i)\W*(?:otherwise|else)\b")
_CONFIRM_OPTIONS = (Option("Y", "Yes", Route("local"), default=True), Option("N", "No", Route("local")))


@dataclass(frozen=True, slots=True)
class Answer:
    """A point and the answer it got, and who gave it (the person, the executor in #yolo, or the executor's own
    ``ask``)."""

    point: Point
    answer: str
    by: str

    def line(self) -> str:
        """One line for the next turn: where, what was asked, what was answered."""
        return f"- line {self.point.line} ({self.point.kind.value}: {self.point.text[:160]}): {self.answer}"


@dataclass(frozen=True, slots=True)
class Turn:
    """What a family gives the follower: the step's text as the executor gets it, its request's title, context
    and hints, how to render a point's text, and how to read a condition (``(holds, why)``, None: prose only the
    executor can judge)."""

    content: str
    title: str
    context: dict[str, Any]
    hints: dict[str, Any]
    render: Callable[[str], str]
    fact: Callable[[str], tuple[bool, str] | None] = lambda _condition: None


@dataclass(slots=True)
class Followed:
    """What following a step's points came to: the answers, the route or hand-over taken (None: none, the step's
    work goes on to its end), the line up to which the work was done in turns (0: none was), and how many of the
    points are behind."""

    answers: list[Answer] = field(default_factory=list)
    leave: Point | None = None
    done_to: int = 0
    taken: int = 0

    def rest(self, content: str) -> str:
        """The step's last request: ``content``, then the note of which part the turns did and what the person
        answered (after the step's text, which the turns sent too: a provider serves it from its cache)."""
        if not self.done_to:
            return content
        answers = "".join(f"\n{a.line()}" for a in self.answers)
        return with_notes(content, f"The work of this step up to line {self.done_to} is done (earlier requests); do "
                                   "the rest of the step, after it, and do not ask those points again."
                                   + (f" The person's answers:{answers}" if answers else ""))

    def hints(self, hints: dict[str, Any]) -> dict[str, Any]:
        """``hints`` for the step's last request: marked as repeating the step's text when turns sent it before."""
        return {**hints, REPEATED_HINT: True} if self.done_to else hints


def person_points(points: tuple[Point, ...] | list[Point]) -> list[Point]:
    """The points that hand the turn to the person."""
    return [p for p in points if p.kind in PERSON_KINDS]


async def follow(ctx: StepContext, points: list[Point], turn: Turn, *,
                 leads_to: Callable[[Point], str | None] = lambda _point: None, after: int = 0) -> Followed:
    """Follow ``points`` (in text order, from the ``after``-th on: a step continued after a route) as turns (see the
    module doc). ``leads_to`` names the step a route or hand-over goes to (None: the family does not follow it
    here). A route or hand-over taken ends the turns: :attr:`Followed.leave` is it, :attr:`Followed.taken` the
    number of points done with it.

    A resumed step replays its journaled turns and answers: nothing is asked twice. With the human executor the
    person does the step's work: its questions are theirs as they go (its routes and hand-overs are followed).
    """
    followed = Followed(done_to=points[after - 1].line if 0 < after <= len(points) else 0, taken=after)
    index = after
    while True:
        window = await _window(ctx, points, index, turn, leads_to)
        if not window:
            followed.taken = len(points)
            return followed
        chosen, asked, given = await _stop(ctx, points, window, turn, followed)
        for skipped in window[:window.index(chosen)] if chosen is not None else window:
            _decided(ctx, points[skipped], skipped, holds=False, why="the executor's finish named a later stop")
        if chosen is None:  # none applied: the turn did the work up to the last of them
            index = window[-1] + 1
            followed.done_to, followed.taken = points[window[-1]].line, index
            continue
        point = points[chosen]
        if point.condition is not None:
            _decided(ctx, point, chosen, holds=True, why="the executor's finish stopped there")
        followed.done_to, followed.taken, index = point.line, chosen + 1, chosen + 1
        if point.kind in _LEAVES:
            followed.leave = point
            return followed
        followed.answers.append(await _asked(ctx, point, f"point/{chosen}", turn, followed, asked, given))


async def _window(ctx: StepContext, points: list[Point], index: int, turn: Turn,
                  leads_to: Callable[[Point], str | None]) -> list[int]:
    """The points the next turn may stop at, from ``index``: each that applies unless the runtime reads that its
    condition does not hold, up to the first that always applies (no condition, or one the runtime reads as
    holding). A route or hand-over the family does not follow, and an unclassified sentence, is none."""
    window: list[int] = []
    person = ctx.engine.executor.is_the_person  # the person does the work: its questions are theirs as they go
    for at in range(index, len(points)):
        point = points[at]
        if (point.kind not in PERSON_KINDS or person) and not (point.kind in _LEAVES and leads_to(point) is not None):
            continue
        fact = turn.fact(point.condition) if point.condition else None
        if fact is not None:
            _decided(ctx, point, at, holds=fact[0], why=fact[1], by="runtime")
            if not fact[0]:
                continue
        window.append(at)
        if point.condition is None or fact is not None:
            break
    return window


def _label(points: list[Point], window: list[int], at: int) -> str:
    """How a turn's finish names a stop: ``line N`` (``line N#2`` for a second point on the same line)."""
    same = [i for i in window if points[i].line == points[at].line]
    return f"line {points[at].line}" + (f"#{same.index(at) + 1}" if same.index(at) else "")


async def _stop(ctx: StepContext, points: list[Point], window: list[int], turn: Turn,
                followed: Followed) -> tuple[int | None, list[str], str | None]:
    """One turn: the work up to the first point of ``window`` that applies; where it stopped (None: none of them
    applied), what the person answered the executor's own ``ask``, and the user's answer the finish gave (#yolo:
    ``line N: <answer>``; None: it gave none)."""
    last = points[window[-1]]
    # the window ends at a point that always applies (no condition, or one the runtime reads as holding), or at none
    always = last.condition is None or turn.fact(last.condition) is not None
    labels = [_label(points, window, at) for at in window]
    # #yolo: the executor answers as the user in the turn's own finish, after the question it stops at
    asks = [at for at in window if points[at].kind in PERSON_KINDS] if ctx.run.mode == "yolo" else []
    # the first choice is the default branch (what dry-run takes): none of the conditions holds — unless the window
    # holds the text's "Otherwise …" to a condition before it in the window: then that point (one of the two applies)
    conditional = labels[:-1] if always else labels
    otherwise = next((labels[i] for i, at in enumerate(window) if i and not always
                      and _OTHERWISE.match(points[at].condition or "")), None)
    default = labels[-1] if always else otherwise or "none"
    choices = None if len(window) == 1 and always else [
        default, *[label for label in [*conditional, *(["none"] if otherwise else [])] if label != default]]
    if asks and choices:  # after the plain stops: an executor that names one leaves the answer to a request of its own
        choices += [f"{labels[window.index(at)]}: {_placeholder(points[at])}" for at in asks]
    # the step's text first and the same title in every turn, the turn's own note after it: the turns share a
    # prefix a provider caches (the stops and answers are in the note, not repeated in the context)
    outcome = await ctx.invoke("work", title=turn.title,
                               content=with_notes(turn.content, _turn_text(points, window, labels, turn, followed,
                                                                           always, bool(asks))),
                               context=turn.context, hints={**turn.hints, REPEATED_HINT: True}, choices=choices)
    said = str(outcome.choice or "").strip().strip("`")
    for at in asks:
        if said.startswith(f"{labels[window.index(at)]}:"):
            return at, outcome.asked, said.split(":", 1)[1].strip() or None
    if said in labels:
        return window[labels.index(said)], outcome.asked, None
    if said == "none" and not always and not outcome.asked:
        return None, [], None
    # no word (an executor that does not say): it stopped at the first question (the safe side), or asked there
    stop = next((at for at in window if points[at].kind in PERSON_KINDS), window[-1] if always else None)
    return stop, outcome.asked, None


def _decided(ctx: StepContext, point: Point, at: int, *, holds: bool, why: str, by: str = "executor") -> None:
    """Journal whether a point's condition held (once: a resumed step keeps it)."""
    if point.condition is not None:
        record(ctx, f"point/{at}/condition", "point-condition", {"line": point.line, "condition": point.condition},
               {"holds": holds, "reason": why, "by": by})


async def follow_or_leave(ctx: StepContext, points: list[Point], turn: Turn, *,
                          leads_to: Callable[[Point], str | None], then: str | None, text: str,
                          first_line: int) -> Followed | None:
    """Follow the step's points (:func:`follow`), from where a continued visit left off (:func:`~._chain.entry_after`).
    A route or hand-over taken: the run goes there, then back to this step after it (when points or lines of its
    ``text``, which starts on ``first_line``, are left), else to ``then``; a section a route runs (``Run `## Reviewer
    Gate```) returns when it ends; a jump to another section (``→ Step 3``) goes there for good. None when the step
    left (the cursor is set), else what following came to."""
    followed = await follow(ctx, points, turn, leads_to=leads_to, after=entry_after(ctx))
    point = followed.leave
    if point is None:
        return followed
    target = leads_to(point)
    assert target is not None
    goes_on = followed.taken < len(points) or _text_after(text, first_line, points[followed.taken - 1].line)
    why: dict[str, Any] = {"reason": f"line {point.line}: {point.text[:120]}",
                           "by": "runtime" if point.condition is None else "executor"}
    if point.section is not None and not str(point.target).startswith("##"):  # a jump: the chain goes on there
        leave(ctx, target, back=None, after=None, **why)
    else:
        leave(ctx, target, back=ctx.spec.id if goes_on else then, after=followed.taken if goes_on else None,
              call=point.section is not None, **why)
    record(ctx, "leave", "leave", {"line": point.line, "kind": point.kind.value, "target": point.target},
           {"step": target, "returns": goes_on})
    ctx.step.summary = f"left for {target} ({point.kind.value} at line {point.line})"
    return None


def _text_after(text: str, first_line: int, line: int) -> bool:
    """Whether ``text`` (starting on ``first_line``) goes on after ``line``."""
    return any(rest.strip() for rest in text.splitlines()[line - first_line + 1:])


def _turn_text(points: list[Point], window: list[int], labels: list[str], turn: Turn, followed: Followed,
               always: bool, yolo: bool) -> str:
    """The runtime's note that leads a turn's request: where it may stop, and what was answered before."""
    done = (f"The work up to line {followed.done_to} is done (earlier requests); go on from there. "
            if followed.done_to else "")
    answers = "".join(f"\n{a.line()}" for a in followed.answers)
    said = f"\nThe person's answers so far:{answers}" if answers else ""
    stops = []
    for at, label in zip(window, labels, strict=True):
        point = points[at]
        options = _options(point)
        what = (" — the runtime follows it (do not read or follow it yourself)" if point.kind in _LEAVES else
                f" — its options: {'  '.join(f'[{o.key}] {o.label}' for o in options)}" if options else "")
        shown = turn.render(point.text)
        when = "" if not point.condition or (always and at == window[-1]) else _only_if(turn.render(point.condition),
                                                                                        shown)
        stops.append(f"- `{label}` ({point.kind.value}): {shown}{what}{when}")
    if yolo and len(window) == 1 and always:
        how = ("This run is unattended: do not ask it; answer it as the user would, in this same finish: set "
               f"`choice` to `{labels[0]}: {_placeholder(points[window[0]])}`.")
        lead = "Do this step's work up to this point, and stop there:"
    elif len(window) == 1 and always:
        how = ("Finish there." if points[window[0]].kind in _LEAVES else
               "Ask it through `ask` and finish; if you finish without asking, the runtime asks the person.")
        lead = "Do this step's work up to this point, and stop there:"
    else:
        how = ("This run is unattended: at a question, do not ask it; answer it as the user would, in this same "
               "finish: set `choice` to the point and your answer (`line N: <the user's answer>`, as `## Choices` "
               "shows); at a route, just finish. Else set `choice` to the point you stopped at" if yolo else
               "At a question, ask it through `ask` and finish (if you do not ask, the runtime asks the person); at "
               "a route, just finish. Set `choice` to the point you stopped at"
               + ("." if always else f", or to `none` if none applies — then do the work up to line "
                  f"{points[window[-1]].line} and stop."))
        lead = "Do this step's work up to the first of these points that applies now, and stop there:"
    return (f"A turn, up to line {points[window[0]].line}: the runtime hands this step's questions to the person one "
            f"at a time, in the text's order. {done}{lead}\n" + "\n".join(stops) + f"\n{how}{said}")


def _only_if(condition: str, shown: str) -> str:
    """A point's condition, said after its line: named, unless the line says it and pointing to it is shorter than
    repeating it (a long 'If …' clause)."""
    own = condition.strip().rstrip(":,.;").strip()
    named, pointed = f" — only if: {condition}", " — only if its condition (in the line) holds"
    return pointed if own and own in shown and len(pointed) < len(named) else named


async def _again(ctx: StepContext, point: Point, turn: Turn, followed: Followed, note: str) -> list[str]:
    """Another turn at the same point (a loop the person did not end, a confirmation not given): the person's
    answers to the executor's own ``ask``."""
    answers = "".join(f"\n{a.line()}" for a in followed.answers)
    content = with_notes(turn.content, f"A turn, at line {point.line} again: {note}\nThe person's answers so far:"
                                       f"{answers}\nAsk it through `ask` and finish; if you finish without asking, "
                                       "the runtime asks the person.")
    outcome = await ctx.invoke("work", title=turn.title, content=content, context=turn.context,
                               hints={**turn.hints, REPEATED_HINT: True})
    return list(outcome.asked)


def _placeholder(point: Point) -> str:
    """What follows a question's stop in a #yolo turn's finish: the user's answer (a choice's option keys)."""
    return "[<key>]" if _options(point) else "<the user's answer>"


def _options(point: Point) -> list[Option]:
    """The options a point is answered with: a choice's own (its default marked), a confirmation's yes / no."""
    if point.kind is PointKind.CONFIRM:
        return [Option(o.key, o.label, o.route, o.handler, default=i == 0) for i, o in enumerate(point.options)] \
            if len(point.options) >= 2 else list(_CONFIRM_OPTIONS)
    if point.kind is not PointKind.CHOICE:
        return []
    default = point.default or (point.options[0].key if point.options else None)
    return [Option(o.key, o.label, o.route, o.handler, default=o.key == default) for o in point.options]


def _who(ctx: StepContext) -> str:
    if ctx.run.mode == "yolo":
        return "executor"
    return ctx.engine.executor.name if ctx.engine.executor.speaks_for_user else "person"


async def _asked(ctx: StepContext, point: Point, name: str, turn: Turn, followed: Followed,
                 asked: list[str], given: str | None = None) -> Answer:
    """The point's answer: what the person said to the executor's own ``ask`` in the turn, else what the turn's
    finish ``given`` as the user's (#yolo; a choice's only if it names its options), else the runtime asks it; a
    confirmation not given and a loop not ended go on, a turn and a question at a time."""
    where = f"{point.file.name}:{point.line}: {turn.render(point.text)}"
    limit = ctx.engine.config.runtime.max_step_visits
    round_no = 0
    while True:
        options = _options(point)
        named = given if given is None or not options else _named(given, options, multi=point.multi)
        if asked:
            answer, by = asked[-1], "executor's ask"
        elif named is not None:  # answered as the user in the turn's own finish: no request of its own
            answer, by = named, _who(ctx)
        else:
            answer, by = await _ask_point(ctx, point, name, where, round_no, turn.hints), _who(ctx)
        record(ctx, f"{name}/{round_no}", "point",
               {"line": point.line, "kind": point.kind.value, "text": point.text}, {"answer": answer, "by": by})
        again = _goes_on(ctx, point, answer)
        if again is None:
            return Answer(point, answer, by)
        round_no += 1
        if round_no >= limit:  # an answerer that never ends it (an agent answering for nobody) must not spin
            raise StepFailed(f"{where}: the conversation did not end in {limit} rounds", retryable=False,
                             hint="answer `done` to end it, or raise runtime.max_step_visits")
        followed.answers.append(Answer(point, answer, by))
        asked, given = await _again(ctx, point, turn, followed, again), None


def _goes_on(ctx: StepContext, point: Point, answer: str) -> str | None:
    """What the next turn of a conversation loop the person did not end is told (None: it is settled)."""
    if point.kind is PointKind.LOOP:
        if ctx.run.mode == "yolo" or _ends_loop(point, answer):  # a simulated user goes through a loop once
            return None
        return (f"The conversation at line {point.line} goes on: the person said {answer!r}. Respond, then stop "
                "at the same line again (it ends when the person says so).")
    return None


def _ends_loop(point: Point, answer: str) -> bool:
    """Whether an answer ends a conversation loop: a word that ends one (``done``, ``that's all``) or a word the
    text quotes for it (``until the user says "ship it"``)."""
    if _ENDS_LOOP.match(answer):
        return True
    said = answer.strip().strip(".!").lower()
    return any(said == quoted.lower() for quoted in _QUOTED.findall(point.ends_when or point.text))


async def _ask_point(ctx: StepContext, point: Point, name: str, where: str, round_no: int,
                     hints: dict[str, Any]) -> str:
    """Ask the point through the human channel: a choice or confirmation as its options (asked until the answer is
    one), a question or a loop as free text."""
    options = _options(point)
    if options and point.multi:
        return await _choose_many(ctx, options, where, f"{name}/{round_no}", hints)
    if options:
        chosen = await choose(ctx, options, hints=hints, name=f"{name}/{round_no}", note=where)
        return f"[{chosen.key}] {chosen.label}"
    question = where + (" (answer `done` when finished)" if point.kind is PointKind.LOOP else "")
    key = f"{ctx.spec.id}/{ctx.attempt}/{name}/{round_no}"
    return await ctx.engine.human.ask(ctx, question, None, key, hints=hints)


async def _choose_many(ctx: StepContext, options: list[Option], where: str, name: str, hints: dict[str, Any]) -> str:
    """A choice of several options (``multiSelect``): an answer naming one or more of them (``1, 3``)."""
    note = where + " (one or more, separated by commas)"
    for attempt in range(ctx.engine.config.runtime.max_step_visits):
        answer = await ask(ctx, options, executor=False, round_no=attempt, note=note, hints=hints, name=name)
        named = _named(answer or "", options, multi=True)
        if named is not None:
            return named
        note = f"{answer!r} names no option. {where} (one or more, separated by commas)"
    raise StepFailed(f"{where}: no option chosen in {ctx.engine.config.runtime.max_step_visits} rounds",
                     retryable=False, hint="name one or more of the options")


def _named(answer: str, options: list[Option], *, multi: bool) -> str | None:
    """The option an answer names as ``[K] Label`` (a multiple choice: one or more, ``1, 3``); None if it names
    none."""
    parts = [p for p in re.split(r"\s*(?:,|;|\band\b)\s*", answer) if p.strip()] if multi else [answer]
    chosen = [match_answer(p, options) for p in parts]
    if chosen and all(c is not None for c in chosen):
        return ", ".join(f"[{c.key}] {c.label}" for c in chosen if c is not None)
    return None
