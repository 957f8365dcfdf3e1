"""Agent Skills with the shapes of v6.3-v6.10 and newer releases, in normal mode with nobody at the terminal."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.heldout.conftest import CONFIG, LOAD_CONFIG, STORY_XML, front, pending, run, write

from stepline.errors import UsageError
from stepline.families import lint_tree, load_workflow

SKILL = "_bmad/demo/bmad-make-story"


def test_a_skill_whose_workflow_md_holds_xml_steps_blocks_at_its_ask(tmp_path: Path) -> None:
    project = write(tmp_path, {**CONFIG,
        f"{SKILL}/SKILL.md": front("bmad-make-story", 'Creates the next story. Use when the user says "next story"',
                                   "Follow the instructions in ./workflow.md.\n"),
        f"{SKILL}/workflow.md": f"# Make Story Workflow\n\n{LOAD_CONFIG}.\n\n## EXECUTION\n\n{STORY_XML}",
    })
    engine, result = run(project, SKILL)
    assert result.status.value == "blocked", result.status
    assert result.workflow.name == "bmad-make-story", result.workflow
    (asked,) = pending(engine)
    assert "[1]" in asked and "[q]" in asked, asked
    assert run(project, SKILL, mode="yolo")[1].status.value == "completed"


def test_a_missing_file_in_a_later_menu_branch_does_not_refuse_the_skill(tmp_path: Path) -> None:
    """v6.3-v6.5 bmad-edit-prd: step-e-03's [V] names ./steps-v/…, which lives in another skill."""
    skill = "_bmad/demo/bmad-edit-doc"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("bmad-edit-doc", 'Edits a document. Use when the user says "edit the doc"',
                                   "Follow the instructions in ./workflow.md.\n"),
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


def test_a_halt_with_bulleted_bold_choices_blocks_and_asks_them(tmp_path: Path) -> None:
    """Newest bmad-advanced-elicitation (after v6.11): 'HALT and give the user a choice:' + bold bullets."""
    skill = "_bmad/demo/bmad-elicit"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("bmad-elicit", 'Refines the last output. Use when the user says "elicit"', """
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
            """),
    })
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert all(choice in asked for choice in ("Reshuffle", "List all", "Proceed")), asked


def test_a_skill_md_holding_xml_steps_blocks_at_its_ask(tmp_path: Path) -> None:
    skill = "_bmad/demo/bmad-next-story"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("bmad-next-story", 'Creates the next story. Use when the user says "next story"',
                                   f"# Next Story\n\n{LOAD_CONFIG}.\n\n## EXECUTION\n\n{STORY_XML}"),
    })
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    assert result.workflow.name == "bmad-next-story", result.workflow
    (asked,) = pending(engine)
    assert asked.startswith("step-1") and "[q]" in asked, asked
    assert run(project, skill, mode="yolo")[1].status.value == "completed"


XML_SKILL = front("bmad-next-story", 'Creates the next story. Use when the user says "next story"', f"""
    # Next Story

    ## On Activation

    {LOAD_CONFIG}. Greet the user.

    ## EXECUTION

    {{xml}}""")
CUSTOMIZED = """
    [workflow]
    activation_steps_prepend = ["Check the board"]
    persistent_facts = ["Stories are small."]
    on_complete = ""
    """


def test_an_xml_skill_runs_its_activation_steps_facts_and_on_complete(tmp_path: Path) -> None:
    """v6.5+ create-story, dev-story …: a skill whose steps are <workflow> XML runs on the legacy interpreter, framed
    by its skill's activation as a step-file skill is (customization, persistent facts, prepend/append steps, the
    activation's greeting) and, when set, on_complete after its last step (all were dropped; validate warned)."""
    skill = "_bmad/demo/bmad-next-story"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": XML_SKILL.replace("{xml}", STORY_XML),
        f"{skill}/customize.toml": CUSTOMIZED,
        "_bmad/custom/bmad-next-story.toml": '[workflow]\non_complete = "Tell the team the story is ready"\n',
    })
    diagnostics, _ = lint_tree(project / skill, project_root=project)
    assert [d for d in diagnostics if d.severity != "info"] == [], diagnostics
    engine, blocked = run(project, skill)
    assert blocked.status.value == "blocked", blocked.error
    assert [p.split(":")[0] for p in pending(engine)] == ["step-1"], pending(engine)
    _, done = run(project, skill, mode="yolo")
    assert done.status.value == "completed", done.error
    walked = [s for _, s in sorted((step.started_at or "", s) for s, step in done.steps.items())]
    assert walked == ["activate", "prepend-1", "on-activation", "step-1", "step-2", "on-complete"], walked
    assert done.variables["persistent_facts"] == [{"fact": "Stories are small."}], done.variables
    assert done.workflow.step("on-complete").meta["text"] == "Tell the team the story is ready"


def test_an_xml_skill_whose_steps_run_on_complete_themselves_gets_no_second_one(tmp_path: Path) -> None:
    """v6.11 dev-story's last step runs `resolve_customization.py … --key workflow.on_complete` itself."""
    skill = "_bmad/demo/bmad-next-story"
    own = STORY_XML.replace("</workflow>", '<step n="3" goal="Finish">\n  <action>Run: `uv run resolve_customization.py'
                            ' --key workflow.on_complete` and follow it</action>\n</step>\n</workflow>')
    project = write(tmp_path, {**CONFIG, f"{skill}/SKILL.md": XML_SKILL.replace("{xml}", own),
                               f"{skill}/customize.toml": CUSTOMIZED.replace('""', '"Tell the team"')})
    steps = [s.id for s in load_workflow(project / skill, project_root=project).steps]
    assert steps == ["activate", "prepend-1", "on-activation", "step-1", "step-2", "step-3"], steps


def test_mode_on_an_xml_skill_is_checked_as_on_any_skill(tmp_path: Path) -> None:
    """--mode was ignored for an XML-step skill; a skill without intent modes refuses it (exit 2), naming why."""
    skill = "_bmad/demo/bmad-next-story"
    project = write(tmp_path, {**CONFIG, f"{skill}/SKILL.md": XML_SKILL.replace("{xml}", STORY_XML)})
    with pytest.raises(UsageError, match="has no intent modes"):
        load_workflow(project / skill, project_root=project, mode="validate")


def test_a_config_path_given_in_the_workflow_md_frontmatter_is_loaded(tmp_path: Path) -> None:
    """CIS module skills: workflow.md's frontmatter holds ``main_config: '{project-root}/…/config.yaml'`` and its
    prose says "Load config from `{main_config}`" (validate said: not a file path; the config was never read)."""
    skill = "_bmad/demo/skills/bmad-tell-story"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("bmad-tell-story", 'Tells a story. Use when the user says "tell a story"',
                                   "Follow the instructions in [workflow.md](workflow.md).\n"),
        f"{skill}/workflow.md": "---\nname: bmad-tell-story\ndescription: 'Tells a story.'\n"
                                "main_config: '{project-root}/_bmad/demo/config.yaml'\n---\n\n"
                                "# Story\n\nLoad config from `{main_config}` and resolve `output_folder`.\n\n"
                                f"## EXECUTION\n\n{STORY_XML}",
    })
    diagnostics, _ = lint_tree(project / skill, project_root=project)
    assert [d for d in diagnostics if d.severity == "error" or d.code == "unknown-variable"] == [], diagnostics
    _, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    assert result.workflow.variables["output_folder"] == f"{project}/out", result.workflow.variables


def test_a_skill_handing_over_to_an_instructions_file_of_xml_steps_blocks_at_its_ask(tmp_path: Path) -> None:
    """v6.2-v6.9 bmad-document-project: SKILL.md (or its workflow.md) loads the config, then "Read fully and
    follow: `./instructions.md`", a file of <workflow> XML steps (it ran as one section and completed, asking
    nothing)."""
    skill = "_bmad/demo/bmad-scan-project"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("bmad-scan-project", 'Scans a project. Use when the user says "scan"', f"""
            # Scan Project

            ## On Activation

            {LOAD_CONFIG} and resolve `output_folder`.

            ## Execution

            Read fully and follow: `./instructions.md`
            """),
        f"{skill}/instructions.md": f"# Scan Router\n\n{STORY_XML}",
    })
    _, counts = lint_tree(project / "_bmad", project_root=project)
    assert sum(counts.values()) == 1, counts
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    assert result.workflow.name == "bmad-scan-project", result.workflow
    assert result.workflow.variables["output_folder"] == f"{project}/out", result.workflow.variables
    (asked,) = pending(engine)
    assert asked.startswith("step-1") and "[q]" in asked, asked
    _, done = run(project, skill, mode="yolo")
    assert [s for s in done.steps if s.startswith("step-")] == ["step-1", "step-2"], list(done.steps)


def test_step_files_in_references_chained_by_next_step_file_block_at_their_menu(tmp_path: Path) -> None:
    """Skill Forge (community module): SKILL.md's activation says "Load, read the full file, and then execute
    `references/init.md`"; each stage's frontmatter chains on (``nextStepFile: 'review.md'``), no file is named
    step-*. A table names a stage bare (`step-auto.md`, which is in references/). The skill ran as one section and
    completed, or was refused over that table's mention."""
    skill = "_bmad/demo/forge-make"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("forge-make", 'Makes a thing. Use when the user says "make it"', f"""
            # Make

            ## Invocation Contract

            | Aspect | Detail |
            |--------|--------|
            | **Auto flag** | init routes to `step-auto.md`, which skips the review |

            ## On Activation

            1. {LOAD_CONFIG} and resolve `output_folder`.
            2. Load, read the full file, and then execute `references/init.md` to begin the workflow.
            """),
        f"{skill}/references/init.md": """
            ---
            nextStepFile: 'review.md'
            autoStepFile: 'step-auto.md'
            ---

            # Step 1: Init

            Gather the inputs. If auto mode, load and execute `{autoStepFile}`, else execute `{nextStepFile}`.
            """,
        f"{skill}/references/step-auto.md": "# Auto\n\nWrite the thing without asking.\n",
        f"{skill}/references/review.md": """
            ---
            nextStepFile: 'finish.md'
            ---

            # Step 2: Review

            Display: "**Summary — Select an Option:** [C] Continue to writing"

            - IF C: Immediately load, read entire file, then execute `{nextStepFile}`
            """,
        f"{skill}/references/finish.md": "# Step 3: Finish\n\nWrite the thing to {output_folder}/thing.md.\n",
        f"{skill}/references/rules.md": "# Rules (a reference, not a step)\n",
    })
    diagnostics, counts = lint_tree(project / skill, project_root=project)
    assert counts == {"bmad-skill/step-files": 1}, counts
    # the table's bare name resolves from the skill root (its convention), where there is no such file: validate
    # says so, but the run, which never follows that line, is not refused for it
    assert [(d.code, d.line) for d in diagnostics if d.severity == "error"] == [("missing-file", 12)], diagnostics
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert asked.startswith("review") and "[C]" in asked, asked
    _, done = run(project, skill, mode="yolo")
    assert done.status.value == "completed", done.error
    walked = sorted((step.started_at or "", s) for s, step in done.steps.items() if step.status.value == "completed")
    assert [s for _, s in walked][-3:] == ["init", "review", "finish"], walked
    assert done.steps["step-auto"].status.value == "skipped", done.steps["step-auto"]


def test_a_next_step_in_the_modules_shared_folder_is_run_as_the_chains_last_step(tmp_path: Path) -> None:
    """Skill Forge: a skill's last stage chains to `nextStepFile: 'shared/health.md'`, a file of the module's root
    (outside the skill) that shares its name with the stage (the run was refused: "names no file of the skill")."""
    skill = "_bmad/demo/forge-check"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("forge-check", 'Checks a thing. Use when the user says "check it"', """
            # Check

            ## On Activation

            Load, read the full file, and then execute `references/check.md`.
            """),
        f"{skill}/references/check.md": "---\nnextStepFile: 'health.md'\n---\n\n# Step 1: Check\n\nCheck it.\n",
        f"{skill}/references/health.md": "---\nnextStepFile: 'shared/health.md'\n---\n\n# Step 2\n\nChain on.\n",
        "_bmad/demo/shared/health.md": "# Health Check\n\nList what went wrong.\n\n**HALT and wait for user input.**\n",
    })
    diagnostics, _ = lint_tree(project / skill, project_root=project)
    assert [d for d in diagnostics if d.severity == "error"] == [], diagnostics
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.error
    (asked,) = pending(engine)
    assert asked.startswith("shared-health"), asked
    _, done = run(project, skill, mode="yolo")
    assert done.status.value == "completed", done.error
    assert {s: done.steps[s].status.value for s in ("check", "health", "shared-health")} == dict.fromkeys(
        ("check", "health", "shared-health"), "completed")


def test_a_sub_workflow_named_in_frontmatter_is_not_a_step_chain(tmp_path: Path) -> None:
    """WDS: workflow.md routes by argument ("validate" → execute `./workflow-validate.md`, whose frontmatter holds
    `validateWorkflow: './steps-v/step-01-check.md'`; default → `./steps-c/step-01-overview.md`). Only a next-step
    key (`nextStepFile`) makes a file a step of the chain: the run started in validate mode and completed."""
    skill = "_bmad/demo/workflows/wds-map"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("wds-map", "Maps triggers.", "Follow the instructions in ./workflow.md.\n"),
        f"{skill}/workflow.md": front("wds-map", "Maps triggers.", """
            # Map

            ## Routing

            - "validate" / -v → Load and execute `./workflow-validate.md`
            - Default → Load and execute `./steps-c/step-01-overview.md`
            """),
        f"{skill}/workflow-validate.md": "---\nvalidateWorkflow: './steps-v/step-01-check.md'\n---\n\n# Validate\n\n"
                                         "Load, read completely, and execute `{validateWorkflow}`.\n",
        f"{skill}/steps-v/step-01-check.md": "# Check\n\nCheck the map.\n",
        f"{skill}/steps-c/step-01-overview.md": "# Overview\n\nDescribe the goal, then HALT and wait for user input.\n",
    })
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    assert [p.split(":")[0] for p in pending(engine)] == ["step-01-overview"], pending(engine)


def test_a_first_step_linked_beside_the_workflow_but_kept_in_steps_is_found(tmp_path: Path) -> None:
    """GDS quick-spec: workflow.md says "Read fully and follow: `./step-01-understand.md`", the file is in steps/
    (the run was refused: "names no file of the skill")."""
    skill = "_bmad/demo/workflows/quick-spec"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("quick-spec", "Specs it.", "Follow the instructions in ./workflow.md.\n"),
        f"{skill}/workflow.md": front("quick-spec", "Specs it.", "# Spec\n\nRead fully and follow: "
                                                                "`./step-01-understand.md` to begin the workflow.\n"),
        f"{skill}/steps/step-01-understand.md": "# Understand\n\nAsk what to build. HALT and wait for user input.\n",
    })
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.error
    assert [p.split(":")[0] for p in pending(engine)] == ["step-01-understand"], pending(engine)


def test_a_skill_whose_whole_text_presents_an_activity_menu_blocks_at_it(tmp_path: Path) -> None:
    """WDS phases: workflow.md has no activation section, so its whole text is one step; its `### 3. Activity
    Menu` is a ``` block of `[P] Prototyping — …` options (the run completed without asking)."""
    skill = "_bmad/demo/workflows/wds-build"
    project = write(tmp_path, {**CONFIG,
        f"{skill}/SKILL.md": front("wds-build", "Builds it.", "Follow the instructions in ./workflow.md.\n"),
        f"{skill}/workflow.md": front("wds-build", "Builds it.", """
            # Build

            ### 3. Activity Menu

            ```
            [P] Prototyping            — Build a prototype from specs
            [D] Development            — Write production code
            ```
            """),
    })
    engine, result = run(project, skill)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert "[P] Prototyping" in asked and "[D] Development" in asked, asked
