"""A sections skill with intent modes: the default mode goes on into the sections after the last one it names
that no mode names, hands over to or uses for standing rules (v6.11.0 bmad-product-brief's Create begins in
``## Discovery``; its ``## Finalize`` follows in the text and is named by no mode)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stepline import Engine
from stepline.families import load_workflow


def _skill(project: Path, name: str) -> Path:
    return next(p.parent for p in (project / "_bmad").rglob("SKILL.md") if p.parent.name == name)


def test_the_default_mode_goes_on_into_a_section_no_mode_names(v611: Path) -> None:
    workflow = load_workflow(_skill(v611, "bmad-product-brief"), project_root=v611)
    (create, *_) = next(s for s in workflow.steps if s.id == "intent").meta["modes"]
    assert create["name"] == "Create" and create["sections"] == ["section-discovery", "section-finalize"]
    assert "section-constraints" not in {s.id for s in workflow.steps}  # standing rules, not a step
    engine = Engine(project_root=v611, executor="dry-run", mode="yolo")
    run = asyncio.run(engine.start(workflow))
    assert run.status.value == "completed", run.error
    done = [e.step_id for e in engine.store.open(run.run_id).events() if e.type == "WorkflowStepCompleted"]
    ours = list(dict.fromkeys(d.split("@")[0] for d in done if d and d.startswith("section-")))
    assert ours == ["section-discovery", "section-finalize"]  # its memlog loop may take it twice


def test_a_section_a_mode_already_reaches_is_not_added(v611: Path) -> None:
    """bmad-prd's Create names Discovery and Finalize; its Reviewer Gate is handed over to from Finalize."""
    workflow = load_workflow(_skill(v611, "bmad-prd"), project_root=v611)
    (create, *_) = next(s for s in workflow.steps if s.id == "intent").meta["modes"]
    assert create["sections"] == ["section-discovery", "section-finalize"]
