"""Micro-file workflows (v6.0.x / alpha.1x shapes) in normal mode with nobody at the terminal: block at each menu."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.heldout.conftest import CONFIG, LOAD_CONFIG, entry, pending, run, write

from stepline import Engine
from stepline.engine._human import HumanChannel
from stepline.families import lint_tree

WF = "_bmad/demo/workflows/party"


def test_a_workflow_md_naming_only_step_02_still_starts_at_step_01(tmp_path: Path) -> None:
    """v6.0.4 core party-mode: workflow.md names only step-02 ('Load step:' in a late section)."""
    project = write(tmp_path, {**CONFIG,
        f"{WF}/workflow.md": """
            ---
            name: party
            description: A facilitated discussion.
            ---

            # Party

            Load config from `{project-root}/_bmad/demo/config.yaml`.

            ## ORCHESTRATION

            Step 01 loads the roster; step 02 runs the discussion.

            ### Conversation Orchestration

            Load step: `./steps/step-02-discuss.md`
            """,
        f"{WF}/steps/step-01-load.md": """
            # Step 1: Load the roster

            Load the roster, then present:

            [C] Continue - Begin the discussion

            #### If 'C' (Continue):

            - Load: `./step-02-discuss.md`
            """,
        f"{WF}/steps/step-02-discuss.md": """
            # Step 2: Discuss

            Run a round of the discussion, then show this menu:

            `[E] Exit - End the session`

            #### If 'E':

            - Read fully and follow: `./step-03-exit.md`
            """,
        f"{WF}/steps/step-03-exit.md": "# Step 3: Exit\n\nSay goodbye.\n",
    })
    engine, result = run(project, WF)
    assert result.status.value == "blocked", result.status
    assert [p.split(":")[0] for p in pending(engine)] == ["step-01-load"], pending(engine)


def test_a_menu_under_an_if_is_not_the_steps_menu_in_a_fresh_project(tmp_path: Path) -> None:
    """v6.0.4 core brainstorming step-01: the resume menu sits under 'If existing session files are found:'."""
    wf = "_bmad/demo/workflows/brainstorm"
    project = write(tmp_path, {**CONFIG,
        f"{wf}/workflow.md": entry("brainstorm", "./steps/step-01-setup.md"),
        f"{wf}/steps/step-01-setup.md": """
            # Step 1: Session setup

            ### 1. Look for earlier sessions

            List the files in `{output_folder}/sessions/`.

            ### 2. Handle Existing Sessions (If Files Found)

            If existing session files are found:

              **[1]** Continue this session
              **[2]** Start a new session

            ### 3. Fresh Setup (If No Files or User Chooses New)

            Ask what the session is about, then present:

            [1] User-Selected Techniques - Browse the library
            [2] AI-Recommended Techniques - Suggestions for your goals

            #### If 1 or 2: load `./step-02-run.md`
            """,
        f"{wf}/steps/step-02-run.md": "# Step 2: Run\n\nRun the session.\n",
    })
    engine, result = run(project, wf)
    assert result.status.value == "blocked", result.status
    # the step's plan first: "Ask what the session is about" (its text's question), then the step's menu
    (asked,) = pending(engine)
    assert asked == "step-01-setup: step-01-setup.md:16: Ask what the session is about, then present:", asked
    (gate,) = engine.gates.pending()
    engine.decide_gate(result.run_id, gate.gate_id, approved=True, by="test", answer="a retro")
    again = Engine(project_root=project, executor="dry-run", human=HumanChannel(interactive=False))
    assert asyncio.run(again.resume(result.run_id)).status.value == "blocked"
    (asked,) = pending(again)
    assert "User-Selected Techniques" in asked and "Continue this session" not in asked, asked


def test_inline_code_is_not_a_menu_option(tmp_path: Path) -> None:
    """alpha.16 bmm prd step-01-init: `stepsCompleted: [1]` on the menu-handling line is no option."""
    wf = "_bmad/demo/workflows/prd"
    project = write(tmp_path, {**CONFIG,
        f"{wf}/workflow.md": entry("prd", "./steps/step-01-init.md"),
        f"{wf}/steps/step-01-init.md": """
            ---
            nextStepFile: './step-02-discovery.md'
            ---

            # Step 1: Init

            Set up the document.

            ### Present MENU OPTIONS

            "[C] Continue - Save this and move to Project Discovery (Step 2 of 11)"

            #### Menu Handling Logic:

            - IF C: Update frontmatter `stepsCompleted: [1]`, then load, read entire file, then execute {nextStepFile}
            """,
        f"{wf}/steps/step-02-discovery.md": "# Step 2: Discovery\n\nDiscover.\n",
    })
    engine, result = run(project, wf)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert "[C]" in asked and "[1]" not in asked, asked


def test_a_first_step_file_that_is_missing_is_named_by_validate(tmp_path: Path) -> None:
    wf = "_bmad/demo/workflows/edit"
    project = write(tmp_path, {**CONFIG,
        f"{wf}/workflow-edit.md": f"""
            ---
            name: edit
            description: Edits a module.
            editWorkflow: './steps-e/step-01-assess.md'
            ---

            # Edit

            {LOAD_CONFIG}.

            Then load, read completely, and execute `{{editWorkflow}}`
            """,
        f"{wf}/steps-e/step-01-load-target.md": "# Step 1: Load the target\n\nAsk for the module path.\n",
    })
    diagnostics, _ = lint_tree(project / wf, project_root=project)
    assert any("step-01-assess.md" in d.message and d.severity == "error" for d in diagnostics), diagnostics


def test_a_csv_file_under_a_variable_the_run_has_not_set_is_the_steps_to_write(tmp_path: Path) -> None:
    """BMad Builder create-module: step-08's `moduleHelpCsvFile: '{build_tracking_targetLocation}/module-help.csv'`
    names the file the step generates, in a folder an earlier step decides; the run failed before the step
    ("CSV data file not found")."""
    wf = "_bmad/demo/workflows/make-module"
    project = write(tmp_path, {**CONFIG,
        f"{wf}/workflow.md": entry("make-module", "./steps/step-01-build.md"),
        f"{wf}/steps/step-01-build.md": """
            ---
            nextStepFile: './step-02-help.md'
            rolesCsvFile: '../data/roles.csv'
            ---

            # Step 1: Build

            Build the module where the brief says (record it as build_tracking_targetLocation). Then load, read the
            full file and then execute `{nextStepFile}`.
            """,
        f"{wf}/data/roles.csv": "role,purpose\nbuilder,builds\n",
        f"{wf}/steps/step-02-help.md": """
            ---
            moduleHelpCsvFile: '{build_tracking_targetLocation}/module-help.csv'
            ---

            # Step 2: Help

            Generate `{moduleHelpCsvFile}` from the module's workflows.
            """,
    })
    _, done = run(project, wf, mode="yolo")
    assert done.status.value == "completed", done.error
    (project / wf / "data/roles.csv").unlink()  # a CSV the workflow ships is still one that must exist
    _, failed = run(project, wf, mode="yolo")
    assert failed.status.value == "failed" and "roles.csv: CSV data file not found" in str(failed.error), failed.error


def test_a_menu_presented_in_a_code_fence_is_the_steps_menu(tmp_path: Path) -> None:
    """alpha.20-alpha.23 quick-dev step-06: "Present choice to user:" then a ``` block of `**[1] Walk through**`
    options: the run completed past it (fences hold examples, but this one is what the step presents)."""
    wf = "_bmad/demo/workflows/quick-dev"
    project = write(tmp_path, {**CONFIG,
        f"{wf}/workflow.md": entry("quick-dev", "./steps/step-01-resolve.md"),
        f"{wf}/steps/step-01-resolve.md": """
            # Step 1: Resolve findings

            An example of a finding, not a menu:

            ```
            [1] F1 (high): the cache is never cleared
            [2] F2 (low): a typo
            ```

            Present choice to user:

            ```
            How would you like to handle these findings?

            **[1] Walk through** - Discuss each finding individually
            **[2] Auto-fix** - Fix the real ones
            ```
            """,
    })
    engine, result = run(project, wf)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert "Walk through" in asked and "Auto-fix" in asked and "F1" not in asked, asked
