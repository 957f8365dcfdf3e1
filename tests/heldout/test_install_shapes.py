"""`stepline bmad install` of source trees shaped like releases the corpus does not hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.heldout.conftest import front, pending, run, write

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


GREET = """
    name: greet
    description: "Greet"
    config_source: "{project-root}/FOLDER/demo/config.yaml"
    user_name: "{config_source}:user_name"
    installed_path: "{project-root}/FOLDER/demo/workflows/greet"
    instructions: "{installed_path}/instructions.md"
    """


@pytest.mark.parametrize(("schema", "folder"), [
    ("install-config.yaml", "{bmad_folder}"),  # alpha.5-alpha.14: the person chose the folder, '.bmad' by default
    ("install-menu-config.yaml", "bmad"),  # alpha.0-alpha.4: installed into bmad/
])
def test_an_early_alpha_source_with_its_schema_in_the_module_installer_installs_and_runs(
        tmp_path: Path, schema: str, folder: str) -> None:
    """Before alpha.15 a module's variables are in `_module-installer/install-config.yaml` (alpha.0:
    `install-menu-config.yaml`), and its files name the install folder as {bmad_folder} or bmad/ (install said:
    no BMAD module found)."""
    src = write(tmp_path / "BMAD", {
        f"src/core/_module-installer/{schema}": """
            header: "Core"
            bmad_folder:
              prompt: "Install folder?"
              default: ".bmad"
              result: "{value}"
            user_name:
              prompt: "Name?"
              default: "Ada"
              result: "{value}"
            """,
        f"src/modules/demo/_module-installer/{schema}": 'code: demo\nname: "Demo"\n',
        "src/modules/demo/workflows/greet/workflow.yaml": GREET.replace("FOLDER", folder),
        "src/modules/demo/workflows/greet/instructions.md": """
            <workflow>
            <step n="1" goal="Greet">
            <ask>Greet {user_name} how?</ask>
            </step>
            </workflow>
            """,
    })
    project = tmp_path / "project"
    project.mkdir()
    assert run_cli(["bmad", "install", str(src), "--project", str(project)]) == 0
    assert sorted(p.name for p in (project / "_bmad").iterdir()) == ["core", "demo"]
    engine, result = run(project, "_bmad/demo/workflows/greet")
    assert result.workflow.variables["user_name"] == "Ada", result.workflow.variables
    assert result.status.value == "blocked" and pending(engine)[0].startswith("step-1"), pending(engine)


def test_a_module_shipped_as_a_plugin_installs_its_listed_skills(tmp_path: Path) -> None:
    """v6.6+ community modules (Vault, UltraCode Goal): no src/module.yaml, but `.claude-plugin/marketplace.json`
    lists the plugin's skills and its module.yaml is in the `-setup` skill's assets/, as BMAD's installer reads
    it (install said: no BMAD module found)."""
    halt = "## On Activation\n\nGreet {user_name}.\n\n## Review\n\nShow the notes. HALT and wait for user input.\n"
    src = write(tmp_path / "vault", {
        ".claude-plugin/marketplace.json": '{"name": "demo", "plugins": [{"name": "demo", "source": "./", "skills": '
                                           '["./skills/demo-setup", "./skills/demo-review"]}]}',
        "skills/demo-setup/SKILL.md": front("demo-setup", "Sets the module up.", "Write the config.\n"),
        "skills/demo-setup/assets/module.yaml": 'code: demo\nname: "Demo"\nnotes_folder:\n  prompt: "Where?"\n'
                                                '  default: "notes"\n  result: "{project-root}/{value}"\n',
        "skills/demo-review/SKILL.md": front("demo-review", "Reviews the notes.", halt),
        "skills/demo-draft/SKILL.md": front("demo-draft", "Not listed: not installed.", "Draft.\n"),
    })
    project = tmp_path / "project"
    project.mkdir()
    assert run_cli(["bmad", "install", str(src), "--project", str(project), "--set", "user_name=Ada"]) == 0
    installed = project / "_bmad" / "demo"
    assert sorted(p.name for p in installed.iterdir() if p.is_dir()) == ["demo-review", "demo-setup"]
    assert "notes_folder: '{project-root}/notes'" in (installed / "config.yaml").read_text()
    engine, result = run(project, "_bmad/demo/demo-review")
    assert result.status.value == "blocked", result.error
    assert [p.split(":")[0] for p in pending(engine)] == ["section-review"], pending(engine)
