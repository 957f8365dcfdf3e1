"""Issue 25: a skill whose entry document routes by mode to ``steps-c/``, ``steps-v/``, ``steps-e/`` (the tri-modal
PRD skill of the v6.1–v6.4 releases) is recognised: ``--mode`` selects the mode, normal mode asks the person, and
``validate`` does not call the other modes' step files unreachable. The fixture is such a skill, in small."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stepline import Engine
from stepline.engine._human import HumanChannel
from stepline.errors import UsageError
from stepline.families import lint_path, load_workflow, register_drivers
from stepline.model import Run

register_drivers()
TRI = Path(__file__).resolve().parent / "fixtures" / "modes" / "tri-doc"


def _run(project: Path, mode: str | None = None, run_mode: str = "normal") -> tuple[Engine, Run]:
    engine = Engine(project_root=project, executor="dry-run", mode=run_mode,  # type: ignore[arg-type]
                    human=HumanChannel(interactive=False))
    return engine, asyncio.run(engine.start(load_workflow(TRI, project_root=project, mode=mode)))


def _done(run: Run) -> list[str]:
    return [sid for sid, step in run.steps.items() if step.status.value == "completed"]


def test_validate_reaches_every_modes_step_files(tmp_path: Path) -> None:
    found = lint_path(TRI, project_root=tmp_path)
    assert [d for d in found if d.code == "unreachable-step"] == []


def test_normal_mode_asks_the_person_which_mode(tmp_path: Path) -> None:
    engine, run = _run(tmp_path)
    assert run.status.value == "blocked" and run.steps["mode"].status.value == "blocked"
    (gate,) = engine.gates.pending()
    assert gate.reason.startswith("Select an option: [C] Create  [R] Resume  [V] Validate  [E] Edit")
    engine.decide_gate(run.run_id, gate.gate_id, approved=True, by="test", answer="V")
    resumed = asyncio.run(Engine(project_root=tmp_path, executor="dry-run").resume(run.run_id))
    assert resumed.status.value == "completed"
    assert _done(resumed)[-2:] == ["mode", "step-v-01-check"]
    assert resumed.variables["intent"] == "validate"


@pytest.mark.parametrize(("mode", "steps"), [("create", ["step-01-start"]), ("validate", ["step-v-01-check"]),
                                             ("resume", ["step-01b-resume", "step-02-finish"])])
def test_mode_selects_the_modes_chain(tmp_path: Path, mode: str, steps: list[str]) -> None:
    """--mode create stops at step-01's menu (normal mode); --mode validate runs steps-v/ alone; --mode resume
    (the entry document's [R] Resume, a step-01b-resume file) runs it and what follows it."""
    _, run = _run(tmp_path, mode)
    ran = [sid for sid, step in run.steps.items() if step.status.value in ("completed", "blocked")]
    assert ran == ["activate", "on-activation", "mode", *steps]
    assert run.status.value == ("blocked" if mode == "create" else "completed")


def test_an_unknown_mode_is_refused_naming_the_modes(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_workflow(TRI, project_root=tmp_path, mode="review")
    assert "--mode create or --mode validate or --mode edit or --mode resume" in str(caught.value.hint)


def test_yolo_chooses_as_the_user_and_journals_who(tmp_path: Path) -> None:
    engine, run = _run(tmp_path, run_mode="yolo")
    assert run.status.value == "completed"
    (chosen,) = [e.data["result"] for e in engine.store.open(run.run_id).events()
                 if e.type == "CallRecorded" and e.data["op"] == "mode"]
    assert chosen == {"mode": "create", "reason": "[C] Create chosen", "by": "executor"}
