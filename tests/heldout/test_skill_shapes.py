"""Agent Skills with the shapes of v6.3-v6.10 and newer releases, in normal mode with nobody at the terminal."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.heldout.conftest import CONFIG, pending, run, write

SKILL = "_bmad/demo/bmad-make-story"


@pytest.mark.xfail(strict=True, reason="chains (skills/): a SKILL.md that follows ./workflow.md whose body is "
                   "<workflow><step n=…> XML (v6.3-v6.10 create-story, dev-story, correct-course, code-review, "
                   "sprint-planning, document-project; v6.11 ship/bmad-correct-course) runs as one 'Execution' "
                   "section: its <ask> and HALT are never asked, a normal run completes")
def test_a_skill_whose_workflow_md_holds_xml_steps_blocks_at_its_ask(tmp_path: Path) -> None:
    project = write(tmp_path, {**CONFIG,
        f"{SKILL}/SKILL.md": """
            ---
            name: bmad-make-story
            description: 'Creates the next story. Use when the user says "create the next story"'
            ---

            Follow the instructions in ./workflow.md.
            """,
        f"{SKILL}/workflow.md": """
            # Make Story Workflow

            **Goal:** Create the next story file.

            ## INITIALIZATION

            Load config from `{project-root}/_bmad/demo/config.yaml` and resolve `user_name`, `output_folder`.

            ## EXECUTION

            <workflow>

            <step n="1" goal="Choose the story">
              <ask>Choose option [1] the next backlog story, or [q] to quit:</ask>
              <check if="user chooses q">
                <action>HALT - No work needed</action>
              </check>
            </step>

            <step n="2" goal="Write the story">
              <action>Write the story file to {output_folder}/story.md</action>
            </step>

            </workflow>
            """,
    })
    engine, result = run(project, SKILL)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert "[1]" in asked and "[q]" in asked, asked


@pytest.mark.xfail(strict=True, reason="chains (skills/): a file named only in one menu branch of a later step "
                   "file and missing (v6.3-v6.5 bmad-edit-prd step-e-03: './steps-v/step-v-01-discovery.md', which "
                   "lives in another skill) refuses the whole skill (exit 4) before its first step")
def test_a_missing_file_in_a_later_menu_branch_does_not_refuse_the_skill(tmp_path: Path) -> None:
    skill = "_bmad/demo/bmad-edit-doc"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": """
            ---
            name: bmad-edit-doc
            description: 'Edits a document. Use when the user says "edit the doc"'
            ---

            Follow the instructions in ./workflow.md.
            """,
        f"{skill}/workflow.md": """
            # Edit Doc

            Load config from `{project-root}/_bmad/demo/config.yaml`.

            Read fully and follow: `./steps-e/step-e-01-edit.md`
            """,
        f"{skill}/steps-e/step-e-01-edit.md": """
            # Step E-1: Discover

            Find the document, then present:

            **[C] Continue** to editing

            - IF C: read fully and follow: `./step-e-02-edit.md`
            """,
        f"{skill}/steps-e/step-e-02-edit.md": """
            # Step E-2: Edit

            Make the edits, then present:

            **[V] Validate** | **[X] Exit**

            #### Menu Handling Logic:

            - ALWAYS halt and wait for user input
            - IF V (Validate): read fully and follow: `./steps-v/step-v-01-check.md`
            - IF X (Exit): Display summary and exit
            """,
    })
    engine, result = run(project, skill)
    assert result.status.value == "blocked", (result.status, result.error)
    (asked,) = pending(engine)
    assert asked.startswith("step-e-01") and "[C]" in asked, asked


@pytest.mark.xfail(strict=True, reason="chains (stepchain/skills): 'HALT and give the user a choice:' followed by "
                   "bold bullet options (newest bmad-advanced-elicitation, after v6.11: Reshuffle / List all / "
                   "Proceed) is not a halt: a normal run with nobody at the terminal completes")
def test_a_halt_with_bulleted_bold_choices_blocks_and_asks_them(tmp_path: Path) -> None:
    skill = "_bmad/demo/bmad-elicit"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": """
            ---
            name: bmad-elicit
            description: 'Pushes the model to refine its last output. Use when the user says "elicit"'
            ---

            # Elicit

            ## On Activation

            Load the catalog of methods.

            ## The Menu

            HALT and give the user a choice:

            - The five offered methods, listed by name. The user may pick one or several.
            - **Reshuffle** — replace the list with five new options.
            - **List all** — show the full catalog with descriptions.
            - **Proceed** — no further elicitation.

            - If the user chooses **Proceed**: done.

            ## Running a Method

            Run the chosen method on the target.
            """,
    })
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert all(choice in asked for choice in ("Reshuffle", "List all", "Proceed")), asked
