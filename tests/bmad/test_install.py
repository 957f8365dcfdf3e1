"""Tests for installing BMAD modules from a source tree into a project (``stepline.install.install_bmad``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stepline.bmad import install_bmad
from stepline.errors import NotFoundError, ReaderError, UsageError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bmad"
CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
BMAD_SOURCE = CORPUS / "bmad" / "v6.0.0-alpha.23"


def config(project: Path, module: str) -> dict[str, object]:
    data = yaml.safe_load((project / "_bmad" / module / "config.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_installs_modules_and_files(tmp_path: Path) -> None:
    """Every module folder is copied to _bmad/<code>/ and core comes first in the report."""
    project = tmp_path / "shop"
    report = install_bmad(FIXTURE, project, {})
    assert [m.name for m in report.modules] == ["core", "demo"]
    assert (project / "_bmad" / "demo" / "workflows" / "greet" / "instructions.xml").is_file()
    assert (project / "_bmad" / "core" / "tasks" / "workflow.xml").is_file()
    assert report.modules[1].files >= 7


def test_config_from_defaults_and_result_templates(tmp_path: Path) -> None:
    """Defaults fill result templates, other keys and {directory_name} are expanded, {project-root} stays."""
    project = tmp_path / "shop"
    install_bmad(FIXTURE, project, {})
    demo = config(project, "demo")
    assert demo["project_name"] == "shop"
    assert demo["reports_folder"] == "{project-root}/out/reports"
    assert demo["strict_mode"] is False
    assert demo["retries"] == 2
    assert demo["output_folder"] == "{project-root}/out"
    assert demo["user_name"] == "Tester"
    assert config(project, "core") == {
        "user_name": "Tester",
        "communication_language": "English",
        "document_output_language": "English",
        "output_folder": "{project-root}/out",
    }


def test_settings_override_defaults(tmp_path: Path) -> None:
    """Settings replace defaults, flow into dependent defaults, are typed like the default, and may be qualified."""
    project = tmp_path / "p"
    report = install_bmad(
        FIXTURE,
        project,
        {"user_name": "Ada", "output_folder": "build", "strict_mode": "yes", "demo.retries": "5", "typo": "x"},
    )
    demo = config(project, "demo")
    assert demo["user_name"] == "Ada"
    assert demo["reports_folder"] == "{project-root}/build/reports"
    assert demo["strict_mode"] is True
    assert demo["retries"] == 5
    assert report.unused_settings == ("typo",)


def test_bad_setting_value_is_a_usage_error(tmp_path: Path) -> None:
    """A boolean setting that is not yes/no is refused with the key named."""
    with pytest.raises(UsageError, match="strict_mode"):
        install_bmad(FIXTURE, tmp_path / "p", {"strict_mode": "maybe"})


@pytest.mark.parametrize("relative", ["", "src", "src/modules/demo"])
def test_accepts_each_kind_of_source(tmp_path: Path, relative: str) -> None:
    """A repo root, its src/ folder and a single module folder (which brings its sibling core) all install."""
    project = tmp_path / "p"
    report = install_bmad(FIXTURE / relative if relative else FIXTURE, project, {})
    assert {m.name for m in report.modules} == {"core", "demo"}
    assert config(project, "demo")["user_name"] == "Tester"


def test_core_alone(tmp_path: Path) -> None:
    """Installing src/core writes only the core config."""
    report = install_bmad(FIXTURE / "src" / "core", tmp_path / "p", {})
    assert [m.name for m in report.modules] == ["core"]


def test_missing_source_is_not_found(tmp_path: Path) -> None:
    """A source folder that does not exist is a NotFoundError naming it."""
    with pytest.raises(NotFoundError, match="no such folder"):
        install_bmad(tmp_path / "nope", tmp_path / "p", {})


def test_folder_without_modules_is_a_reader_error(tmp_path: Path) -> None:
    """A folder with no module.yaml anywhere expected is refused with the accepted layouts as the hint."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReaderError, match="no BMAD module found"):
        install_bmad(tmp_path / "empty", tmp_path / "p", {})


def test_module_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    """A module.yaml that does not parse is a ReaderError with file:line."""
    module = tmp_path / "src" / "modules" / "bad"
    module.mkdir(parents=True)
    (module / "module.yaml").write_text("code: bad\nkey: [unclosed\nother: 1\n", encoding="utf-8")
    with pytest.raises(ReaderError, match=r"module\.yaml:\d+: YAML syntax error"):
        install_bmad(tmp_path, tmp_path / "p", {})


@pytest.mark.corpus
def test_installs_the_corpus(tmp_path: Path) -> None:
    """The real source tree installs core, bmb, bmm and cis with the documented config values."""
    if not BMAD_SOURCE.is_dir():
        pytest.skip("shared corpus not available")
    project = tmp_path / "acme"
    report = install_bmad(BMAD_SOURCE, project, {"user_name": "Ada"})
    assert [m.name for m in report.modules] == ["core", "bmb", "bmm", "cis"]
    bmm = config(project, "bmm")
    assert bmm["planning_artifacts"] == "{project-root}/_bmad-output/planning-artifacts"
    assert bmm["project_knowledge"] == "{project-root}/docs"
    assert bmm["project_name"] == "acme"
    assert bmm["tea_use_mcp_enhancements"] is False
    assert bmm["user_name"] == "Ada"
    assert config(project, "bmb")["bmb_creations_output_folder"] == "{project-root}/_bmad-output/bmb-creations"
    assert config(project, "cis")["output_folder"] == "{project-root}/_bmad-output"


V611 = CORPUS / "bmad" / "v6.11.0"
#: A module in the way BMAD's TEA module writes its config: a default naming a core variable, a result naming
#: another result of the module.
ADDON = """\
code: qa
name: "QA add-on"
test_artifacts:
  prompt: "Where do test artifacts go?"
  default: "{output_folder}/test-artifacts"
  result: "{project-root}/{value}"
test_design_output:
  prompt: "Where do test designs go?"
  default: "test-design"
  result: "{test_artifacts}/{value}"
"""


def _addon(tmp_path: Path) -> Path:
    folder = tmp_path / "addon" / "src"
    folder.mkdir(parents=True)
    (folder / "module.yaml").write_text(ADDON, encoding="utf-8")
    (folder / "README.md").write_text("QA add-on\n", encoding="utf-8")
    return folder


@pytest.mark.skipif(not V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_a_default_naming_another_variable_is_filled_once(tmp_path: Path) -> None:
    """Issue 25: the add-on installed after core: ``{output_folder}/test-artifacts`` is filled with the answer,
    never ``{project-root}/{project-root}/…``; a result naming another result gets that result."""
    project = tmp_path / "project"
    install_bmad(V611, project, {})
    report = install_bmad(_addon(tmp_path), project, {})
    config = report.config["qa"]
    assert config["test_artifacts"] == "{project-root}/_bmad-output/test-artifacts"
    assert config["test_design_output"] == "{project-root}/_bmad-output/test-artifacts/test-design"
    assert report.warnings == ()


def test_a_variable_no_installed_module_defines_is_warned_about(tmp_path: Path) -> None:
    """Issue 25: the add-on installed without core: its config names ``{output_folder}``, which nothing defines."""
    report = install_bmad(_addon(tmp_path), tmp_path / "project", {})
    assert report.warnings == tuple(
        f"qa: {key} needs {{output_folder}}, which no installed module defines (install core with it, or give "
        "--set output_folder=…)" for key in ("test_artifacts", "test_design_output"))


def test_an_alpha_1x_module_naming_dot_bmad_names_the_folder_it_is_installed_into(tmp_path: Path) -> None:
    """Issue 25: alpha.1x sources write ``{project-root}/.bmad/<m>/…``; installed, they name ``_bmad`` (as BMAD's
    installer rewrites them); other text and binary files are copied as they are."""
    src = tmp_path / "src" / "modules" / "demo"
    (src / "workflows" / "greet").mkdir(parents=True)
    (src / "module.yaml").write_text('code: demo\nname: "Demo"\n', encoding="utf-8")
    (src / "workflows" / "greet" / "workflow.yaml").write_text(
        'config_source: "{project-root}/.bmad/demo/config.yaml"\nnote: "a .bmad file, .bmadrc"\n', encoding="utf-8")
    (src / "workflows" / "greet" / "logo.png").write_bytes(b"\x89PNG{project-root}/.bmad/x")
    install_bmad(tmp_path / "src", tmp_path / "project", {})
    greet = tmp_path / "project" / "_bmad" / "demo" / "workflows" / "greet"
    assert (greet / "workflow.yaml").read_text(encoding="utf-8") == (
        'config_source: "{project-root}/_bmad/demo/config.yaml"\nnote: "a .bmad file, .bmadrc"\n')
    assert (greet / "logo.png").read_bytes() == b"\x89PNG{project-root}/.bmad/x"


def test_a_setting_given_with_the_project_root_placeholder_is_kept_once(tmp_path: Path) -> None:
    """``--set output_folder='{project-root}/build'`` is the answer ``build``: the config says
    ``{project-root}/build/…`` once, never ``{project-root}/{project-root}/build``."""
    project = tmp_path / "p"
    install_bmad(FIXTURE, project, {"output_folder": "{project-root}/build"})
    demo = config(project, "demo")
    assert demo["reports_folder"] == "{project-root}/build/reports"
    assert "{project-root}/{project-root}" not in (project / "_bmad" / "demo" / "config.yaml").read_text()


@pytest.mark.skipif(not V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_v611_output_folder_with_the_placeholder_reaches_artifacts_and_the_board(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's install line: a skill's run gets ``<project>/docs/…`` as its artifact folders, the sprint
    board is found there, and no folder named ``{project-root}`` is made."""
    import tomllib

    from stepline.interfaces.cli._app import run_cli

    project = tmp_path / "p"
    project.mkdir()
    assert run_cli(["bmad", "install", str(V611), "--project", str(project), "--set", "user_name=Ada",
                    "--set", "output_folder={project-root}/docs"]) == 0
    central = tomllib.loads((project / "_bmad" / "config.toml").read_text(encoding="utf-8"))
    assert central["core"]["output_folder"] == "{project-root}/docs"
    assert central["modules"]["bmm"]["planning_artifacts"] == "{project-root}/docs/planning-artifacts"
    assert central["modules"]["bmm"]["implementation_artifacts"] == "{project-root}/docs/implementation-artifacts"
    assert run_cli(["run", "_bmad/bmm/plan/bmad-sprint-planning", "--executor", "dry-run", "--yolo", "-q",
                    "-C", str(project)]) == 0
    manifest = json.loads(next((project / ".stepline" / "runs").glob("*/manifest.json")).read_text())
    variables = manifest["variables"]
    assert variables["planning_artifacts"] == str(project / "docs" / "planning-artifacts")
    assert variables["implementation_artifacts"] == str(project / "docs" / "implementation-artifacts")
    board = project / "docs" / "implementation-artifacts" / "sprint-status.yaml"
    board.parent.mkdir(parents=True)
    board.write_text("development_status:\n  epic-1: in-progress\n  1-1-login: ready-for-dev\n", encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["sprint", "status", "--json", "-C", str(project)]) == 0
    assert json.loads(capsys.readouterr().out)["board"] == str(board)
    assert not list(project.rglob("{project-root}")), "a folder named {project-root} was made"
