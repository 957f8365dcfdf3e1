"""Only the questions the text asks, in its order: a step that asks which story to review is not preceded by a
question the runtime invents for an input pattern that needs the story (``Which epic_num should be loaded?``);
``epic_num`` is inferred from the story the person names, as the runner's protocol allows."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stepline import Engine
from stepline.bmad._discover import infer_selective
from stepline.engine import HumanChannel
from stepline.executors import DryRunExecutor
from stepline.families import load_workflow

WORKFLOW = """name: review
config_source: "{project-root}/_bmad/bmm/config.yaml"
planning_artifacts: "{project-root}/docs"
installed_path: "{project-root}/wf"
instructions: "{installed_path}/instructions.xml"
input_file_patterns:
  epics:
    description: "Epic containing the story"
    whole: "{planning_artifacts}/*epic*.md"
    sharded_single: "{planning_artifacts}/*epic*/epic-{{epic_num}}.md"
    load_strategy: "SELECTIVE_LOAD"
"""
INSTRUCTIONS = """<workflow>
  <step n="1" goal="Load story">
    <action>Use provided {{story_path}} or ask user which story file to review</action>
    <action>Read COMPLETE story file</action>
    <invoke-protocol name="discover_inputs" />
  </step>
</workflow>
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "_bmad" / "bmm").mkdir(parents=True)
    (tmp_path / "_bmad" / "bmm" / "config.yaml").write_text("user_name: Ada\n", encoding="utf-8")
    (tmp_path / "docs" / "epics").mkdir(parents=True)
    (tmp_path / "docs" / "epics" / "epic-1.md").write_text("# Epic 1\n", encoding="utf-8")
    (tmp_path / "wf").mkdir()
    (tmp_path / "wf" / "workflow.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "wf" / "instructions.xml").write_text(INSTRUCTIONS, encoding="utf-8")
    return tmp_path


def test_the_texts_question_comes_first_and_epic_num_is_inferred_from_the_answer(tmp_path: Path) -> None:
    project = _project(tmp_path)
    asked: list[str] = []

    def prompt(question: str, choices: list[str] | None) -> str:
        asked.append(question)
        return "1-2-user-auth.md" if "story" in question else "c"

    spec = load_workflow(project / "wf", project_root=project)
    engine = Engine(project_root=project, executor=DryRunExecutor(), mode="normal",
                    human=HumanChannel(interactive=True, prompt=prompt))
    run = asyncio.run(engine.start(spec))
    assert asked and "which story file to review" in asked[0]
    assert not any("epic_num" in q for q in asked), asked
    assert run.variables.get("epic_num") == "1"
    assert run.variables.get("story_path") == "1-2-user-auth.md"


def test_epic_num_is_inferred_only_from_a_story_key() -> None:
    assert infer_selective("epic_num", {"story_key": "3-1-login"}) == "3"
    assert infer_selective("epic_num", {"story_path": "docs/stories/2.4.checkout.md"}) == "2"
    assert infer_selective("epic_num", {"story_path": "notes.md"}) is None
    assert infer_selective("module_num", {"story_key": "3-1-login"}) is None
