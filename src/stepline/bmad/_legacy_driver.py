"""Runs BMAD legacy workflows (``workflow.yaml`` + ``instructions.xml|md``) as the runner ``workflow.xml`` says.

The runtime, not the model, owns the control flow (R-E2): step order, ``goto`` (``step=``, ``anchor=``, prose),
``check if`` blocks, optional steps, ``repeat``, ``for-each``, ``invoke-workflow`` (a linked child run),
``invoke-task``, ``invoke-protocol name="discover_inputs"`` (R-E5) and ``template-output`` (R-E3). The executor
is asked only for judgement: the actions between two interaction points as one ``work`` request, a section
as a ``generate`` request, a prose condition as a ``decide`` request, and (in ``#yolo``) an answer.

:class:`LegacyFlow` picks the next step from ``run.cursor["next"]``, which the driver journals (CURSOR_MOVED)
when a step ends; a step visited again runs as ``<step>@<n>``, and more than ``runtime.max_step_visits`` visits
fail the run. Inside a step every operation with a result (condition, answer, request, child run, discovery,
file write) is journaled under ``<step>/<attempt>/legacy/<n>``: a step resumed after a crash replays those
results in order, so it takes the same path, asks nobody twice and repeats no request.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline import time
from stepline._paths import confine
from stepline._placeholders import PROJECT_ROOT, Kind, Placeholder, Unresolved, find, substitute
from stepline.bmad._conditions import classify
from stepline.bmad._conditions_driver import evaluate, is_known
from stepline.bmad._discover import discover_inputs, infer_selective, selective_names
from stepline.bmad._instructions import (
    Action,
    Ask,
    Check,
    Checkpoint,
    Critical,
    Example,
    Goto,
    InvokeProtocol,
    InvokeTask,
    InvokeWorkflow,
    Node,
    Note,
    Output,
    Step,
    Substep,
    TemplateOutput,
    Text,
    node_from_dict,
    walk,
)
from stepline.bmad._template_output import (
    create_from_template,
    placeholders,
    put_section,
    reopen_section,
)
from stepline.engine import Engine, StepBlocked, StepContext, register_driver, sha256_file
from stepline.errors import NondeterminismError, StepFailed, SteplineError
from stepline.executors import Executor, MenuOption, StepRequest, StepSession
from stepline.formats import read_text
from stepline.model import EventType, Run, RunStatus, StepStatus, WorkflowSpec

__all__ = ["LegacyFlow", "condition_counts", "run_legacy_step"]

_HALT = re.compile(r"^\W*HALT\b(?!\s+if\b)", re.IGNORECASE)
#: the kinds of a plan's point that hand the turn to the person
_PERSON = frozenset({"question", "choice", "confirm", "loop"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MENU = ["a", "c", "p", "y"]
_MAX_DEPTH = 8
#: The workflows of the invoke-workflow chain being driven in this task (cycle and depth guard).
_ACTIVE: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("bmad_active", default=())


class LegacyFlow:
    """Document order plus jumps: after a step completes, the next is the one its driver journaled."""

    def __init__(self, workflow: WorkflowSpec, run: Run) -> None:
        self.run = run
        first = workflow.steps[0].id if workflow.steps else None
        self.upcoming: str | None = run.cursor.get("next", first)
        last = run.cursor.get("from")
        if isinstance(last, str) and run.step(last).status != StepStatus.COMPLETED:
            self.upcoming = last  # it chose its successor, then stopped before completing (its last checks)

    def take_ready(self, limit: int) -> list[str]:
        """The one step that runs next (none when the workflow has ended or a step is blocked)."""
        if self.upcoming is None or limit < 1:
            return []
        sid, self.upcoming = self.upcoming, None
        return [sid]

    def finished(self, step_id: str, status: StepStatus) -> list[str]:
        """Read where the completed step said to go; a failed or blocked step stops the sequence."""
        if status == StepStatus.COMPLETED:
            self.upcoming = self.run.cursor.get("next")
        return []


def condition_counts(run: Run) -> dict[str, int]:
    """How many conditions of ``run`` the runtime decided and how many went to the model (R-E2 figure)."""
    totals = {"runtime": 0, "model": 0}
    for key, value in run.cursor.items():
        if key.startswith("decided:") and isinstance(value, list) and len(value) == 2:
            totals["runtime"] += int(value[0])
            totals["model"] += int(value[1])
    return totals


async def run_legacy_step(ctx: StepContext) -> None:
    """Step driver of the ``bmad-legacy`` format: interpret one top-level ``<step>`` of the instructions."""
    await _Interpreter(ctx).execute()


register_driver("bmad-legacy", run_legacy_step, LegacyFlow)


class _Jump(Exception):
    """A ``goto`` unwinding the node walk up to the step loop."""

    def __init__(self, node: Goto) -> None:
        super().__init__(node.step or node.anchor or "")
        self.node = node


@dataclass(frozen=True, slots=True)
class _Place:
    """A position in the workflow: a top-level step and the node path inside it (``()`` = its start)."""

    step: str
    path: tuple[int, ...]


def _index(workflow: WorkflowSpec) -> tuple[dict[str, _Place], dict[str, _Place]]:
    """Step labels and anchor ids of the whole workflow, with where each one is."""
    labels: dict[str, _Place] = {}
    anchors: dict[str, _Place] = {}

    def visit(step_id: str, nodes: list[dict[str, Any]], path: tuple[int, ...]) -> None:
        for i, node in enumerate(nodes):
            here = (*path, i)
            if node.get("type") == "anchor":
                anchors.setdefault(str(node.get("id", "")), _Place(step_id, here))
            elif node.get("type") == "step" and node.get("n"):
                labels.setdefault(str(node["n"]), _Place(step_id, here))
            visit(step_id, node.get("children") or [], here)

    for spec in workflow.steps:
        if spec.meta.get("n"):
            labels.setdefault(str(spec.meta["n"]), _Place(spec.id, ()))
        visit(spec.id, spec.meta.get("nodes") or [], ())
    return labels, anchors


def _borrowed(executor: Executor) -> Executor:
    """The parent's executor for a child run, which must not close it when the child ends."""

    class Borrowed(Executor):
        name = executor.name
        pure = executor.pure

        async def perform(self, request: StepRequest, session: StepSession) -> None:
            await executor.perform(request, session)

    return Borrowed()


class _Interpreter:
    """Walks one step's instruction tree; see the module docstring for the journaling of its operations."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        self.engine = ctx.engine
        self.run = ctx.run
        self.spec = ctx.spec
        self.workflow = ctx.run.workflow
        self.meta = self.workflow.meta
        self.base = ctx.spec.id.split("@", 1)[0]
        self.label = str(ctx.spec.meta.get("n") or self.base)
        self.source = ctx.spec.source.path if ctx.spec.source else str(self.meta.get("instructions") or "")
        self.nodes = [node_from_dict(raw) for raw in ctx.spec.meta.get("nodes") or []]
        self.labels, self.anchors = _index(self.workflow)
        self.max_visits = self.engine.config.runtime.max_step_visits
        self.ops = 0
        self.pending: list[tuple[str, bool]] = []  # (item, actionable) waiting for the next request
        self.rules = self._rules()
        self.last_answer: str | None = None
        self.decided = {"runtime": 0, "model": 0}
        self.requests = 0
        self.interacted = False
        self.note = ""
        self.jump_line: int | None = None
        output = self.run.cursor.get("output")
        ctx.default_output = output if isinstance(output, str) else None

    # -- the step -------------------------------------------------------------------------------------------
    async def execute(self) -> None:
        problems = self.workflow.meta.get("structure_problems") or []
        if "next" not in self.run.cursor and problems:  # recovered as an HTML parser does; said once, at the start
            self.note = "; ".join(f"recovered {p['path']}:{p['line']}: {p['message']}" for p in problems)
        if self.run.cursor.get("yolo"):
            self.run.mode = "yolo"
        start = await self._op("start", self._start, key="start")
        self.last_answer = start["last_answer"]
        await self._resolve_workflow_variables()
        target: _Place | None = None
        if await self._included():
            target = await self._iterate(tuple(start["path"]) if start["path"] is not None else None)
        await self._flush()
        following = target or self._following()
        if following is not None and self.run.mode != "yolo" and not self.interacted:
            answer = await self._ask(f"Step {self.label} ({self.spec.name}) is done. Continue to the next step?",
                                     ["y", "n"])
            if not answer.strip().lower().startswith("y"):
                raise StepFailed(f"stopped by the user after step {self.label}", retryable=False,
                                 hint=f"`stepline resume {self.run.run_id}` runs step {self.label} again")
        advanced = await self._op("advance", lambda key: self._advance(start["visits"], following), key="advance")
        if following is None:
            await self._finalize_output()
        totals = f"conditions: {self.decided['runtime']} by the runtime, {self.decided['model']} by the model"
        self.ctx.step.summary = "; ".join(
            part for part in (self.note, f"{self.requests} executor request(s)", totals,
                              f"next: {advanced['next'] or 'end'}") if part)

    async def _start(self, key: str) -> dict[str, Any]:
        cursor = self.run.cursor
        path = cursor.get("start") if cursor.get("next") == self.spec.id else None
        visits = dict(cursor.get("visits") or {self.base: 1})
        return {"path": path, "visits": visits, "last_answer": cursor.get("last_answer")}

    def _following(self) -> _Place | None:
        order = self._instruction_steps()
        index = order.index(self.base) + 1
        return _Place(order[index], ()) if index < len(order) else None

    def _instruction_steps(self) -> list[str]:
        """The steps of the instructions, in document order: not those another driver runs around them (an
        XML-step skill's activation and on-complete, which have a ``role``)."""
        return [spec.id for spec in self.workflow.steps if "role" not in spec.meta]

    def _after_instructions(self) -> str | None:
        """Where the run goes on once the instructions end: the step after them (an XML-step skill's on-complete)."""
        ids = [spec.id for spec in self.workflow.steps]
        last = ids.index(self._instruction_steps()[-1])
        return ids[last + 1] if last + 1 < len(ids) else None

    async def _advance(self, visits: dict[str, int], place: _Place | None) -> dict[str, Any]:
        visits = dict(visits)
        next_id: str | None = None
        if place is not None:
            count = visits.get(place.step, 0) + 1
            if count > self.max_visits:
                where = f" by the goto at {self.source}:{self.jump_line}" if self.jump_line else ""
                target = self.workflow.step(place.step).meta.get("n") or place.step
                raise StepFailed(f"step {target} would run a {count}th time{where}: more than "
                                 f"runtime.max_step_visits = {self.max_visits}, so the loop is stopped",
                                 hint="raise runtime.max_step_visits if the loop is meant to run longer",
                                 retryable=False)
            visits[place.step] = count
            next_id = self._visit_id(place.step, count)
        data: dict[str, Any] = {"from": self.spec.id, "next": next_id if place else self._after_instructions(),
                                "start": list(place.path) if place and place.path else None, "visits": visits,
                                "last_answer": self.last_answer,
                                f"decided:{self.spec.id}": [self.decided["runtime"], self.decided["model"]]}
        self.ctx.emit(EventType.CURSOR_MOVED, data)
        if next_id is None:
            self.ctx.emit(EventType.CURSOR_MOVED, {"conditions": condition_counts(self.run)})
        return {"next": next_id}

    def _visit_id(self, base: str, count: int) -> str:
        candidate, n = (base if count == 1 else f"{base}@{count}"), count
        while candidate in self.run.steps and self.run.steps[candidate].status != StepStatus.PENDING:
            n += 1
            candidate = f"{base}@{n}"
        return candidate

    async def _included(self) -> bool:
        meta = self.spec.meta
        if meta.get("optional") and self.run.mode != "yolo":
            answer = await self._ask(f"Step {self.label} ({self.spec.name}) is optional. Include it?", ["y", "n"])
            if not answer.strip().lower().startswith("y"):
                self.note = "optional step left out"
                return False
        if meta.get("if") and not await self._condition(str(meta["if"]), "if"):
            self.note = f"skipped: {meta['if']} is false"
            return False
        return True

    async def _iterate(self, start: tuple[int, ...] | None) -> _Place | None:
        """Run the step body once, ``repeat`` times, or once per ``for-each`` item; return a jump out of it."""
        meta = self.spec.meta
        rounds: list[tuple[str, Any]] = []
        prose_repeat: str | None = None
        if meta.get("for-each"):
            rounds = await self._collection(str(meta["for-each"]))
        elif meta.get("repeat"):
            count = _count(meta["repeat"], self.run.variables)
            if count is None:
                prose_repeat = str(meta["repeat"])
            else:
                rounds = [("repeat_index", i) for i in range(1, count + 1)]
        if meta.get("for-each") or (meta.get("repeat") and prose_repeat is None):
            for name, value in rounds:
                self.ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})
                target = await self._body(start)
                start = None
                if target is not None:
                    return target
            return None
        for _ in range(self.max_visits):
            target = await self._body(start)
            start = None
            if target is not None or prose_repeat is None:
                return target
            if not await self._condition(f"step {self.label} should be repeated ({prose_repeat})", "if"):
                return None
        return None

    async def _collection(self, text: str) -> list[tuple[str, Any]]:
        name, _, collection = text.partition(" in ") if " in " in text else ("item", "", text)
        collection = collection.strip().strip("{}").strip()
        value = self.run.variables.get(collection) if is_known(self.run.variables, collection) else None

        async def ask(key: str) -> str:
            return await self._human(f"List the items of {collection} for step {self.label}, one per line", None,
                                     key)

        if value is None:
            value = await self._op("collection", ask, key="collection", needed=True)
        if isinstance(value, dict):
            items: list[Any] = list(value)
        elif isinstance(value, list):
            items = value
        else:
            items = [line.strip().lstrip("-*").strip() for line in re.split(r"[\n,]", str(value))]
            items = [item for item in items if item]
        return [(name.strip() or "item", item) for item in items]

    async def _body(self, start: tuple[int, ...] | None) -> _Place | None:
        """Walk the step's nodes (from ``start``); follow anchors inside the step; return a jump to another."""
        jumps: dict[str, int] = {}
        while True:
            try:
                await self._nodes(self.nodes, list(start) if start else None)
                return None
            except _Jump as jump:
                await self._flush()
                place = self._locate(jump.node)
                if place is None:
                    self.note = (f"{jump.node.text!r} at {self.source}:{jump.node.line} names no step; "
                                 "went on to the next step")
                    return None
                self.jump_line = jump.node.line
                if place.step != self.base or jump.node.anchor is None:
                    return place
                seen = jumps[jump.node.anchor] = jumps.get(jump.node.anchor, 0) + 1
                if seen > self.max_visits:
                    raise StepFailed(f"goto anchor {jump.node.anchor!r} at {self.source}:{jump.node.line} looped "
                                     f"more than runtime.max_step_visits = {self.max_visits} times",
                                     retryable=False) from None
                start = place.path

    def _locate(self, node: Goto) -> _Place | None:
        """Where ``node`` jumps to; ``None`` for an onward prose jump to a step that is not there (go on)."""
        where = f"{self.source}:{node.line}"
        if node.anchor is not None:
            place = self.anchors.get(node.anchor)
            if place is None:
                raise StepFailed(f"goto anchor {node.anchor!r} at {where}: the workflow has no "
                                 f'<anchor id="{node.anchor}"/>', retryable=False)
            return place
        label = node.step or ""
        place = self.labels.get(label)
        if place is None:
            number = re.match(r"\d+(?:\.\d+)?", label)
            place = self.labels.get(number.group(0)) if number else None
        if place is None and node.onward:
            return None
        if place is None:
            steps = ", ".join(str(s.meta.get("n")) for s in self.workflow.steps)
            raise StepFailed(f"goto step {label!r} at {where}: there is no such step (steps are {steps})",
                             retryable=False)
        return place

    # -- nodes ----------------------------------------------------------------------------------------------
    async def _nodes(self, nodes: list[Node], start: list[int] | None) -> None:
        first = start[0] if start else 0
        for i in range(first, len(nodes)):
            await self._node(nodes[i], start[1:] if start and i == first else None)

    async def _node(self, node: Node, inner: list[int] | None) -> None:
        if inner:  # a jump lands inside this node: enter it without testing its condition
            await self._nodes(getattr(node, "children", []), inner)
            return
        forced = inner is not None
        if isinstance(node, Text):
            self._add(node.text)
            await self._prose_point(node.line)
        elif isinstance(node, Action):
            await self._action(node, forced)
        elif isinstance(node, Check):
            if node.condition is None or forced or await self._condition(node.condition, node.attribute or "if"):
                await self._nodes(node.children, None)
        elif isinstance(node, Ask):
            if node.if_ is None or await self._condition(node.if_, "if"):
                await self._ask_node(node)
        elif isinstance(node, Output):
            if node.if_ is None or await self._condition(node.if_, "if"):
                self._add(f"Tell the user: {node.text}")
        elif isinstance(node, Goto):
            raise _Jump(node)
        elif isinstance(node, Substep | Step):
            if node.if_ is None or forced or await self._condition(node.if_, "if"):
                if node.title or (isinstance(node, Step) and node.goal):
                    self._add(f"({node.title or getattr(node, 'goal', '')})", actionable=False)
                await self._nodes(node.children, None)
        elif isinstance(node, TemplateOutput):
            await self._template_output(node)
        elif isinstance(node, InvokeWorkflow):
            await self._invoke_workflow(node)
        elif isinstance(node, InvokeTask):
            await self._invoke_task(node)
        elif isinstance(node, InvokeProtocol):
            await self._invoke_protocol(node)
        elif isinstance(node, Example):
            self._add(f"Example:\n{node.text}", actionable=False)
        elif isinstance(node, Note):
            self._add(f"Note: {node.text}", actionable=False)
        elif isinstance(node, Checkpoint) and self.run.mode != "yolo":
            await self._flush()
            self.last_answer = await self._ask(f"{self._render(node.text)}\nReady to continue?")
        # Critical rules go with every request of the step (see _rules); anchors and params only mark places.

    async def _action(self, node: Action, forced: bool) -> None:
        if node.if_ is not None and not forced and not await self._condition(node.if_, "if"):
            return
        if _HALT.match(node.text) and await self._prose_point(node.line, reached=True):
            return  # ``HALT and give the user a choice: …``: the person's turn, not the run's end
        if _HALT.match(node.text):
            await self._flush()
            raise StepFailed(f"HALT at step {self.label} ({self.source}:{node.line}): {self._render(node.text)}",
                             hint="do what the message asks, then resume the run", retryable=False)
        prose_jump = any(isinstance(c, Goto) and c.prose and c.text == node.text for c in node.children)
        if node.text and not prose_jump:
            self._add(node.text)
            await self._prose_point(node.line)
        await self._nodes(node.children, None)

    async def _prose_point(self, line: int, *, reached: bool = False) -> bool:
        """A question the step's prose hands the person on ``line`` (its plan's point: "ask the user which …",
        "wait for the user's confirmation"; an ``<ask>`` is asked as a node): the work up to it goes as one
        request, then it is asked (in #yolo of the executor, as the user), and its answer goes with the next
        request. A point under a condition of its own, or one asking for a value already known, is the
        executor's to judge — unless the step ``reached`` it through its ``<check>`` (a ``HALT and give the user a
        choice``). Whether it was asked."""
        for raw in self.spec.meta.get("points") or []:
            if int(raw.get("line") or 0) != line or (raw.get("condition") and not reached) \
                    or raw.get("kind") not in _PERSON:
                continue
            names = [token.name for token in find(str(raw.get("text") or ""), {Kind.RUNTIME})]
            if names and all(is_known(self.run.variables, n) for n in names):
                continue
            await self._flush()
            menu = [MenuOption(key=str(o["key"]), label=str(o["label"])) for o in raw.get("options") or []] \
                if raw["kind"] == "choice" else []
            shown = "  ".join(f"[{o.key}] {o.label}" for o in menu)
            question = f"{Path(self.source).name}:{line}: {self._render(str(raw['text']))} {shown}".strip()
            answer = await self._ask(question, menu=menu)
            self.last_answer = answer
            self._add(f"The person answered (line {line}): {answer}", actionable=False)
            return True
        return False

    async def _ask_node(self, node: Ask) -> None:
        await self._flush()
        answer = await self._ask(self._render(node.text), menu=self._listed(node))
        if node.response:
            self.ctx.emit(EventType.VARIABLE_SET, {"name": node.response, "value": answer})
        self.last_answer = answer
        await self._nodes(node.children, None)

    # -- requests to the executor ---------------------------------------------------------------------------
    def _scope(self) -> dict[str, Any]:
        """The run's variables plus ``{project-root}``, which instructions use in paths."""
        return {PROJECT_ROOT: str(self.ctx.project_root), **self.run.variables}

    def _render(self, text: str) -> str:
        return substitute(text, self._scope(), nested=True)

    def _rules(self) -> list[str]:
        preamble = [node_from_dict(raw) for raw in self.meta.get("preamble") or []]
        found = [n.text for n in walk(preamble) if isinstance(n, Critical)]
        found += [n.text for n in walk(self.nodes) if isinstance(n, Critical)]
        return [self._render(text) for text in found if text]

    def _add(self, text: str, *, actionable: bool = True) -> None:
        if text.strip():
            self.pending.append((self._render(text), actionable))

    def _take(self) -> str:
        """The request text for the pending items (emptied), with the step's heading and rules."""
        items = [item for item, _ in self.pending]
        self.pending = []
        parts = [f"# {self.workflow.name or self.workflow.id} — step {self.label}: {self.spec.name}"]
        if self.rules:
            parts.append("Rules:\n" + "\n".join(f"- {rule}" for rule in self.rules))
        if items:
            parts.append("\n".join(f"{i}. {item}" for i, item in enumerate(items, 1)))
        return "\n\n".join(parts)

    async def _flush(self) -> None:
        """Send the actions gathered since the last interaction point as one ``work`` request."""
        if not any(actionable for _, actionable in self.pending):
            return
        content = self._take()

        async def work(key: str) -> dict[str, Any]:
            outcome = await self.ctx.invoke("work", content=content, title=f"step {self.label}: {self.spec.name}")
            return {"summary": outcome.summary, "choice": outcome.choice}

        await self._op("work", work)
        self.requests += 1

    async def _condition(self, text: str, attribute: str) -> bool:
        """Decide a condition: by the runtime when its form allows, else by the executor (journaled either way)."""
        parsed = classify(text, attribute=attribute)
        if parsed is None or parsed.kind != "choice":
            await self._flush()
        rendered = self._render(text)

        async def decide(key: str) -> dict[str, Any]:
            verdict = evaluate(parsed, variables=self._scope(), project_root=self.ctx.project_root,
                               last_answer=self.last_answer)
            if verdict.value is not None:
                return {"value": verdict.value, "by": "runtime", "reason": verdict.reason}
            outcome = await self.ctx.invoke("decide", condition=rendered, content=self._take(),
                                            title=f"decide: {rendered}", hints={"default": False})
            return {"value": bool(outcome.decision), "by": "model",
                    "reason": outcome.reason or f"undecidable by the runtime: {verdict.reason}"}

        result = await self._op("condition", decide, args={"condition": text})
        self.decided[result["by"]] += 1
        if result["by"] == "model":
            self.requests += 1
        return bool(result["value"])

    def _listed(self, node: Ask) -> list[MenuOption]:
        """The options an ``<ask>`` lists, as its plan point read them at load (``Continue [c] or Edit [e]?``, the
        numbered ``<output>`` before it): the person answers with one of them."""
        for point in self.spec.meta.get("points") or []:
            if point.get("kind") == "choice" and int(point.get("line") or 0) == node.line and point.get("options"):
                return [MenuOption(key=str(o["key"]), label=str(o["label"])) for o in point["options"]]
        return []

    async def _ask(self, question: str, choices: list[str] | None = None, *,
                   menu: list[MenuOption] | None = None) -> str:
        async def ask(key: str) -> str:
            return await self._human(question, [o.key for o in menu] if menu else choices, key, menu=menu)

        answer = str(await self._op("ask", ask, args={"question": question}))
        self.interacted = True
        return answer

    async def _human(self, question: str, choices: list[str] | None, key: str, *,
                     menu: list[MenuOption] | None = None) -> str:
        return await self.engine.human.ask(self.ctx, question, choices, key, menu=menu)

    async def _op(self, kind: str, compute: Callable[[str], Awaitable[Any]], *, args: dict[str, Any] | None = None,
                  key: str | None = None, needed: bool = True) -> Any:
        """Do ``compute`` once per step attempt: a journaled result is replayed (with the requests it used)."""
        if key is None:
            key = str(self.ops)
            self.ops += 1
        full = f"{self.spec.id}/{self.ctx.attempt}/legacy/{key}"
        recorded = self.engine.calls.recorded.get(full)
        if recorded is not None:
            if recorded.get("op") != f"legacy:{kind}":
                raise NondeterminismError(f"step {self.spec.id!r}: operation {key} was {recorded.get('op')!r} when "
                                          f"the run stopped but is 'legacy:{kind}' now",
                                          hint="the workflow changed since; start a new run")
            self.ctx.invocations += int(recorded["result"].get("invocations", 0))
            return recorded["result"]["value"]
        if not needed:
            return None
        before = self.ctx.invocations
        value = await compute(full)
        self.ctx.emit(EventType.CALL_RECORDED, {"key": full, "op": f"legacy:{kind}", "args": args or {},
                                                "result": {"value": value,
                                                           "invocations": self.ctx.invocations - before}})
        return value

    # -- variables ------------------------------------------------------------------------------------------
    async def _resolve_workflow_variables(self) -> None:
        """Ask once for the workflow's variables no config defines (``timestamp`` comes from the clock)."""
        names = [n for n in self.meta.get("unresolved_variables") or [] if not is_known(self.run.variables, n)]

        async def resolve(key: str) -> dict[str, str]:
            values: dict[str, str] = {}
            for i, name in enumerate(names):
                if name == "timestamp":
                    value = time.now().strftime("%Y%m%d-%H%M%S")
                else:
                    value = await self._human(f"Value for {name}? Workflow {self.workflow.id} uses it and "
                                              "nothing defines it.", None, f"{key}/{i}")
                self.ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})
                values[name] = value
            return values

        await self._op("variables", resolve, key="variables", needed=bool(names))

    # -- template-output (R-E3) -----------------------------------------------------------------------------
    async def _template_output(self, node: TemplateOutput) -> None:
        rel = await self._output_file(node.file, node.line)
        content = self._take()
        for i, written in enumerate(node.variables):
            name = _section_name(written)
            if await self._generate(name, rel, content if i == 0 else self._take()) and rel is not None:
                await self._section_menu(name, rel)
        self.interacted = True

    async def _output_file(self, attribute: str | None, line: int | None) -> str | None:
        """The output file's path (asking for unknown names in it), created from the template the first time.

        None when neither the tag nor the workflow names a file: the sections are values for the caller.
        """
        default = self.meta.get("default_output_file")
        raw = attribute or default
        if isinstance(raw, str) and isinstance(default, str):
            raw = substitute(raw, {"default_output_file": default}, kinds={Kind.VAR})
        if not isinstance(raw, str) or not raw.strip():
            return None
        is_default = raw == default

        async def resolve(key: str) -> str:
            known = self.run.cursor.get(f"output:{raw}")
            if isinstance(known, str):
                return known
            asked = 0
            for token in find(raw):
                if not is_known(self.run.variables, token.name):
                    answer = await self._human(f"Value for {token.name} (it names the output file)?", None,
                                               f"{key}/{asked}")
                    asked += 1
                    self.ctx.emit(EventType.VARIABLE_SET, {"name": token.name, "value": answer})

            def part(token: Placeholder) -> str:
                return _UNSAFE.sub("-", str(self.run.variables[token.name])).strip("-") or "unnamed"

            text = substitute(raw, part)
            target = confine(self.ctx.project_root, text)
            rel = str(target.relative_to(self.ctx.project_root.resolve()))
            template = self.meta.get("template")
            if is_default and isinstance(template, str):
                keep = {_section_name(name) for spec in self.workflow.steps for name in spec.outputs}
                create_from_template(target, Path(template), self.run.variables, keep)
            self.ctx.emit(EventType.CURSOR_MOVED, {f"output:{raw}": rel, **({"output": rel} if is_default else {})})
            return rel

        rel = str(await self._op("output", resolve, args={"file": raw}))
        if is_default:
            self.ctx.default_output = rel
        return rel

    async def _generate(self, name: str, rel: str | None, content: str) -> bool:
        """One request for section ``name``; the runtime writes it, records it and checkpoints.

        A section with no place in a document (no output file, or a YAML/JSON file without its ``{{name}}``
        slot) is a value: it becomes the variable ``name``. Returns whether a document section was written.
        """
        target = confine(self.ctx.project_root, rel) if rel is not None else None

        async def generate(key: str) -> dict[str, Any]:
            previous = self.run.cursor.get(f"section:{rel}:{name}")
            if target is None or _slotless(target, name, previous):
                return {"value": await self._value_section(name, content)}
            if isinstance(previous, str):
                reopen_section(target, name, previous)
            saved, self.ctx.default_output = self.ctx.default_output, rel
            try:
                outcome = await self.ctx.invoke("generate", section=name, content=content,
                                                title=f"step {self.label}: write section {name}",
                                                hints={"template_output": name, "file": rel})
            finally:
                self.ctx.default_output = saved
            text = outcome.sections.get(name)
            if text is None:
                text = outcome.summary or ""
                if text:
                    put_section(target, name, text)
            digest = sha256_file(target) if target.exists() else ""
            self.ctx.emit(EventType.ARTIFACT_READY, {"path": rel, "sha256": digest, "section": name})
            self.ctx.emit(EventType.CURSOR_MOVED, {f"section:{rel}:{name}": text,
                                                   "checkpoint": {"step": self.spec.id, "section": name,
                                                                  "path": rel}}, sync=True)
            return {"sha256": digest}

        result = await self._op("template-output", generate, args={"section": name, "path": rel})
        if rel is not None:
            # The document is complete only at the end: it is handed to the step checks then (see _finalize).
            self.ctx.written.pop(rel, None)
        self.requests += 1
        return "sha256" in result

    async def _value_section(self, name: str, content: str) -> Any:
        """Ask the executor for the value of ``name`` (set_var, or its summary) and keep it as a variable."""
        before = self.run.variables.get(name)
        outcome = await self.ctx.invoke("work", content=f"{content}\n\nWork out the value of {name} and set it "
                                        f"with set_var({name!r}, value).", title=f"step {self.label}: value of {name}",
                                        hints={"set_var": name})
        value = self.run.variables.get(name)
        if value is None or value == before:
            value = outcome.summary or ""
            self.ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})
        return value

    async def _section_menu(self, name: str, rel: str) -> None:
        """Normal mode: [a] elicitation and [p] party mode rework the section, [c] goes on, [y] switches to yolo."""
        for _ in range(self.max_visits):
            if self.run.mode == "yolo":
                return
            answer = await self._ask(f"Section '{name}' is saved in {rel}. [a] Advanced Elicitation, [c] Continue, "
                                     "[p] Party-Mode, [y] YOLO the rest of this document", _MENU)
            choice = answer.strip().lower()[:1]
            if choice == "y":
                self.ctx.emit(EventType.CURSOR_MOVED, {"yolo": True})
                self.run.mode = "yolo"
            if choice not in ("a", "p"):
                return
            guide = ("advanced-elicitation/workflow.xml" if choice == "a" else "party-mode/workflow.md")
            method = self.ctx.project_root / "_bmad" / "core" / "workflows" / guide
            text = read_text(method) if method.is_file() else f"({guide} is not installed)"
            self._add(f"Rework the section '{name}' with this method, then write it again:\n\n{text}")
            await self._generate(name, rel, self._take())

    async def _finalize_output(self) -> None:
        """At the end: the output document holds no ``{{placeholder}}`` — known values filled, the rest asked."""
        rel = self.run.cursor.get("output")
        if not isinstance(rel, str):
            if not isinstance(self.meta.get("template"), str) or not self.meta.get("default_output_file"):
                return
            rel = await self._output_file(None, None)
            if rel is None:
                return
        target = confine(self.ctx.project_root, rel)
        if not target.is_file():
            return
        names = [n for n in placeholders(read_text(target))
                 if not is_known(self.run.variables, n) or isinstance(self.run.variables[n], dict | list)]

        async def finalize(key: str) -> dict[str, Any]:
            answers: dict[str, str] = {}
            for i, name in enumerate(names):
                answers[name] = await self._human(f"What should {name} say in {rel}? (its placeholder is still "
                                                  "open)", None, f"{key}/{i}")
            text = read_text(target)
            filled = substitute(text, {**self.run.variables, **answers}, kinds={Kind.RUNTIME})
            if filled != text:
                from stepline.store import atomic_write_bytes

                atomic_write_bytes(target, filled.encode("utf-8"))
            digest = sha256_file(target)
            self.ctx.note_output(rel, target)
            self.ctx.emit(EventType.ARTIFACT_READY, {"path": rel, "sha256": digest, "final": True})
            return {"sha256": digest, "asked": names}

        await self._op("finalize", finalize, key="finalize")
        self.ctx.note_output(rel, target)

    # -- invoke-task, invoke-protocol, invoke-workflow ------------------------------------------------------
    async def _invoke_task(self, node: InvokeTask) -> None:
        await self._flush()
        self._add(f"Run this task: {node.text}")
        if node.path:
            task = self._find_task(node)
            shown = str(task.relative_to(self.ctx.project_root)) if task.is_relative_to(self.ctx.project_root) \
                else str(task)
            self._add(f"The task file {shown}:\n\n{read_text(task)}", actionable=False)
        await self._flush()

    def _find_task(self, node: InvokeTask) -> Path:
        """The task file: the path as written, else a same-named task installed under ``_bmad/*/tasks``."""
        raw = node.path or ""
        rendered = self._render(raw)
        root = self.ctx.project_root
        if not find(rendered):
            candidate = Path(rendered) if Path(rendered).is_absolute() else root / rendered
            if candidate.is_file():
                return candidate
        name = Path(rendered).name
        installed = sorted((root / "_bmad").glob(f"*/tasks/{name}"))
        if installed:
            return installed[0]
        raise StepFailed(f"<invoke-task> at {self.source}:{node.line}: task {raw!r} not found (no {name} under "
                         f"{root / '_bmad'}/*/tasks)",
                         hint="install the task into _bmad/core/tasks, e.g. `stepline bmad install SRC --extras DIR`",
                         retryable=False)

    async def _invoke_protocol(self, node: InvokeProtocol) -> None:
        await self._flush()
        if node.name != "discover_inputs":
            raise StepFailed(f"<invoke-protocol name={node.name!r}> at {self.source}:{node.line}: the runner defines "
                             "no such protocol (it has discover_inputs)", retryable=False)
        patterns = self.meta.get("input_file_patterns")

        async def discover(key: str) -> dict[str, Any]:
            if not isinstance(patterns, dict) or not patterns:
                return {"groups": [], "report": "○ the workflow declares no input_file_patterns; nothing loaded"}
            if selective_names(patterns, self.run.variables):
                await self._ask_step_question_first(node.line, key)
            for i, name in enumerate(selective_names(patterns, self.run.variables)):
                value = infer_selective(name, self.run.variables)
                if value is None:
                    value = await self._human(f"Which {name} should be loaded? (a SELECTIVE_LOAD input pattern "
                                              "needs it)", None, f"{key}/{i}")
                self.ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})
            found = discover_inputs(patterns, self.run.variables, self.ctx.project_root)
            for variable, text in found.contents.items():
                self.ctx.emit(EventType.VARIABLE_SET, {"name": variable, "value": text})
            return {**found.to_dict(), "report": found.report()}

        result = await self._op("discover_inputs", discover)
        self._add(f"Input discovery, done by the runtime:\n{result['report']}", actionable=False)

    async def _ask_step_question_first(self, line: int, key: str) -> None:
        """The question the step's text asks before ``line`` (``Use provided {{story_path}} or ask user which story
        file to review``), asked of the person before any question the runtime would add, when the variable it
        names has no value yet; the answer is that variable's value. So a variable the input discovery needs is
        inferred from the person's answer (``epic_num`` from the story) rather than asked for first."""
        for raw in self.spec.meta.get("points") or []:
            if raw.get("kind") != "question" or int(raw.get("line") or 0) >= line:
                continue
            names = [p.name for p in find(str(raw.get("text") or ""), {Kind.RUNTIME})]
            if not names or any(is_known(self.run.variables, n) for n in names):
                continue
            answer = await self._human(str(raw["text"]), None, f"{key}/text-{raw['line']}")
            self.ctx.emit(EventType.VARIABLE_SET, {"name": names[0], "value": answer})

    def _workflow_path(self, node: InvokeWorkflow) -> Path:
        where = f"<invoke-workflow> at {self.source}:{node.line}"
        if not node.path:
            raise StepFailed(f"{where}: no path= names the workflow to run", retryable=False)
        try:
            rendered = substitute(node.path, self._scope(), nested=True, strict=True)
        except Unresolved as exc:
            raise StepFailed(f"{where}: path {node.path!r} uses a variable that has no value ({exc})",
                             retryable=False) from None
        target = Path(rendered) if Path(rendered).is_absolute() else self.ctx.project_root / rendered
        if target.is_dir():
            inner = next((target / n for n in ("workflow.yaml", "workflow.md") if (target / n).is_file()), None)
            if inner is None:
                raise StepFailed(f"{where}: {target} is a folder without a workflow.yaml or workflow.md",
                                 retryable=False)
            return inner
        if not target.is_file():
            raise StepFailed(f"{where}: {target} does not exist", retryable=False)
        return target

    async def _invoke_workflow(self, node: InvokeWorkflow) -> None:
        await self._flush()
        target = self._workflow_path(node)
        chain = _ACTIVE.get()
        if str(target) in chain or len(chain) >= _MAX_DEPTH:
            shown = " -> ".join([*chain, str(target)])
            raise StepFailed(f"<invoke-workflow> at {self.source}:{node.line}: workflows invoke each other "
                             f"without end ({shown})", retryable=False)
        params = {name: self._render(value) for name, value in node.params.items()}

        async def invoke(key: str) -> dict[str, Any]:
            child = await self._child_run(f"{key}/child", target, params, (*chain, str(target)))
            where = f"workflow {child.workflow.id} (child run {child.run_id})"
            if child.status == RunStatus.BLOCKED:
                raise StepBlocked(f"{where} is waiting: {child.blocked_reason}; answer or approve it there, then "
                                  f"`stepline resume {self.run.run_id}`")
            if child.status != RunStatus.COMPLETED:
                raise StepFailed(f"{where} invoked at {self.source}:{node.line} failed: {child.error}",
                                 retryable=False)
            returned = {k: v for k, v in child.variables.items()
                        if k not in child.workflow.variables and k not in params}
            for name, value in returned.items():
                self.ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})
            return {"run_id": child.run_id, "workflow": child.workflow.id, "variables": sorted(returned)}

        result = await self._op("invoke-workflow", invoke, args={"path": str(target), "params": params})
        self._add(f"The workflow {result['workflow']} ran as child run {result['run_id']}.", actionable=False)

    async def _child_run(self, key: str, target: Path, params: dict[str, str], chain: tuple[str, ...]) -> Run:
        """Start the child run, or continue the one this step started before it was interrupted."""
        from stepline.bmad._load import load_bmad_workflow

        recorded = self.engine.calls.recorded.get(key)

        def remember(event: Any) -> None:
            if event.type == EventType.WORKFLOW_STARTED.value and key not in self.engine.calls.recorded:
                self.ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": "legacy:child-run",
                                                        "args": {"path": str(target)}, "result": event.run_id},
                              sync=True)

        child = Engine(project_root=self.ctx.project_root, config=self.engine.config,
                       executor=_borrowed(self.engine.executor), mode=self.run.mode, human=self.engine.human,
                       sleep=self.engine.sleep, listeners=[remember, *self.engine.listeners])
        token = _ACTIVE.set(chain)
        try:
            if recorded is not None:
                run_dir = child.store.open(str(recorded["result"]))
                found = child.load(run_dir)
                return found if found.status == RunStatus.COMPLETED else await child.resume(found.run_id)
            try:
                spec = load_bmad_workflow(target, project_root=self.ctx.project_root, variables=params)
            except SteplineError as exc:
                raise StepFailed(f"invoked workflow {target}: {exc.format_message()}", retryable=False) from None
            return await child.start(spec, params, parent_run_id=self.run.run_id)
        finally:
            _ACTIVE.reset(token)


def _section_name(written: str) -> str:
    """The variable of a ``<template-output>``: ``name``, or ``name = {{name}}`` in data-mode outputs."""
    slots = find(written, {Kind.RUNTIME})
    left = written.split("=", 1)[0].strip()
    return left if "=" in written and left else slots[0].name if slots else written.strip()


def _slotless(target: Path, name: str, previous: Any) -> bool:
    """A structured document (YAML, JSON) without a ``{{name}}`` slot cannot take free text appended."""
    if previous is not None or target.suffix not in (".yaml", ".yml", ".json"):
        return False
    return not target.exists() or name not in placeholders(read_text(target))


def _count(value: Any, variables: dict[str, Any]) -> int | None:
    """``repeat`` as a number: written as one, or the name of a variable holding one."""
    text = str(value).strip().strip("{}").strip()
    if text.isdigit():
        return int(text)
    known = variables.get(text)
    if isinstance(known, int) or (isinstance(known, str) and known.strip().isdigit()):
        return int(known)
    return None

