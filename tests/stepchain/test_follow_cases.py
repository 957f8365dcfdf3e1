"""Following a plan whose points hang from cases, in normal mode with the dry-run executor and nobody at a terminal
(the default branch of every prose condition): the text's "Otherwise …" to an ``If …`` before it is that default
(one of the two applies, so the person is asked), and whether a person takes part is read from the run (normal
mode: ``If launched headless`` does not hold, ``Interactive:`` does)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stepline import Engine
from stepline.engine._human import HumanChannel
from stepline.families import load_workflow, register_drivers
from stepline.model import Run

register_drivers()

SKILL = """---
name: cases
description: Asks under cases.
---
# Cases

## On Activation

Nothing to set up.

## Open

If the goal is already clear from the prompt, ask the user to confirm it and continue.

Otherwise ask what they want to achieve.

## Mode

1. If launched headless, load `references/headless.md` and follow it.
2. **Interactive:** ask which color they want.
"""


def _start(tmp_path: Path) -> tuple[Engine, Run]:
    skill = tmp_path / "cases"
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (skill / "references" / "headless.md").write_text("# Headless\n\nAsk the caller nothing.\n", encoding="utf-8")
    engine = _engine(tmp_path)
    return engine, asyncio.run(engine.start(load_workflow(skill, project_root=tmp_path)))


def _engine(root: Path) -> Engine:
    return Engine(project_root=root, executor="dry-run", mode="normal", human=HumanChannel(interactive=False))


def _asked(engine: Engine, run: Run) -> tuple[str | None, str]:
    assert run.status.value == "blocked", run.error
    (gate,) = engine.gates.pending()
    return gate.step_id, gate.reason


def test_the_otherwise_to_an_if_is_the_default_branch(tmp_path: Path) -> None:
    engine, run = _start(tmp_path)
    assert _asked(engine, run) == ("section-open", "SKILL.md:15: Otherwise ask what they want to achieve.")


def test_normal_mode_is_interactive_not_headless(tmp_path: Path) -> None:
    engine, run = _start(tmp_path)
    engine.decide_gate(run.run_id, None, approved=True, by="test", answer="ship faster")
    engine = _engine(tmp_path)
    run = asyncio.run(engine.resume(run.run_id))
    assert _asked(engine, run) == ("section-mode", "SKILL.md:20: **Interactive:** ask which color they "
                                                   "want.")
    assert run.steps.get("route-references-headless") is None or \
        run.steps["route-references-headless"].status.value != "completed"
