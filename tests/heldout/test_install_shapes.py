"""`stepline bmad install` of source trees shaped like releases the corpus does not hold."""

from __future__ import annotations

from pathlib import Path

from tests.heldout.conftest import write

from stepline.families import load_workflow
from stepline.interfaces.cli._app import run_cli


def test_an_alpha_1x_source_naming_dot_bmad_runs_after_install(tmp_path: Path) -> None:
    """alpha.1x names its install folder '.bmad' ({project-root}/.bmad/bmm/config.yaml)."""
    src = write(tmp_path / "BMAD", {
        "src/core/module.yaml": 'code: core\nname: "Core"\nuser_name:\n  prompt: "Name?"\n  default: "Ada"\n'
                                '  result: "{value}"\n',
        "src/modules/demo/module.yaml": 'code: demo\nname: "Demo"\n',
        "src/modules/demo/workflows/greet/workflow.yaml": """
            name: greet
            description: "Greet"
            config_source: "{project-root}/.bmad/demo/config.yaml"
            user_name: "{config_source}:user_name"
            installed_path: "{project-root}/.bmad/demo/workflows/greet"
            instructions: "{installed_path}/instructions.md"
            """,
        "src/modules/demo/workflows/greet/instructions.md": """
            <workflow>
            <step n="1" goal="Greet">
            <action>Greet {user_name}</action>
            </step>
            </workflow>
            """,
    })
    project = tmp_path / "project"
    project.mkdir()
    assert run_cli(["bmad", "install", str(src), "--project", str(project)]) == 0
    (path,) = (project / "_bmad").rglob("greet/workflow.yaml")
    workflow = load_workflow(path, project_root=project)
    assert workflow.variables["user_name"] == "Ada"
