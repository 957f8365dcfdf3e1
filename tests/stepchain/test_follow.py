"""A skill's plan followed in normal mode, shape by shape, with nobody at a terminal: each point the text hands to
the person blocks the run on a question (as ``stepline answer`` + ``resume`` would settle it), in the text's
order; a route runs its file as the next step, a hand-over runs the other skill within the run with its own
customization, a conversation loop ends on the person's word, and a model executor that did not ask is asked for
by the runtime. In #yolo the executor answers every point, journaled."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import fake_openai
from fakes.policy import Call, Policy, Request
from stepline import Engine
from stepline.engine._human import HumanChannel
from stepline.executors import StepRequest, StepSession
from stepline.executors._base import Executor
from stepline.families import load_workflow, register_drivers
from stepline.model import Event, Run

register_drivers()

ASKER = """---
name: asker
description: Asks, routes and loops.
---
# Asker

## On Activation

Nothing to set up.

## Gather

Ask the user for the product's name.

**Working mode.** Offer the choice:

- **Fast path** — one question, then a draft.
- **Coaching path** — walk it together.

Load `references/deep.md` and follow it.

## Brainstorm

Keep generating ideas with the user until they say they're done.
"""
DEEP = """# Deep

Ask the user which color they want.
"""
FORWARDER = """---
name: forwarder
description: Hands the work to another skill.
---
# Forwarder

## On Activation

Nothing to set up.

## Forward

Invoke `target-skill` with the user's request. `target-skill` takes the workflow from here.
"""
#: a shim whose description does not say it forwards (a wording some releases use): its activation hands over
ALIAS = """---
name: old-alias
description: Legacy alias, kept for old invocations.
---

# Old alias

This skill was consolidated into `target-skill`.

## On Activation

1. Emit a deprecation notice to the user.
2. Invoke `target-skill` with the user's original input. `target-skill` takes the workflow from here.
"""
TARGET = """---
name: target-skill
description: The skill the forwarder hands over to.
---
# Target

## On Activation

Nothing to set up.

## Work

Say {workflow.greeting}.
"""


class Recorder(Executor):
    """Does each request like dry-run, keeping them; ``answer`` (#yolo) with the first choice or a sentence."""

    name = "recorder"
    pure = True

    def __init__(self) -> None:
        self.requests: list[StepRequest] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.requests.append(request)
        if request.kind == "answer":
            await session.finish(choice=(request.choices or ["an answer"])[0], summary="answered")
            return
        await session.finish(summary=f"did {request.step_id}")

    def work(self, step: str) -> list[StepRequest]:
        return [r for r in self.requests if r.kind == "work" and r.step_id.split("@")[0] == step]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    """A project, and beside it the skills: asker (a question, a choice, a route, a loop), forwarder and the
    target-skill it hands over to (its customization overridden in the project)."""
    src = tmp_path / "src"
    _write(src, {"asker/SKILL.md": ASKER, "asker/references/deep.md": DEEP, "old-alias/SKILL.md": ALIAS,
                 "forwarder/SKILL.md": FORWARDER, "target-skill/SKILL.md": TARGET,
                 "target-skill/customize.toml": '[workflow]\ngreeting = "hello from the default"\n'})
    project = tmp_path / "project"
    _write(project, {"_bmad/custom/target-skill.toml": '[workflow]\ngreeting = "hello from the override"\n'})
    return project


def _engine(project: Path, executor: Executor | str, mode: str = "normal") -> Engine:
    return Engine(project_root=project, executor=executor, mode=mode, human=HumanChannel(interactive=False))


def _pending(engine: Engine) -> Any:
    (gate,) = engine.gates.pending()
    return gate


def _events(engine: Engine, run: Run) -> list[Event]:
    return list(engine.store.open(run.run_id).events())


def _done(events: list[Event]) -> list[str]:
    """The steps in the order they completed."""
    return [str(e.step_id) for e in events if e.type == "WorkflowStepCompleted"]


def _recorded(events: list[Event], op: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "CallRecorded" and e.data["op"] == op]


def _answer(project: Path, run: Run, answer: str, executor: Executor | str) -> tuple[Engine, Run]:
    _engine(project, "dry-run").decide_gate(run.run_id, None, approved=True, by="test", answer=answer)
    engine = _engine(project, executor)
    return engine, asyncio.run(engine.resume(run.run_id))


def test_each_point_blocks_in_order_a_route_runs_next_and_a_loop_ends_on_the_persons_word(skills: Path) -> None:
    project = skills
    recorder = Recorder()
    engine = _engine(project, recorder)
    run = asyncio.run(engine.start(load_workflow(project.parent / "src" / "asker", project_root=project)))
    asked = []
    for answer in ("Stepline", "C", "blue", "more ideas please", "done"):
        assert run.status.value == "blocked", run.error
        gate = _pending(engine)
        asked.append((gate.step_id, gate.reason, [c.key for c in gate.choices or []]))
        engine, run = _answer(project, run, answer, recorder)
    assert run.status.value == "completed", run.error
    assert asked == [
        ("section-gather", "SKILL.md:13: Ask the user for the product's name.", []),
        ("section-gather", "SKILL.md:15: **Working mode.** Offer the choice: Select an option: [F] Fast path  "
                           "[C] Coaching path [F/C]", ["F", "C"]),
        ("route-references-deep", "deep.md:3: Ask the user which color they want.", []),
        ("section-brainstorm", "SKILL.md:24: Keep generating ideas with the user until they say they're done. "
                               "(answer `done` when finished)", []),
        ("section-brainstorm", "SKILL.md:24: Keep generating ideas with the user until they say they're done. "
                               "(answer `done` when finished)", [])]
    # the route ran as the next step, after the step that routes; then the chain went on where it left
    assert _done(_events(engine, run)) == ["activate", "on-activation", "section-gather", "route-references-deep",
                                           "section-brainstorm"]
    handed = [d["result"] for d in _recorded(_events(engine, run), "handover") if d["result"]["role"] == "route"]
    assert [Path(h["path"]).name for h in handed] == ["deep.md"] and len(handed[0]["sha256"]) == 64
    # each answer journaled with who gave it, and handed to the next turn of its step
    points = [(d["args"]["line"], d["result"]) for d in _recorded(_events(engine, run), "point")]
    assert points == [(13, {"answer": "Stepline", "by": "person"}),
                      (15, {"answer": "[C] Coaching path", "by": "person"}),
                      (3, {"answer": "blue", "by": "person"}),
                      (24, {"answer": "more ideas please", "by": "person"}),
                      (24, {"answer": "done", "by": "person"})]
    gather = recorder.work("section-gather")
    assert "Stepline" in gather[-1].content and "[C] Coaching path" in gather[-1].content
    loop = recorder.work("section-brainstorm")
    assert any("the person said 'more ideas please'" in r.content for r in loop)


def test_yolo_the_executor_answers_every_point_journaled(skills: Path) -> None:
    engine = _engine(skills, "dry-run", mode="yolo")
    run = asyncio.run(engine.start(load_workflow(skills.parent / "src" / "asker", project_root=skills)))
    assert run.status.value == "completed", run.error
    points = [(d["args"]["line"], d["result"]["by"]) for d in _recorded(_events(engine, run), "point")]
    assert points == [(13, "executor"), (15, "executor"), (3, "executor"), (24, "executor")]


#: a point under a condition before the asker's first: the first turn may stop at either
CONDITIONAL = ASKER.replace("## Gather\n\n", "## Gather\n\nIf the user has a brief, ask them for its path.\n\n")
_IN_FINISH = re.compile(r"set `choice` to `(line [^`]+)`")


class AsUser(Recorder):
    """A #yolo executor that gives the user's answer in the turn's own finish, as asked (the first question of
    the turn's choices, or the one its notes name); ``keys``: what it answers a choice with."""

    def __init__(self, keys: str = "[C]") -> None:
        super().__init__()
        self.keys = keys

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        templates = [c for c in request.choices or [] if "<" in c] or _IN_FINISH.findall(request.content)
        if request.kind != "work" or not templates:
            await super().perform(request, session)
            return
        self.requests.append(request)
        label = templates[0].split(":", 1)[0]
        answer = templates[0].replace("<the user's answer>", f"the answer at {label}").replace("[<key>]", self.keys)
        await session.finish(choice=answer, summary=f"did {request.step_id}")


def test_yolo_the_turn_that_stops_at_a_question_gives_the_answer_journaled_as_before(skills: Path) -> None:
    """#yolo: the turn that stops at a question gives the user's answer in its own finish (a conditional one among
    the turn's choices, an unconditional one as its notes say): no answer request is made, each answer is
    journaled as the executor's, as an answer request's was, and handed to the next turn."""
    _write(skills.parent / "src", {"conditional/SKILL.md": CONDITIONAL.replace("name: asker", "name: conditional"),
                                   "conditional/references/deep.md": DEEP})
    executor = AsUser()
    engine = _engine(skills, executor, mode="yolo")
    run = asyncio.run(engine.start(load_workflow(skills.parent / "src" / "conditional", project_root=skills)))
    assert run.status.value == "completed", run.error
    assert [r.kind for r in executor.requests if r.kind != "work"] == []  # no answer request
    points = [(d["args"]["line"], d["result"]) for d in _recorded(_events(engine, run), "point")]
    assert points == [(13, {"answer": "the answer at line 13", "by": "executor"}),
                      (15, {"answer": "the answer at line 15", "by": "executor"}),
                      (17, {"answer": "[C] Coaching path", "by": "executor"}),
                      (3, {"answer": "the answer at line 3", "by": "executor"}),
                      (26, {"answer": "the answer at line 26", "by": "executor"})]
    first, second, third = executor.work("section-gather")[:3]
    assert first.choices == ["line 15", "line 13", "line 13: <the user's answer>", "line 15: <the user's answer>"]
    assert "answer it as the user would, in this same finish" in first.content
    assert second.choices is None and "set `choice` to `line 15: <the user's answer>`" in second.content
    assert "set `choice` to `line 17: [<key>]`" in third.content and "the answer at line 15" in third.content
    (held,) = _recorded(_events(engine, run), "point-condition")
    assert held["result"]["holds"] is True  # the finish stopped at the conditional question


def test_yolo_an_answer_not_in_the_turns_finish_is_asked_in_a_request_of_its_own(skills: Path) -> None:
    """#yolo: a turn whose finish gives no answer (none, or an option the choice does not have) leaves it to an
    answer request, as before; journaled the same way."""
    executor = AsUser(keys="[Z]")  # only its free-text answers fit
    engine = _engine(skills, executor, mode="yolo")
    run = asyncio.run(engine.start(load_workflow(skills.parent / "src" / "asker", project_root=skills)))
    assert run.status.value == "completed", run.error
    answered = [r.question for r in executor.requests if r.kind == "answer"]
    assert len(answered) == 1 and str(answered[0]).startswith("SKILL.md:15: **Working mode.**")
    points = [(d["args"]["line"], d["result"]) for d in _recorded(_events(engine, run), "point")]
    assert points[1] == (15, {"answer": "[F] Fast path", "by": "executor"})  # the answer request's first choice
    recorder = Recorder()  # an executor that never answers in its finish: one answer request per point
    engine = _engine(skills, recorder, mode="yolo")
    run = asyncio.run(engine.start(load_workflow(skills.parent / "src" / "asker", project_root=skills)))
    assert run.status.value == "completed", run.error
    assert len([r for r in recorder.requests if r.kind == "answer"]) == 4
    points = [(d["args"]["line"], d["result"]["answer"], d["result"]["by"])
              for d in _recorded(_events(engine, run), "point")]
    assert points == [(13, "an answer", "executor"), (15, "[F] Fast path", "executor"),
                      (3, "an answer", "executor"), (24, "an answer", "executor")]


def test_a_hand_over_runs_the_other_skill_within_the_run_with_its_customization(skills: Path) -> None:
    recorder = Recorder()
    engine = _engine(skills, recorder)
    run = asyncio.run(engine.start(load_workflow(skills.parent / "src" / "forwarder", project_root=skills)))
    assert run.status.value == "completed", run.error
    assert _done(_events(engine, run)) == ["activate", "on-activation", "section-forward", "target-skill:activate",
                                           "target-skill:on-activation", "target-skill:section-work"]
    (work,) = recorder.work("target-skill:section-work")
    assert "Say hello from the override." in work.content
    events = _events(engine, run)
    (left,) = _recorded(events, "leave")
    assert left["args"]["target"] == "target-skill" and left["result"]["step"] == "target-skill:activate"
    custom = [d for d in _recorded(events, "customization") if d["args"]["skill"] == "target-skill"]
    assert [Path(p).name for p in custom[0]["args"]["layers"]] == ["customize.toml", "target-skill.toml"]


def test_a_shim_in_any_wording_continues_into_its_target_with_the_targets_customization(skills: Path) -> None:
    """old-alias's description says nothing of forwarding; its activation's "Invoke `target-skill` … takes the
    workflow from here" is the hand-over: the run goes on into target-skill, nothing after it."""
    recorder = Recorder()
    engine = _engine(skills, recorder)
    run = asyncio.run(engine.start(load_workflow(skills.parent / "src" / "old-alias", project_root=skills)))
    assert run.status.value == "completed", run.error
    assert _done(_events(engine, run)) == ["activate", "on-activation", "target-skill:activate",
                                           "target-skill:on-activation", "target-skill:section-work"]
    (work,) = recorder.work("target-skill:section-work")
    assert "Say hello from the override." in work.content
    (left,) = _recorded(_events(engine, run), "leave")
    assert left["args"]["line"] == 13 and left["result"] == {"step": "target-skill:activate", "returns": False}


class _Asks(Policy):
    """A model that asks the first point's question itself, through ``ask``, before finishing its turn."""

    def _first(self, request: Request, tools: dict[str, dict[str, Any]]) -> list[Call]:
        if request.kind == "work" and "`line 13` (question)" in request.parts.get("Step instructions", ""):
            return [("ask", {"question": "What is your product called?"})]
        return super()._first(request, tools)


@pytest.fixture(scope="module")
def server() -> Iterator[fake_openai.FakeOpenAI]:
    with fake_openai.FakeOpenAI().running() as running:
        yield running


@pytest.mark.parametrize("model_asks", [False, True], ids=["model-does-not-ask", "model-asks"])
def test_a_model_that_does_not_ask_is_asked_for_by_the_runtime(skills: Path, server: fake_openai.FakeOpenAI,
                                                                model_asks: bool) -> None:
    """The openai executor against the fake server: the step's first point is asked once, by the model's own
    ``ask`` when it asks (that counts), else by the runtime with the point's question."""
    server.reset()
    policy = _Asks() if model_asks else Policy()
    server.responder = fake_openai.responder(policy)
    options = {"base_url": server.base_url, "api_key": "test", "model": "fake"}
    executor = {"executor": "openai", "executor_options": options}

    def engine() -> Engine:
        return Engine(project_root=skills, mode="normal", human=HumanChannel(interactive=False), **executor)

    first = engine()
    run = asyncio.run(first.start(load_workflow(skills.parent / "src" / "asker", project_root=skills)))
    gate = _pending(first)
    assert gate.step_id == "section-gather"
    assert gate.reason == ("What is your product called?" if model_asks else
                           "SKILL.md:13: Ask the user for the product's name.")
    first.decide_gate(run.run_id, None, approved=True, by="test", answer="Stepline")
    second = engine()
    run = asyncio.run(second.resume(run.run_id))
    assert [c.key for c in _pending(second).choices] == ["F", "C"]  # the next point: the first is not asked again
    (point,) = _recorded(_events(second, run), "point")
    assert point["result"] == {"answer": "Stepline", "by": "executor's ask" if model_asks else "person"}
    assert policy.errors == []


def test_a_turn_names_a_condition_once_and_the_last_request_names_only_answers_given() -> None:
    """A point's condition is named after its line unless the line says it and pointing to it is shorter (a long
    'If …' clause is not sent twice); a lead-in's condition, which the line does not say, is named. The step's last
    request names the person's answers only when there are some."""
    from stepline.stepchain._follow import Followed, _only_if

    line = "If the tree is dirty or the branch is an obvious mismatch, HALT and ask the human before proceeding."
    assert _only_if("If the tree is dirty or the branch is an obvious mismatch", line) == (
        " — only if its condition (in the line) holds")
    assert _only_if("If it exceeds 5", "If it exceeds 5, HALT.") == " — only if: If it exceeds 5"  # shorter so
    assert _only_if("If overlap is significant:", "Ask whether to consolidate.") == (
        " — only if: If overlap is significant:")
    rest = Followed(done_to=81).rest("The step's text.")
    assert rest == ("The step's text.\n\n## This request\nThe work of this step up to line 81 is done (earlier "
                    "requests); do the rest of the step, after it, and do not ask those points again.")
