"""Legacy workflows (workflow.yaml + instructions) with the shapes of v6.0.x / alpha.1x releases."""

from __future__ import annotations

from pathlib import Path

from tests.heldout.conftest import CONFIG, LOAD_CONFIG, STORY_XML, front, pending, run, write

from stepline.families import lint_tree, load_workflow

WF = "_bmad/demo/workflows/scan"
YAML = """
    name: scan
    description: "Scan a project"
    config_source: "{project-root}/_bmad/demo/config.yaml"
    output_folder: "{config_source}:output_folder"
    installed_path: "{project-root}/_bmad/demo/workflows/scan"
    instructions: "{installed_path}/instructions.md"
    """


def test_a_prose_continue_to_a_step_that_is_not_there_goes_on_to_the_next_step(tmp_path: Path) -> None:
    """v6.0.4 document-project: "Continue to Step 0.5" after the steps were renumbered (there are 1 and 3)."""
    project = write(tmp_path, {**CONFIG, f"{WF}/workflow.yaml": YAML, f"{WF}/instructions.md": """
        # Scan

        <workflow>
        <step n="1" goal="Look for an earlier scan">
        <action>Archive the old state file</action>
        <action>Continue to Step 0.5</action>
        <action>Never reached: the step goes on from the jump</action>
        </step>

        <step n="3" goal="Scan the project">
        <action>Scan the project</action>
        </step>
        </workflow>
        """})
    diagnostics, _ = lint_tree(project / WF, project_root=project)
    (goto,) = [d for d in diagnostics if d.code == "goto-target"]
    assert goto.severity == "warning" and goto.line == 6 and "the step after this one" in goto.message, goto

    _, result = run(project, WF, mode="yolo")
    assert result.status.value == "completed", result.error
    assert [s for s in result.steps if not s.startswith("workflow")] == ["step-1", "step-3"], list(result.steps)
    assert "'Continue to Step 0.5'" in (result.steps["step-1"].summary or "")


def test_a_goto_or_a_backward_prose_jump_to_a_missing_step_stays_an_error(tmp_path: Path) -> None:
    """Only "continue/proceed to" says go on; `<goto step=…>` and "Return to Step N" name a place, so stay errors."""
    project = write(tmp_path, {**CONFIG, f"{WF}/workflow.yaml": YAML, f"{WF}/instructions.md": """
        <workflow>
        <step n="1" goal="One">
        <action>Return to Step 0.5</action>
        <goto step="7">again</goto>
        </step>
        </workflow>
        """})
    diagnostics, _ = lint_tree(project / WF, project_root=project)
    assert [(d.severity, d.line) for d in diagnostics if d.code == "goto-target"] == [("error", 3), ("error", 4)]


def test_a_not_installed_workflow_names_the_install_command_that_exists(tmp_path: Path) -> None:
    """alpha.1x workflows run from a source tree: the fix the diagnostics give is a command stepline has."""
    elsewhere = YAML.replace('"{project-root}/_bmad/demo/workflows/scan"', '"{project-root}/_bmad/demo/other/scan"')
    project = write(tmp_path, {**CONFIG, f"{WF}/workflow.yaml": elsewhere,
                               f"{WF}/instructions.md": '<workflow><step n="1" goal="a"/></workflow>\n'})
    messages = []
    for _ in range(2):  # used from beside the yaml (info), then missing everywhere (error)
        diagnostics, _ = lint_tree(project / WF, project_root=project)
        messages += [d.message for d in diagnostics if d.code in ("missing-instructions", "not-installed")]
        (project / WF / "instructions.md").unlink(missing_ok=True)
    assert len(messages) == 2, messages
    assert all("stepline bmad install SRC" in m for m in messages), messages


MD_XML = front("make-story", 'Creates the next story. Use when the user says "create the next story"', f"""
    # Make Story Workflow

    ## INITIALIZATION

    {LOAD_CONFIG} and resolve `user_name`, `output_folder`.

    ### Paths

    - `story_file` = `{{output_folder}}/story.md`

    ## EXECUTION

    """) + STORY_XML


def test_a_workflow_md_holding_xml_steps_runs_them_and_blocks_at_the_ask(tmp_path: Path) -> None:
    """v6.1-v6.2 create-story, dev-story, code-review …: a workflow.md whose body is <workflow> XML steps is a
    legacy workflow (config from its prose); validate counts it, a normal run blocks at step 1's <ask>."""
    wf = "_bmad/demo/workflows/make-story"
    project = write(tmp_path, {**CONFIG, f"{wf}/workflow.md": MD_XML})
    _, counts = lint_tree(project / "_bmad", project_root=project)
    assert sum(counts.values()) == 1, counts  # found as a workflow (validate said: no workflow here)
    engine, result = run(project, wf)
    assert result.status.value == "blocked", result.status
    (asked,) = pending(engine)
    assert asked.startswith("step-1") and "[q]" in asked, asked
    assert result.workflow.variables["story_file"] == f"{project}/out/story.md"
    _, done = run(project, wf, mode="yolo")
    assert done.status.value == "completed", done.error
    assert [s for s in done.steps if not s.startswith("workflow")] == ["step-1", "step-2"], list(done.steps)


def test_a_check_holding_only_its_condition_governs_what_follows_it(tmp_path: Path) -> None:
    """alpha.0-alpha.4: `<check>If the trigger is unclear:</check>` then `<action>HALT: "…"</action>`: the check's
    text is its condition and the elements after it, up to the next such check, its body (the HALT ran always,
    so correct-course failed at step 1 in every mode)."""
    project = write(tmp_path, {**CONFIG, f"{WF}/workflow.yaml": YAML, f"{WF}/instructions.md": """
        <workflow>
        <step n="1" goal="Understand the change">
        <action>Ask what triggered the change</action>
        <check>If the change trigger is unclear:</check>
        <action>HALT: "Cannot go on without the trigger."</action>
        <check>If the documents are missing:</check>
        <action>HALT: "Need the documents."</action>
        </step>
        <step n="2" goal="Assess">
        <action>Assess the impact</action>
        </step>
        </workflow>
        """})
    spec = load_workflow(project / WF, project_root=project)
    checks = [n for n in spec.steps[0].meta["nodes"] if n["type"] == "check"]
    assert [(c["condition"], [k["type"] for k in c["children"]]) for c in checks] == [
        ("If the change trigger is unclear", ["action"]), ("If the documents are missing", ["action"])], checks
    _, done = run(project, WF, mode="yolo")
    assert done.status.value == "completed", done.error


def test_a_guide_named_workflow_whose_xml_is_in_code_fences_is_no_workflow(tmp_path: Path) -> None:
    """alpha.0-alpha.20 bmb create-workflow ships workflow-creation-guide.md, whose <workflow>/<step> examples sit
    in ```xml fences: it was counted and run as a workflow (its examples' <invoke-workflow> failed the run)."""
    guide = "# Guide\n\nWrite steps like this:\n\n```xml\n<workflow>\n  <step n=\"1\" goal=\"Example\">\n" \
            "    <invoke-workflow>product-brief</invoke-workflow>\n  </step>\n</workflow>\n```\n"
    project = write(tmp_path, {**CONFIG, f"{WF}/workflow.yaml": YAML,
                               f"{WF}/instructions.md": '<workflow><step n="1" goal="a"/></workflow>\n',
                               f"{WF}/workflow-creation-guide.md": guide})
    _, counts = lint_tree(project / "_bmad", project_root=project)
    assert counts == {"bmad-legacy": 1}, counts


def test_a_config_source_naming_a_variable_nothing_defines_says_how_to_give_it(tmp_path: Path) -> None:
    """GDS (community fork): "Load config from `{module_config}`", defined nowhere: the refusal named no fix."""
    wf = "_bmad/demo/workflows/make-story"
    project = write(tmp_path, {**CONFIG, f"{wf}/workflow.md": MD_XML.replace(LOAD_CONFIG, "Load config from "
                                                                             "`{module_config}`")})
    (problem,) = [d for d in lint_tree(project / wf, project_root=project)[0] if d.code == "config-source"]
    assert "--var module_config=" in problem.message, problem
    spec = load_workflow(project / wf, project_root=project, variables={
        "module_config": "{project-root}/_bmad/demo/config.yaml"})
    assert spec.variables["story_file"] == f"{project}/out/story.md", spec.variables
