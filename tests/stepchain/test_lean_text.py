"""Control prose the runtime owns is left out of a step file sent to the executor (R-X7); judgement
guidance stays."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stepline import Engine
from stepline.bmad import install_bmad
from stepline.engine._config import PromptsSection, RuntimeConfig
from stepline.executors import DryRunExecutor, StepRequest, StepSession
from stepline.families import load_workflow
from stepline.stepchain._lean_text import lean_step_text

# Not `from conftest import CORPUS`: in a whole-suite run `conftest` is whichever folder's conftest came last.
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"

STEP = """---
name: 'step-02-vision'
nextStepFile: './step-03-users.md'
---

# Step 2: Product Vision Discovery

## STEP GOAL:

Define the core problem and the unique value proposition.

## MANDATORY EXECUTION RULES (READ FIRST):

- 📖 CRITICAL: Read the complete step file before taking any action
- 🔄 CRITICAL: When loading next step with 'C', ensure entire file is read
- ✅ You are a product-focused Business Analyst facilitator
- 🎯 Focus only on product vision, problem, and solution discovery

## EXECUTION PROTOCOLS:

- 💾 Generate vision content collaboratively with user
- 📖 Update frontmatter `stepsCompleted: [1, 2]` before loading next step
- **CRITICAL:** Save the validation report BEFORE loading next step.

### 6. Generate Executive Summary Content

```markdown
## Executive Summary
- IF C: this fenced line is content, not a menu
```

### 7. Present MENU OPTIONS

**Select an Option:** [A] Advanced Elicitation [P] Party Mode [C] Continue

#### Menu Handling Logic:

- IF C: Save content to {outputFile}, then load {nextStepFile}

## CRITICAL STEP COMPLETION NOTE

ONLY WHEN [C continue option] is selected will you load `{nextStepFile}`.

## Document Menu YAML

Write the agent's menu items as YAML.
"""


def test_menus_next_step_loading_and_frontmatter_rules_are_left_out() -> None:
    lean = lean_step_text(STEP)
    assert lean.frontmatter and "nextStepFile" not in lean.text
    assert lean.sections == ("7. Present MENU OPTIONS", "CRITICAL STEP COMPLETION NOTE")
    for gone in ("Read the complete step file", "When loading next step", "Update frontmatter",
                 "Select an Option", "Menu Handling Logic", "ONLY WHEN"):
        assert gone not in lean.text, gone
    assert lean.lines == 3


def test_judgement_guidance_and_content_stay() -> None:
    text = lean_step_text(STEP).text
    for kept in ("# Step 2: Product Vision Discovery", "Define the core problem",
                 "You are a product-focused Business Analyst facilitator", "Focus only on product vision",
                 "Generate vision content collaboratively", "Save the validation report BEFORE loading next step",
                 "- IF C: this fenced line is content", "## Document Menu YAML", "Write the agent's menu items"):
        assert kept in text, kept


def test_a_file_without_control_prose_is_unchanged_but_for_its_frontmatter() -> None:
    body = "# Do the thing\n\nWrite the report.\n"
    assert lean_step_text(body).text == body
    assert lean_step_text("---\na: 1\n---\n" + body).text == body


class _Recorder(DryRunExecutor):
    def __init__(self) -> None:
        super().__init__()
        self.contents: list[str] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.kind == "work":
            self.contents.append(request.content)
        await super().perform(request, session)


@pytest.mark.corpus
@pytest.mark.parametrize("full", [False, True])
def test_the_brief_is_sent_lean_the_journal_says_what_was_left_out_and_a_switch_sends_it_whole(
        tmp_path: Path, full: bool) -> None:
    """create-product-brief: no menu text reaches the executor (the menu still works: the run completes,
    every step chose [C]); each hand-over records the sections left out and the full text's sha256;
    ``prompts.full_step_text`` sends the files whole."""
    source = CORPUS / "bmad" / "v6.0.0-alpha.23"
    if not source.is_dir():
        pytest.skip("the corpus is not present")
    install_bmad(source, tmp_path, {"user_name": "Ada"})
    executor = _Recorder()
    engine = Engine(project_root=tmp_path, executor=executor, mode="yolo",
                    config=RuntimeConfig(prompts=PromptsSection(full_step_text=full)))
    workflow = tmp_path / "_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md"
    run = asyncio.run(engine.start(load_workflow(workflow, project_root=tmp_path)))
    assert run.status.value == "completed", run.error
    assert all(step.choice in (None, "C") for step in run.steps.values())
    menus = [content for content in executor.contents if "Select an Option" in content]
    assert bool(menus) == full
    handovers = [event.data["result"] for event in engine.store.open(run.run_id).events()
                 if event.type == "CallRecorded" and event.data.get("op") == "handover"]
    assert handovers and all(len(entry["sha256"]) == 64 for entry in handovers)
    if full:
        assert all(entry["left_out"] is None for entry in handovers)
    else:
        assert any("MENU OPTIONS" in " ".join(entry["left_out"]["sections"]) for entry in handovers)


def test_sections_the_step_files_repeat_go_once_to_the_standing_text() -> None:
    """A section repeated word for word in at least half of a workflow's step files is shared: each step's lean
    text leaves it out (and says so), a section of one file stays; workflow.md keeps its goal and role only."""
    from stepline.stepchain._lean_text import shared_sections, workflow_standing

    rules = "### Universal Rules:\n\n- Speak as a facilitator\n- Never invent the user's facts\n"
    steps = [f"# Step {n}\n\n## RULES\n\n{rules}\n### Step-Specific Rules:\n\n- only step {n}\n\n## Do\n\nWork {n}.\n"
             for n in range(1, 4)]
    shared = shared_sections([lean_step_text(text).text for text in steps])
    assert shared == (rules + "\n",)
    lean = lean_step_text(steps[1], shared)
    assert "Never invent" not in lean.text and "only step 2" in lean.text and "Work 2." in lean.text
    assert lean.shared == ("Universal Rules:",) and lean.left_out["shared"] == ["Universal Rules:"]
    assert shared_sections([steps[0]]) == ()  # one file repeats nothing
    entry = ("---\nname: w\n---\n\n# W\n\n**Goal:** a brief.\n\n**Your Role:** an analyst.\n\n---\n\n"
             "## WORKFLOW ARCHITECTURE\n\n- **Just-In-Time Loading**: only the current step\n\n"
             "## INITIALIZATION SEQUENCE\n\n### 1. Configuration Loading\n\nLoad config.yaml\n\n"
             "## RESEARCH BEHAVIOR\n\n- cite sources\n")
    standing = workflow_standing(entry)
    assert "**Goal:** a brief." in standing and "an analyst" in standing and "cite sources" in standing
    assert "Just-In-Time" not in standing and "config.yaml" not in standing and "name: w" not in standing


def test_a_line_that_sends_the_model_to_another_step_file_is_control_prose() -> None:
    """'If a step directs you to another snapshot file, read it fully and follow it' is the runtime's routing."""
    text = "# W\n\n**Goal:** ship it.\n\n**CRITICAL:** If a step directs you to another snapshot file, read it fully.\n"
    lean = lean_step_text(text)
    assert "ship it" in lean.text and "directs you" not in lean.text and lean.lines == 1
