"""Issue 36, must be shown: BMAD v6.11.0's skills and CCW v7.3.14's (and v6.0.0-alpha.23's micro-file
workflows, each router mode too) run as a new user would — normal mode, the dry-run executor, nobody at a
terminal — follow their plan (``stepline plan``). Counted over those whose text hands the turn to the person
whatever happens (a question, a choice, a confirmation or a conversation loop under no condition in their plan, a
menu, an agent's menu):

* runs that complete without a person turn: 0 — each stops at its first question (exit 9's gate);
* stops whose options differ from the text: 0 — the pending question offers the point's options (a choice's as
  the plan reads them, a confirmation's yes / no, a menu's or checkpoint's keys), none for a free-text question;
* answering it and resuming goes on: to another question, or to the end;
* in #yolo the executor answers every question (journaled, by the executor) and the run completes; every route
  and hand-over its steps take unconditionally is followed (a ``leave`` in the journal, the target run next):
  routes not followed 0, hand-overs not followed 0.

Over MCP (the mcp SDK client, an agent that does each request but answers no question) five skills' first
question comes back from ``current_step`` as ``waiting_for_answer``, at the same step with the same options.
Run with -s to see the counts.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from interfaces.mcp_agent import call, default_choice, stdio_server
from stepline import Engine
from stepline.bmad import install_bmad
from stepline.engine._human import HumanChannel
from stepline.families import load_workflow, read_plan, register_drivers
from stepline.model import Gate, Run, WorkflowSpec
from stepline.stepchain._plan import Plan, Point, PointKind
from stepline.stepchain._read import halt_menu
from stepline.stepchain._stops import before_menu, checkpoints_in

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
V611, ALPHA = CORPUS / "bmad" / "v6.11.0", CORPUS / "bmad" / "v6.0.0-alpha.23"
CCW = CORPUS / "ccw" / "v7.3.14" / ".claude" / "skills"
pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not (V611.is_dir() and ALPHA.is_dir() and CCW.is_dir()),
                                                     reason="shared/corpus is not available")]

register_drivers()
TALLY: Counter[str] = Counter()
PERSON = {PointKind.QUESTION, PointKind.CHOICE, PointKind.CONFIRM, PointKind.LOOP}
MCP_FIVE = ["bmm/plan/bmad-prd", "core/bmad-customize", "core/bmad-party-mode", "core/bmad-brainstorming",
            "bmm/ship/bmad-code-review"]


def _skills() -> list[str]:
    """Paths, relative to ``_bmad/``, of v6.11.0's skills once installed (``<module>/<folder>``)."""
    if not V611.is_dir():
        return []
    found = []
    for skill in sorted((V611 / "src").rglob("SKILL.md")):
        rel = skill.parent.relative_to(V611 / "src")
        found.append(str(Path("core" if rel.parts[0] == "core-skills" else "bmm", *rel.parts[1:])))
    return found


def _workflows() -> list[str]:
    """Paths, relative to ``_bmad/``, of v6.0.0-alpha.23's micro-file ``workflow.md`` files once installed."""
    if not ALPHA.is_dir():
        return []
    found = []
    for source in sorted((ALPHA / "src").rglob("workflow.md")):
        rel = source.relative_to(ALPHA / "src")
        if not {"data", "templates"} & set(rel.parts):
            found.append(str(Path(*rel.parts[1:]) if rel.parts[0] == "modules" else rel))
    return found


def _ccw_skills() -> list[str]:
    """CCW v7.3.14's skills, as a project keeps them (``.claude/skills/<name>``), relative to that folder."""
    return sorted(p.parent.name for p in CCW.glob("*/SKILL.md")) if CCW.is_dir() else []


CASES = ([("v611", rel) for rel in _skills()] + [("alpha", rel) for rel in _workflows()]
         + [("ccw", rel) for rel in _ccw_skills()])
#: where each tree's workflows are in its project
HOME = {"v611": "_bmad", "alpha": "_bmad", "ccw": ".claude/skills"}


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    v611, alpha, ccw = (tmp_path_factory.mktemp(name) / "p" for name in ("v611", "alpha", "ccw"))
    install_bmad(V611, v611, {})
    install_bmad(ALPHA, alpha)
    shutil.copytree(CCW, ccw / ".claude" / "skills")
    return {"v611": v611.resolve(), "alpha": alpha.resolve(), "ccw": ccw.resolve()}


def _fresh(project: Path) -> None:
    shutil.rmtree(project / "_bmad-output", ignore_errors=True)
    shutil.rmtree(project / ".stepline", ignore_errors=True)


def _hands_the_turn(plan: Plan, workflow: WorkflowSpec) -> bool:
    """Whether the skill's text hands the turn to the person whatever happens: a person's point under no condition
    in a step of its own (its activation and its intent modes aside: the runtime does their asking), a menu or a
    halt, an agent's menu."""
    roles = {s.id: s.meta.get("role") for s in workflow.steps}
    return any(p.kind in PERSON and p.condition is None and roles.get(step.id) not in ("on-activation", "intent")
               for step in plan.steps for p in step.points) or any(
        s.meta.get("menu") or halt_menu(s.meta.get("halts") or []) for s in workflow.steps)


def _only_under_a_condition(plan: Plan) -> bool:
    return any(p.kind in PERSON for p in plan.points())


def _expected(workflow: WorkflowSpec, plan: Plan, gate: Gate) -> list[tuple[str, str]] | None:
    """The options the text has for the question ``gate`` asks (None: a question of the runtime's own, such as
    the intent or the offer to resume, whose options are the skill's modes or documents)."""
    spec = workflow.step(str(gate.step_id).split("@")[0])
    assert spec is not None
    if spec.meta.get("init"):  # a micro-file router: its modes
        return [(str(o["key"] or i), str(o["label"])) for i, o in enumerate(workflow.meta["router"]["options"], 1)]
    if "/menu/" in gate.gate_id or "/agent-menu/" in gate.gate_id:
        if spec.meta.get("role") == "agent-menu":
            return [(i["code"], i["description"]) for i in spec.meta["items"]]
        written = spec.meta.get("menu") or halt_menu(spec.meta.get("halts") or [])
        return [(str(o["key"]), str(o["label"])) for o in written]
    if "/checkpoint/" in gate.gate_id:
        line = int(gate.gate_id.split("/checkpoint/")[1].split("/")[0])
        root = Path(workflow.meta["skills"][spec.meta["skill"]]["root"])
        (found,) = [c for c in checkpoints_in((root / str(spec.meta["file"])).read_text(encoding="utf-8"))
                    if c.line == line]
        return list(found.options)
    if "/point/" not in gate.gate_id:
        return None
    where = re.match(r"([\w.-]+\.md):(\d+):", gate.reason)
    assert where is not None, gate.reason
    step = next(s for s in plan.steps if s.id == spec.id)
    found = [p for p in step.points if p.file.name == where[1] and p.line == int(where[2]) and p.kind in PERSON]
    assert found, (gate.gate_id, gate.reason)
    if found[0].kind is PointKind.CONFIRM and len(found[0].options) < 2:
        return [("Y", "Yes"), ("N", "No")]
    return [(o.key, o.label) for o in found[0].options]


def _offered(gate: Gate) -> list[tuple[str, str]]:
    return [(c.key, c.label) for c in gate.choices or []]


def _normal(path: Path, project: Path, mode: str | None = None) -> tuple[Engine, Run]:
    workflow = load_workflow(path, project_root=project, mode=mode)
    engine = Engine(project_root=project, executor="dry-run", mode="normal", human=HumanChannel(interactive=False))
    return engine, asyncio.run(engine.start(workflow))


def _answer(gate: Gate) -> str:
    """What a person answers: the first option, ``done`` to a conversation, else a sentence."""
    if gate.choices:
        return gate.choices[0].key
    return "done" if "answer `done`" in gate.reason else "nothing to add"


def _modes(path: Path, project: Path) -> list[str | None]:
    """A micro-file router runs as loaded (it asks the mode) and once per mode (``--mode``)."""
    router = load_workflow(path, project_root=project).meta.get("router")
    return [None, *(o["mode"] for o in router["options"] if o["entry"])] if router else [None]


@pytest.mark.parametrize(("tree", "rel"), CASES, ids=[f"{t}:{r}" for t, r in CASES])
def test_normal_mode_stops_at_the_first_question_with_the_texts_options(projects: dict[str, Path], tree: str,
                                                                        rel: str) -> None:
    project = projects[tree]
    path = project / HOME[tree] / rel
    for mode in _modes(path, project):
        _fresh(project)
        _first_stop(path, project, mode, tree)


def _first_stop(path: Path, project: Path, mode: str | None, tree: str) -> None:
    plan = read_plan(path, project_root=project)
    engine, run = _normal(path, project, mode)
    if not _hands_the_turn(plan, run.workflow):
        # its questions are all under a condition the dry-run executor (the default branch) says does not hold
        TALLY["hand the turn only under a condition" if _only_under_a_condition(plan) else
              "hand the person no turn"] += 1
        assert run.status.value in ("completed", "blocked"), run.error
        return
    TALLY["hand the turn to the person"] += 1
    TALLY[f"of which {tree}"] += 1
    if run.status.value == "completed":
        TALLY["completed without a person turn"] += 1
    assert run.status.value == "blocked", (mode, run.status, run.error)
    (gate,) = engine.gates.pending()
    expected = _expected(run.workflow, plan, gate)
    if expected is not None and _offered(gate) != expected:
        TALLY["stops whose options differ from the text"] += 1
    assert expected is None or _offered(gate) == expected, (mode, gate.step_id, gate.reason, _offered(gate),
                                                            expected)
    TALLY["stops checked against the text"] += expected is not None
    # answered and resumed, the run goes on: another question, or the end
    engine.decide_gate(run.run_id, gate.gate_id, approved=True, by="test", answer=_answer(gate))
    again = Engine(project_root=project, executor="dry-run", human=HumanChannel(interactive=False))
    resumed = asyncio.run(again.resume(run.run_id))
    assert resumed.status.value in ("blocked", "completed"), resumed.error
    if resumed.status.value == "blocked":
        (second,) = again.gates.pending()
        assert second.gate_id != gate.gate_id, "the same question was asked twice"


def _leaves(events: list[Any]) -> set[tuple[str, str]]:
    return {(str(e.step_id).split("@")[0], str(e.data["args"]["target"])) for e in events
            if e.type == "CallRecorded" and e.data["op"] == "leave"}


def _must_follow(workflow: WorkflowSpec, plan: Plan, done: set[str]) -> list[tuple[str, Point]]:
    """The routes and hand-overs the completed steps take whatever happens: unconditional, before the step's menu
    (its handlers are the chain's), to a file the run has a step for or a skill it loaded; a shim's forwarding and
    an intent step's modes (only the chosen one runs) are their own."""
    found = []
    steps = {s.id for s in workflow.steps}
    handovers = workflow.meta.get("handovers") or {}
    by_id = {s.id: s for s in workflow.steps}
    for step in plan.steps:
        spec = by_id.get(step.id)
        if step.id not in done or spec is None or spec.meta.get("role") in ("intent", "shim", "on-activation") \
                or "skill" not in spec.meta:  # a legacy <workflow> step: its own interpreter's
            continue
        for point in before_menu(list(step.points), spec.meta):
            if point.condition is not None:
                continue
            if point.kind is PointKind.HANDOVER and point.target in handovers:
                found.append((step.id, point))
            elif point.kind is PointKind.ROUTE and point.resolved is not None and point.section is None:
                home = Path(workflow.meta["skills"][spec.meta["skill"]]["root"]).resolve()
                rel = point.resolved.resolve().relative_to(home).with_suffix("") \
                    if point.resolved.resolve().is_relative_to(home) else None
                if rel is not None and f"route-{rel.as_posix().replace('/', '-')}" in steps:
                    found.append((step.id, point))
    return found


@pytest.mark.parametrize(("tree", "rel"), CASES, ids=[f"{t}:{r}" for t, r in CASES])
def test_yolo_answers_every_question_and_follows_every_route_and_hand_over(projects: dict[str, Path], tree: str,
                                                                           rel: str) -> None:
    project = projects[tree]
    _fresh(project)
    workflow = load_workflow(project / HOME[tree] / rel, project_root=project)
    plan = read_plan(project / HOME[tree] / rel, project_root=project)
    engine = Engine(project_root=project, executor="dry-run", mode="yolo")
    run = asyncio.run(engine.start(workflow))
    if run.status.value == "failed" and tree == "alpha":  # a broken upstream workflow fails in #yolo too
        TALLY["alpha.23 workflows that fail in #yolo (broken upstream)"] += 1
        return
    assert run.status.value == "completed", run.error
    events = list(engine.store.open(run.run_id).events())
    points = [e.data for e in events if e.type == "CallRecorded" and e.data["op"] == "point"]
    assert all(p["result"]["by"] == "executor" for p in points)
    TALLY["questions answered by the executor (#yolo)"] += len(points)
    done = {str(e.step_id).split("@")[0] for e in events if e.type == "WorkflowStepCompleted"}
    left = _leaves(events)
    missed = []
    for step, point in _must_follow(run.workflow, plan, done):
        kind = "hand-overs" if point.kind is PointKind.HANDOVER else "routes"
        if (step, str(point.target)) in left:
            TALLY[f"{kind} followed"] += 1
        else:
            TALLY[f"{kind} not followed"] += 1
            missed.append(f"{step}: {point.file.name}:{point.line} {point.target}")
    assert not missed, missed


async def _first_question(project: Path, path: str) -> dict[str, Any]:
    """Drive ``path`` over MCP doing every request but answering no question; the first question asked."""
    async with asyncio.timeout(90), Client(stdio_server(project)) as client:
        await call(client, "start_run", {"path": path, "mode": "normal"})
        for _ in range(200):
            current = await call(client, "current_step", {"wait_seconds": 30})
            for request in current.get("requests") or []:
                rid = request["request_id"]
                if request["waiting_for"] == "answer":
                    return {**request, "status": current["status"]}
                if request["kind"] == "decide":
                    await call(client, "decide", {"value": bool(request["hints"].get("default", False)),
                                                  "reason": "the default branch", "request_id": rid})
                    continue
                await call(client, "finish", {"summary": "done", "choice": default_choice(request),
                                              "request_id": rid})
            if current["status"] not in ("waiting_for_work", "waiting_for_answer", "running"):
                return dict(current)
    raise AssertionError(f"{path}: no question and no end over MCP")


@pytest.mark.parametrize("rel", MCP_FIVE)
def test_over_mcp_the_first_question_is_waiting_for_answer_with_the_same_options(projects: dict[str, Path],
                                                                                 rel: str) -> None:
    project = projects["v611"]
    _fresh(project)
    engine, _ = _normal(project / "_bmad" / rel, project)
    (gate,) = engine.gates.pending()
    _fresh(project)
    question = asyncio.run(_first_question(project, f"_bmad/{rel}"))
    assert question["status"] == "waiting_for_answer", question
    options = [(o["key"], o["label"]) for o in question.get("menu") or []] or [
        (c, "") for c in question.get("choices") or []]
    # the same question (the gate's reason shows the option keys after it)
    assert question["step_id"] == gate.step_id and gate.reason.startswith(question["question"]), (question, gate)
    assert options == _offered(gate) or [k for k, _ in options] == [k for k, _ in _offered(gate)], (question, gate)
    TALLY["first questions asked over MCP"] += 1


def test_the_tally() -> None:
    """Runs last (file order): the closing note's counts."""
    print("\nv6.11.0 skills, CCW v7.3.14 skills and v6.0.0-alpha.23 micro-file workflows (each router mode), normal "
          "mode, dry-run, nobody at a terminal: " + "; ".join(f"{k}: {v}" for k, v in TALLY.items()))
    for must_be_zero in ("completed without a person turn", "stops whose options differ from the text",
                         "routes not followed", "hand-overs not followed"):
        assert TALLY[must_be_zero] == 0, must_be_zero
