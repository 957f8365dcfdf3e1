"""Walk skills in normal mode as a person would, with nobody at a terminal: the dry-run executor, each stop (exit
9's pending question) answered and the run resumed, up to its end or ``--max`` stops; print the sequence of stops
(step, point, options) and the routes and hand-overs each run took, for a reader to judge against the text.

Usage: .venv/bin/python bench/plan_walk.py [TREE] [--skill NAME]... [--max 30] [--first] [--json OUT]

TREE is ``v611`` (the corpus's BMAD v6.11.0, the default), ``ccw`` (its CCW v7.3.14 skills), a BMAD source tree
(a checkout or ``git archive`` of a release, or a module with ``src/``), or an installed project (``--project``).
An answer is the first option offered (the next one when the same question comes back), ``done`` to a
conversation, else a short sentence. ``--first`` stops
each run at its first stop (the held-out check); ``--json`` writes every walk as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from stepline import Engine
from stepline.bmad import install_bmad
from stepline.engine._human import HumanChannel
from stepline.errors import SteplineError
from stepline.families import load_workflow, register_drivers
from stepline.model import Gate

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
TREES = {"v611": CORPUS / "bmad" / "v6.11.0", "ccw": CORPUS / "ccw" / "v7.3.14"}
FREE_TEXT = "Nothing more to add; go on."


def answer_to(gate: Gate, before: list[dict[str, Any]]) -> str:
    """What the walking person answers: the first option (the next one when the same question comes back, so a
    menu whose first option is a side trip ends), ``done`` to a conversation, else a short sentence."""
    if gate.choices:
        again = sum(1 for stop in before if stop["question"] == gate.reason)
        return gate.choices[min(again, len(gate.choices) - 1)].key
    return "done" if "answer `done`" in gate.reason else FREE_TEXT


def project_of(tree: str, where: Path, *, installed: bool = False) -> tuple[Path, list[Path]]:
    """The project the tree is installed into (under ``where``) and the skills to walk in it."""
    if installed:
        project = Path(tree).resolve()
    elif tree == "ccw":
        project = where / "p"
        shutil.copytree(TREES["ccw"] / ".claude", project / ".claude")
    else:
        project = where / "p"
        project.mkdir()
        install_bmad(TREES.get(tree, Path(tree)).resolve(), project, {})
    skills = sorted({p.parent for p in project.glob(".claude/skills/*/SKILL.md")}
                    | {p.parent for p in project.glob("_bmad/**/SKILL.md")})
    return project, skills


def _leaves(engine: Engine, run_id: str) -> list[str]:
    events = engine.store.open(run_id).events()
    return [f"{e.step_id} -> {e.data['args']['target']}" for e in events
            if e.type == "CallRecorded" and e.data["op"] == "leave"]


def walk(project: Path, skill: Path, *, limit: int, first: bool) -> dict[str, Any]:
    """One normal-mode run of ``skill``, each stop answered and resumed; its stops, end and the leaves it took."""
    for name in ("_bmad-output", ".stepline"):
        shutil.rmtree(project / name, ignore_errors=True)
    out: dict[str, Any] = {"skill": str(skill.relative_to(project)), "stops": []}
    try:
        workflow = load_workflow(skill, project_root=project)
    except SteplineError as exc:
        return {**out, "status": "does not load", "error": exc.format_message()}
    engine = Engine(project_root=project, executor="dry-run", mode="normal", human=HumanChannel(interactive=False))
    run = asyncio.run(engine.start(workflow))
    while run.status.value == "blocked" and len(out["stops"]) < limit:
        pending = [g for g in engine.gates.pending() if g.kind == "question"] if engine.gates else []
        if len(pending) != 1:
            out["note"] = f"{len(pending)} questions pending: {run.blocked_reason}"
            break
        (gate,) = pending
        answer = answer_to(gate, out["stops"])
        out["stops"].append({"step": gate.step_id, "gate": gate.gate_id, "question": gate.reason,
                             "options": [f"[{c.key}] {c.label}" if c.label and c.label != c.key else c.key
                                         for c in gate.choices], "answer": answer})
        if first:
            break
        engine.decide_gate(run.run_id, gate.gate_id, approved=True, by="walker", answer=answer)
        engine = Engine(project_root=project, executor="dry-run", human=HumanChannel(interactive=False))
        run = asyncio.run(engine.resume(run.run_id))
    out["status"] = run.status.value
    if run.error:
        out["error"] = str(run.error)
    out["steps"] = [sid for sid, step in run.steps.items() if step.status.value == "completed"]
    out["leaves"] = _leaves(engine, run.run_id)
    return out


def show(result: dict[str, Any]) -> None:
    print(f"== {result['skill']}: {result['status']}, {len(result['stops'])} stop(s)"
          + (f" — {result['error']}" if result.get("error") else "") + (f" — {result['note']}" if result.get("note")
                                                                         else ""))
    for number, stop in enumerate(result["stops"], start=1):
        print(f"  {number:2}. {stop['step']}: {stop['question'][:220]}")
        if stop["options"]:
            print(f"      options: {' | '.join(stop['options'])}")
        print(f"      answered: {stop['answer']}")
    for leave in result.get("leaves") or []:
        print(f"      left: {leave}")
    print(f"      steps completed: {', '.join(result.get('steps') or [])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", default="v611")
    parser.add_argument("--project", action="store_true", help="TREE is an installed project")
    parser.add_argument("--skill", action="append", default=[], help="only the skills of this folder name")
    parser.add_argument("--max", type=int, default=30)
    parser.add_argument("--first", action="store_true", help="stop each run at its first stop")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    register_drivers()
    with tempfile.TemporaryDirectory() as tmp:
        project, skills = project_of(args.tree, Path(tmp), installed=args.project)
        results = []
        for skill in skills:
            if args.skill and skill.name not in args.skill:
                continue
            result = walk(project, skill, limit=args.max, first=args.first)
            show(result)
            results.append(result)
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
    ended = sum(r["status"] == "completed" and not r["stops"] for r in results)
    print(f"\n{len(results)} runs; {ended} completed without a stop; "
          f"{sum(r['status'] not in ('completed', 'blocked') for r in results)} failed or did not load")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
