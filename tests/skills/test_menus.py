"""Issue 25: a skill's step-file menus and halts reach the person, through the step-chain mechanism micro-file
workflows use (stepline.stepchain). v6.11.0's bmad-create-epics-and-stories (step-01 "Confirm … to [C] continue",
step-02/03 "[A] Advanced Elicitation [P] Party Mode [C] Continue", step-04 "[C] Complete Workflow … HALT") and
bmad-code-review (step-01 "HALT. Ask the user: **What do you want to review?**" and its five options). The points a
step hands the person before its menu (its plan: "Ask if any FRs are missing", "Wait for user confirmation") are
asked first, in the text's order; these tests answer them and look at the menu."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from stepline import Engine
from stepline.engine._human import HumanChannel
from stepline.families import load_workflow, register_drivers
from stepline.model import Gate

from .conftest import Recorder

register_drivers()
EPICS = "_bmad/bmm/plan/bmad-create-epics-and-stories"
REVIEW = "_bmad/bmm/ship/bmad-code-review"


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env, check=False)


def _run_id(project: Path) -> str:
    (run_dir,) = (project / ".stepline" / "runs").iterdir()
    return run_dir.name


def _events(engine: Engine, run_id: str, op: str) -> list[dict[str, Any]]:
    return [e.data for e in engine.store.open(run_id).events()
            if e.type == "CallRecorded" and e.data.get("op") == op]


def _pending(project: Path, run_id: str) -> dict[str, Any]:
    (gate,) = [g for g in Engine(project_root=project).store.open(run_id).read("gates.json", []) or []
               if g["status"] == "pending"]
    return dict(gate)


def _answer_until_menu(project: Path, run_id: str) -> tuple[dict[str, Any], str]:
    """Answer the points a step asks before its menu (the first option, or a sentence), resuming after each, until
    the run blocks at a menu: that gate, and what the last command printed."""
    printed = ""
    for _ in range(20):
        gate = _pending(project, run_id)
        if "/menu/" in gate["gate_id"]:
            return gate, printed
        choices = gate.get("choices") or []
        answer = choices[0]["key"] if choices else "nothing to add"
        assert _cli(project, "answer", run_id, answer, "--by", "cli").returncode == 0
        again = _cli(project, "resume", run_id)
        assert again.returncode == 9, again.stdout + again.stderr
        printed = again.stdout + again.stderr
    raise AssertionError(f"{run_id}: no menu in 20 questions")


def test_nobody_at_the_terminal_blocks_at_each_menu_answer_and_resume_go_on(v611: Path) -> None:
    """Exit 9 at each question, step-01's [C] among them; `stepline answer` + `resume` move to step-02, whose
    questions and menu block in turn."""
    first = _cli(v611, "run", EPICS, "--executor", "dry-run")
    assert first.returncode == 9, first.stdout + first.stderr
    run_id = _run_id(v611)
    status = _cli(v611, "status", run_id)
    assert "step-01-validate-prerequisites" in status.stdout and "blocked" in status.stdout
    menu, printed = _answer_until_menu(v611, run_id)
    assert menu["step_id"] == "step-01-validate-prerequisites" and "[C] continue" in printed
    answered = _cli(v611, "answer", run_id, "C", "--by", "cli")
    assert answered.returncode == 0, answered.stdout + answered.stderr
    again = _cli(v611, "resume", run_id)
    assert again.returncode == 9, again.stdout + again.stderr
    menu, printed = _answer_until_menu(v611, run_id)
    assert menu["step_id"] == "step-02-design-epics" and "[A] Advanced Elicitation" in printed
    events = Engine(project_root=v611).store.open(run_id).events()
    decided = [e.data for e in events if e.type == "AnswerGiven"]
    assert ("ask:step-01-validate-prerequisites/1/menu/0", "C", "cli") in [
        (d["gate_id"], d.get("answer"), d.get("by")) for d in decided]


def _blocked_on(project: Path, skill: Path) -> Gate:
    """The one question a normal run of ``skill`` (dry-run, nobody at a terminal) blocks on."""
    engine = Engine(project_root=project, executor="dry-run", human=HumanChannel(interactive=False))
    run = asyncio.run(engine.start(load_workflow(skill, project_root=project)))
    assert run.status.value == "blocked", (run.status, run.error)
    (gate,) = engine.gates.pending()
    return gate


def test_a_halt_without_a_menu_blocks_on_its_question(v611: Path) -> None:
    """bmad-code-review's step-01 says "HALT. Ask the user: **What do you want to review?**" and lists five
    options: it asks them (not a "[C] Continue" in their place)."""
    engine = Engine(project_root=v611, executor="dry-run", human=HumanChannel(interactive=False))
    run = asyncio.run(engine.start(load_workflow(v611 / REVIEW, project_root=v611)))
    assert run.status.value == "blocked"
    (gate,) = engine.gates.pending()
    assert gate.step_id == "step-01-gather-context" and "What do you want to review?" in gate.reason
    assert [(c.key, c.label) for c in gate.choices] == [
        ("1", "Uncommitted changes"), ("2", "Staged changes only"), ("3", "Branch diff"),
        ("4", "Specific commit range"), ("5", "Provided diff or file list")]
    assert run.steps["step-02-review"].status.value == "pending"


def test_yolo_answers_each_menu_as_the_user_and_journals_who(v611: Path) -> None:
    engine = Engine(project_root=v611, executor="dry-run", mode="yolo")
    run = asyncio.run(engine.start(load_workflow(v611 / EPICS, project_root=v611)))
    assert run.status.value == "completed"
    menus = _events(engine, run.run_id, "menu")
    assert [m["key"].split("/")[0] for m in menus] == ["step-01-validate-prerequisites", "step-02-design-epics",
                                                       "step-03-create-stories", "step-04-final-validation"]
    assert all(m["result"] == {"choice": "C", "by": "executor"} for m in menus)
    assert menus[1]["args"]["options"] == ["[A] Advanced Elicitation", "[P] Party Mode", "[C] Continue"]


def test_a_side_trip_runs_the_elicitation_skill_and_presents_the_menu_again(v611: Path) -> None:
    """[A] at step-02 hands the executor bmad-advanced-elicitation's SKILL.md, then step-02's menu is asked again."""
    answers = ["C", "A"]

    def prompt(question: str, choices: list[str] | None) -> str:
        """The menus' answers in order, then [C]; a point before a menu: its first option, or a sentence."""
        if choices and "C" in choices:
            return answers.pop(0) if answers else "C"
        return (choices or ["nothing to add"])[0]

    recorder = Recorder()
    engine = Engine(project_root=v611, executor=recorder, human=HumanChannel(interactive=True, prompt=prompt))
    run = asyncio.run(engine.start(load_workflow(v611 / EPICS, project_root=v611)))
    assert run.status.value == "completed", run.error
    trips = [h for h in _events(engine, run.run_id, "handover") if h["result"]["role"] == "advanced-elicitation"]
    assert len(trips) == 1 and trips[0]["result"]["path"].endswith("bmad-advanced-elicitation/SKILL.md")
    asked = [e.data for e in engine.store.open(run.run_id).events() if e.type == "AnswerGiven"]
    menus = [a["gate_id"].split("/", 2)[-1] for a in asked if "step-02" in a["gate_id"] and "/menu/" in a["gate_id"]]
    assert menus == ["menu/0", "menu/1"]
    assert all(a["by"] == "terminal" for a in asked)


def test_over_mcp_a_skill_menu_comes_back_from_current_step_as_a_question(v611: Path) -> None:
    """Through the MCP server (stdio, the mcp SDK client): an agent that finishes step-01's work without the menu's
    choice gets the menu back from current_step as waiting_for_answer with its options; one that passes the
    person's choice with finish (step-02) is not asked again."""
    from mcp import Client

    from interfaces.mcp_agent import call, stdio_server

    async def main() -> list[dict[str, Any]]:
        asked: list[dict[str, Any]] = []
        async with asyncio.timeout(90), Client(stdio_server(v611)) as client:
            run_id = (await call(client, "start_run", {"path": EPICS, "mode": "normal"}))["run_id"]
            while True:
                current = await call(client, "current_step", {"wait_seconds": 30})
                if current["status"] not in ("waiting_for_work", "waiting_for_answer", "running"):
                    raise AssertionError(current)
                for request in current.get("requests") or []:
                    rid = request["request_id"]
                    if request["waiting_for"] == "answer":
                        asked.append({**request, "status": current["status"]})
                        keys = [o["key"] for o in request.get("menu") or []] or request.get("choices") or []
                        answer = "C" if "C" in keys else keys[0] if keys else "nothing to add"
                        await call(client, "answer", {"run_id": run_id, "request_id": rid, "answer": answer})
                    elif request["step_id"] == "step-03-create-stories":
                        return asked
                    else:  # step-01: finished without the choice; step-02: with the person's [C]
                        menu = [o["key"] for o in request.get("menu") or []]
                        choice = "C" if request["step_id"] == "step-02-design-epics" and "C" in menu else None
                        await call(client, "finish", {"request_id": rid, "choice": choice, "summary": "done"})

    asked = asyncio.run(main())
    # the points before the menu were asked first, in the text's order; step-02's own are asked, not its menu
    menus = [q for q in asked if "C" in (q["choices"] or [])]
    assert [(q["status"], q["step_id"], q["choices"]) for q in menus] == [
        ("waiting_for_answer", "step-01-validate-prerequisites", ["C"])]
    assert [(o["key"], o["label"]) for o in menus[0]["menu"]] == [("C", "continue")]
    assert asked[0]["step_id"] == "step-01-validate-prerequisites" and asked[0] is not menus[0]
    assert {q["step_id"] for q in asked} == {"step-01-validate-prerequisites", "step-02-design-epics"}


def test_a_missing_file_in_a_later_steps_menu_branch_does_not_refuse_the_skill(tmp_path: Path) -> None:
    """v6.3-v6.5's bmad-edit-prd shape: step-e-02's [V] names `./steps-v/…`, a file of another skill. The skill
    runs (its first menu blocks in normal mode); validate still names the missing file."""
    from stepline.families import lint_path

    skill = tmp_path / "edit-doc"
    (skill / "steps-e").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: edit-doc\ndescription: Edits a doc.\n---\n\nFollow ./workflow.md.\n",
                                    encoding="utf-8")
    (skill / "workflow.md").write_text("# Edit\n\nRead fully and follow: `./steps-e/step-e-01-find.md`\n",
                                       encoding="utf-8")
    (skill / "steps-e" / "step-e-01-find.md").write_text(
        "# Find\n\n**[C] Continue** to editing\n\n- IF C: read fully and follow: `./step-e-02-edit.md`\n",
        encoding="utf-8")
    (skill / "steps-e" / "step-e-02-edit.md").write_text(
        "# Edit\n\n**[V] Validate** | **[X] Exit**\n\n#### Menu Handling Logic:\n\n"
        "- IF V (Validate): read fully and follow: `./steps-v/step-v-01-check.md`\n- IF X (Exit): exit\n",
        encoding="utf-8")
    gate = _blocked_on(tmp_path, skill)
    assert gate.step_id == "step-e-01-find" and "[C] Continue to editing" in gate.reason
    missing = [d for d in lint_path(skill, project_root=tmp_path) if d.code == "missing-file"]
    assert [(Path(d.path).name, d.line) for d in missing] == [("step-e-02-edit.md", 7)]


def test_a_sections_skill_halt_with_bold_bulleted_choices_blocks_on_them(tmp_path: Path) -> None:
    """The newest bmad-advanced-elicitation's shape: a section says "HALT and give the user a choice:" and lists
    `- **Reshuffle** — …`, `- **List all** — …`, `- **Proceed** — …`: normal mode asks them, keyed by initials."""
    skill = tmp_path / "elicit"
    skill.mkdir()
    (skill / "SKILL.md").write_text(
        "---\nname: elicit\ndescription: Refines the last output.\n---\n\n# Elicit\n\n## On Activation\n\n"
        "Load the catalog.\n\n## The Menu\n\nHALT and give the user a choice:\n\n"
        "- The five offered methods, listed by name.\n- **Reshuffle** — five new options.\n"
        "- **List all** — the full catalog.\n- **Proceed** — no further elicitation.\n\n## Running\n\nRun it.\n",
        encoding="utf-8")
    gate = _blocked_on(tmp_path, skill)
    assert gate.reason.startswith("Select an option: [R] Reshuffle  [L] List all  [P] Proceed"), gate.reason
