"""A legacy step's ``<ask>`` that lists its options (``Continue [c] or Edit [e]?``) and a prose question whose
choice the plan read (``Ask user for mode preference:`` over a bold list) are asked with those options, labels
and all: the pending question (exit 9) offers them, and another answer is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stepline import Engine
from stepline.engine import HumanChannel
from stepline.errors import SteplineError
from stepline.families import load_workflow

WORKFLOW = """name: change
config_source: "{project-root}/_bmad/bmm/config.yaml"
installed_path: "{project-root}/wf"
instructions: "{installed_path}/instructions.xml"
"""
INSTRUCTIONS = """<workflow>
  <step n="1" goal="Set up">
    <action>Ask user for mode preference:</action>
    - **Incremental** (recommended): Refine each edit collaboratively
    - **Batch**: Present all changes at once for review
  </step>
  <step n="2" goal="Review">
    <ask>Review complete proposal. Continue [c] or Edit [e]?</ask>
  </step>
</workflow>
"""


def _project(root: Path, instructions: str) -> None:
    (root / "_bmad" / "bmm").mkdir(parents=True)
    (root / "_bmad" / "bmm" / "config.yaml").write_text("user_name: Ada\n", encoding="utf-8")
    (root / "wf").mkdir()
    (root / "wf" / "workflow.yaml").write_text(WORKFLOW, encoding="utf-8")
    (root / "wf" / "instructions.xml").write_text(instructions, encoding="utf-8")


def _engine(root: Path) -> Engine:
    return Engine(project_root=root, executor="dry-run", mode="normal", human=HumanChannel(interactive=False))


def _offered(engine: Engine) -> list[tuple[str, str]]:
    (gate,) = engine.gates.pending()
    return [(c.key, c.label) for c in gate.choices]


def test_an_asks_listed_options_are_offered(tmp_path: Path) -> None:
    _project(tmp_path, INSTRUCTIONS)

    def engine() -> Engine:
        return _engine(tmp_path)

    first = engine()
    run = asyncio.run(first.start(load_workflow(tmp_path / "wf", project_root=tmp_path)))
    assert run.status.value == "blocked", run.error
    assert _offered(first) == [("I", "Incremental"), ("B", "Batch")]
    first.decide_gate(run.run_id, None, approved=True, by="test", answer="B")
    second = engine()
    run = asyncio.run(second.resume(run.run_id))
    while run.status.value == "blocked" and _offered(second) != [("C", "Continue"), ("E", "Edit")]:
        (gate,) = second.gates.pending()  # the runtime's own "continue to the next step?" between steps
        second.decide_gate(run.run_id, None, approved=True, by="test", answer=gate.choices[0].key)
        second = engine()
        run = asyncio.run(second.resume(run.run_id))
    assert _offered(second) == [("C", "Continue"), ("E", "Edit")]
    with pytest.raises(SteplineError):
        second.decide_gate(run.run_id, None, approved=True, by="test", answer="maybe")


HALT_CHOICE = """<workflow>
  <step n="1" goal="Review">
    <action>Present the complete proposal to the user</action>
    <action>HALT and give the user a choice:
    - **Continue** — proceed to approval
    - **Edit** — revise the proposal first
    </action>
  </step>
  <step n="2" goal="Check">
    <action>HALT: the PRD is missing; cannot go on</action>
  </step>
</workflow>
"""


def test_a_halt_that_gives_the_person_a_choice_asks_it(tmp_path: Path) -> None:
    """``<action>HALT and give the user a choice: - **Continue** … - **Edit** …</action>`` (how a newer release
    writes its ``<ask>``) is the person's turn with those options; a HALT that only stops still fails the run."""
    _project(tmp_path, HALT_CHOICE)

    def engine() -> Engine:
        return _engine(tmp_path)

    first = engine()
    run = asyncio.run(first.start(load_workflow(tmp_path / "wf", project_root=tmp_path)))
    assert run.status.value == "blocked", run.error
    assert _offered(first) == [("C", "Continue"), ("E", "Edit")]
    first.decide_gate(run.run_id, None, approved=True, by="test", answer="C")
    second = engine()
    run = asyncio.run(second.resume(run.run_id))
    while run.status.value == "blocked":
        (gate,) = second.gates.pending()  # the runtime's own "continue to the next step?" between steps
        second.decide_gate(run.run_id, None, approved=True, by="test", answer=gate.choices[0].key)
        second = engine()
        run = asyncio.run(second.resume(run.run_id))
    assert run.status.value == "failed" and "HALT at step 2" in (run.error or ""), run.error
