"""Issue 25, "must be shown": every micro-file workflow of v6.0.0-alpha.23, run as a new user would —
normal mode, the dry-run executor, nobody at a terminal. A run that reaches a step file presenting a menu or a halt
to the person blocks there, on a question naming that step's options; nothing runs past it. The tri-modal
router's question counts the same (its options are the modes). Through the MCP server (the mcp SDK client, an
agent that does each step's work but does not answer its menu) each such run's question comes back from
``current_step`` as ``waiting_for_answer``, at the same step, with the same options.

What a step presents is what the reader found in the step file (or a sections skill's section): an authored menu
(``[K] Label`` options in a menu section or a "Select an Option" line), else its last halt that waits for the
person outside any ``If …`` (``HALT and wait for user confirmation``), else an unconditional ``HALT and ask
human:`` checkpoint; an agent skill presents its menu (customize.toml's ``[[agent.menu]]``) after its activation.
"""

from __future__ import annotations

import asyncio
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
from stepline.families import load_workflow, register_drivers
from stepline.model import StepStatus, WorkflowSpec
from stepline.skills._skill import checkpoints_in
from stepline.stepchain._read import halt_menu

ROOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad"
ALPHA = ROOT / "v6.0.0-alpha.23"

pytestmark = [pytest.mark.corpus,
              pytest.mark.skipif(not ALPHA.is_dir(), reason="shared/corpus/bmad is not available")]

register_drivers()
TALLY: Counter[str] = Counter()


def _alpha_workflows() -> list[str]:
    """Paths, relative to ``_bmad/``, of the release's micro-file ``workflow.md`` files once installed."""
    if not ALPHA.is_dir():
        return []
    found = []
    for source in sorted((ALPHA / "src").rglob("workflow.md")):
        rel = source.relative_to(ALPHA / "src")
        if not {"data", "templates"} & set(rel.parts):
            found.append(str(Path(*rel.parts[1:]) if rel.parts[0] == "modules" else rel))
    return found


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    alpha = tmp_path_factory.mktemp("alpha") / "p"
    install_bmad(ALPHA, alpha)
    return {"alpha": alpha.resolve()}


def _presents(workflow: WorkflowSpec, step_id: str) -> list[str]:
    """The ``[K] Label`` options step ``step_id`` presents to the person, read from its file (see the module doc)."""
    spec = workflow.step(step_id.split("@")[0])
    if spec is None:
        return []
    if spec.meta.get("init"):
        router = workflow.meta.get("router")
        asked = router and not workflow.meta.get("first_step") and not workflow.meta.get("mode")
        return [f"[{o['key'] or i}] {o['label']}" for i, o in enumerate(router["options"], start=1)] if asked else []
    if spec.meta.get("role") == "agent-menu":  # an agent's customize.toml menu, after its activation
        return [f"[{i['code']}] {i['description']}" for i in spec.meta["items"]]
    if spec.meta.get("role") not in (None, "step-file", "section"):
        return []
    if spec.meta.get("menu"):
        return [f"[{o['key']}] {o['label']}" for o in spec.meta["menu"]]
    halt = halt_menu(spec.meta.get("halts") or [])
    if halt:
        return [f"[{o['key']}] {o['label']}" for o in halt]
    if "file" not in spec.meta:
        return []
    file = Path(str(spec.meta["file"]))
    file = file if file.is_absolute() else Path(str(workflow.meta["skills"][spec.meta["skill"]]["root"])) / file
    always = [c for c in checkpoints_in(file.read_text(encoding="utf-8")) if c.condition is None]
    return [f"[{k}] {label}" for k, label in always[0].options] if always else []


def _check(project: Path, path: Path, mode: str | None) -> list[str]:
    shutil.rmtree(project / "_bmad-output", ignore_errors=True)
    shutil.rmtree(project / ".stepline", ignore_errors=True)
    workflow = load_workflow(path, project_root=project, mode=mode)
    engine = Engine(project_root=project, executor="dry-run", mode="normal", human=HumanChannel(interactive=False))
    run = asyncio.run(engine.start(workflow))
    reached = [sid for sid, step in run.steps.items() if step.status not in (StepStatus.PENDING, StepStatus.SKIPPED)]
    stops = [(sid, _presents(run.workflow, sid)) for sid in reached]
    first = next(((sid, options) for sid, options in stops if options), None)
    if run.status.value == "completed":
        TALLY["completed"] += 1
        return [f"ran past {first[0]}, which presents {first[1]}"] if first else []
    if run.status.value != "blocked":
        TALLY[run.status.value] += 1
        return [f"{run.status.value}: {run.error}"]
    TALLY["blocked"] += 1
    pending = engine.gates.pending() if engine.gates is not None else []
    if first is None:  # a question the step's work raised (a conditional checkpoint that held): still a question
        questions = all(g.step_id is not None and g.gate_id.startswith("ask:") for g in pending)
        return [] if questions else [f"blocked at {[g.step_id for g in pending]} ({run.blocked_reason}), where no "
                                     "step file presents a menu or halt"]
    sid, options = first
    (gate,) = [g for g in pending if g.step_id == sid] or [None]
    if gate is None:
        return [f"blocked at {[g.step_id for g in pending]}, not at {sid}, which presents {options}"]
    TALLY["blocked at a menu or halt"] += 1
    missing = [o for o in options if o not in gate.reason]
    return [f"{sid} asks {gate.reason!r}, without {missing}"] if missing else []


def _cases() -> list[tuple[str, str]]:
    # v6.11.0's skills follow their whole plan (the points before a menu are asked first): test_plan_followed.py
    return [("alpha", rel) for rel in _alpha_workflows()]


@pytest.mark.parametrize(("tree", "rel"), _cases(), ids=[f"{t}:{r}" for t, r in _cases()])
def test_a_run_blocks_at_the_first_menu_or_halt_it_reaches(projects: dict[str, Path], tree: str, rel: str) -> None:
    """A micro-file router runs as loaded (it asks the mode) and once per mode (``--mode``)."""
    path = projects[tree] / "_bmad" / rel
    router = load_workflow(path, project_root=projects[tree]).meta.get("router") if tree == "alpha" else None
    problems = []
    for mode in [None, *(o["mode"] for o in router["options"] if o["entry"])] if router else [None]:
        problems.extend(f"[{mode}] {p}" for p in _check(projects[tree], path, mode))
    assert not problems, "\n".join(problems)


async def _first_question(project: Path, path: str) -> dict[str, Any]:
    """Drive ``path`` over MCP doing every request but answering no menu; the first question asked, else the end."""
    async with asyncio.timeout(90), Client(stdio_server(project)) as client:
        await call(client, "start_run", {"path": path, "mode": "normal"})
        for _ in range(200):
            current = await call(client, "current_step", {"wait_seconds": 30})
            if current["status"] not in ("waiting_for_work", "waiting_for_answer", "running"):
                return dict(current)
            for request in current.get("requests") or []:
                rid = request["request_id"]
                if request["waiting_for"] == "answer":
                    return dict(request)
                if request["kind"] == "decide":
                    await call(client, "decide", {"value": bool(request["hints"].get("default", False)),
                                                  "reason": "the default branch", "request_id": rid})
                    continue
                if request["kind"] == "generate":
                    await call(client, "write_output", {"content": "x\n", "mode": "section", "request_id": rid,
                                                        "section": request["section"]})
                choice = default_choice(request) if request["kind"] == "choose" else None
                await call(client, "finish", {"summary": "done", "choice": choice, "request_id": rid})
    raise AssertionError(f"{path}: no question and no end over MCP")


@pytest.mark.parametrize("tree", ["alpha"])
def test_over_mcp_each_of_those_menus_comes_back_from_current_step(projects: dict[str, Path], tree: str) -> None:
    """Each run of the tree that blocks at a menu or halt in dry-run asks the same step's options over MCP."""
    problems, asked = [], 0
    for rel in [r for t, r in _cases() if t == tree]:
        project, path = projects[tree], projects[tree] / "_bmad" / rel
        shutil.rmtree(project / "_bmad-output", ignore_errors=True)
        engine = Engine(project_root=project, executor="dry-run", human=HumanChannel(interactive=False))
        run = asyncio.run(engine.start(load_workflow(path, project_root=project)))
        gates = engine.gates.pending() if run.status.value == "blocked" and engine.gates is not None else []
        expected = _presents(run.workflow, gates[0].step_id or "") if gates else []
        if not expected:
            continue
        shutil.rmtree(project / "_bmad-output", ignore_errors=True)
        question = asyncio.run(_first_question(project, f"_bmad/{rel}"))
        options = [f"[{o['key']}] {o['label']}" for o in question.get("menu") or []]
        asked += 1
        if question.get("step_id") != gates[0].step_id or options != expected:
            problems.append(f"{rel}: dry-run blocked at {gates[0].step_id} on {expected}; over MCP: {question}")
    TALLY[f"asked over MCP ({tree})"] = asked
    assert asked and not problems, "\n".join(problems)


def test_the_tally(projects: dict[str, Path]) -> None:
    """Runs last (file order): how many workflows ran, blocked at a menu or halt, completed (see the report)."""
    print(f"\nnormal mode, dry-run, no terminal: {sum(TALLY[k] for k in ('completed', 'blocked', 'failed'))} runs;"
          f" {dict(TALLY)}")
    assert TALLY["blocked at a menu or halt"] > 0 or not TALLY
