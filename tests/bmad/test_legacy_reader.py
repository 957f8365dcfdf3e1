"""Tests for the BMAD legacy reader and its lint (R-F1, R-F4, R-F7), on fixtures and on the whole corpus."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stepline import time
from stepline.bmad import install_bmad
from stepline.bmad._instructions import node_from_dict
from stepline.bmad._legacy import is_bmad_legacy, lint_bmad_legacy, load_bmad_legacy
from stepline.errors import NotFoundError, ReaderError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bmad"
CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
BMAD_SOURCE = CORPUS / "bmad" / "v6.0.0-alpha.23"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    install_bmad(FIXTURE, root, {"user_name": "Ada"})
    return root


def greet(project: Path) -> Path:
    return project / "_bmad" / "demo" / "workflows" / "greet" / "workflow.yaml"


def test_loads_steps_and_variables(project: Path) -> None:
    """The greet workflow becomes three steps with ids, goals, phase-free meta and resolved variables."""
    with time.frozen("2026-05-06T00:00:00+00:00"):
        spec = load_bmad_legacy(greet(project), project_root=project)
    assert spec.format == "bmad-legacy" and spec.id == "greet"
    assert [s.id for s in spec.steps] == ["step-1", "step-2", "step-3"]
    assert [s.name for s in spec.steps] == ["Find out who to greet", "Write the greeting", "Optional sign-off"]
    root = str(project.resolve())
    assert spec.variables["user_name"] == "Ada"
    assert spec.variables["output_folder"] == f"{root}/out/reports"
    assert spec.variables["date"] == "2026-05-06"
    assert spec.variables["archive_folder"] == f"{root}/out/reports/archive"
    assert spec.variables["default_output_file"] == f"{root}/out/reports/greeting-{{{{person}}}}.md"
    second, third = spec.steps[1], spec.steps[2]
    assert second.outputs == ["greeting"] and second.templates == [spec.meta["template"]]
    assert second.meta["tag"] == "report" and third.meta["optional"] is True
    assert second.source is not None and second.source.line == 13
    assert "<template-output>greeting</template-output>" in second.body
    nodes = [node_from_dict(n) for n in spec.steps[0].meta["nodes"]]
    assert [n.kind for n in nodes] == ["check", "ask", "anchor", "action"]


def test_workflow_meta(project: Path) -> None:
    """meta names the instructions, template, checklist, output file and input patterns, all resolved."""
    spec = load_bmad_legacy(greet(project).parent, project_root=project)
    meta = spec.meta
    base = project.resolve() / "_bmad" / "demo" / "workflows" / "greet"
    assert meta["instructions"] == str(base / "instructions.xml")
    assert meta["template"] == str(base / "template.md") and meta["template_workflow"] is True
    assert meta["validation"] == str(base / "checklist.md")
    assert meta["installed_path"] == str(base)
    assert meta["input_file_patterns"]["notes"]["whole"].endswith("/out/reports/*notes*.md")
    assert meta["runtime_variables"] == ["person"]
    assert meta["web_bundle"] is False and meta["step_source"] == "tags"
    assert meta["preamble"][0]["type"] == "critical"


def test_fixture_lints_clean(project: Path) -> None:
    """The fixture workflow has no lint problems at all."""
    assert lint_bmad_legacy(greet(project), project) == []


def test_hybrid_is_detected(project: Path) -> None:
    """A workflow.yaml whose instructions name workflow.md loads as bmad-hybrid pointing at it."""
    path = project / "_bmad" / "demo" / "workflows" / "hybrid" / "workflow.yaml"
    spec = load_bmad_legacy(path, project_root=project)
    assert spec.format == "bmad-hybrid" and spec.steps == []
    assert spec.meta["workflow_md"] == str(path.parent.resolve() / "workflow.md")
    assert spec.variables["user_name"] == "Ada"


def test_runs_from_a_source_tree_with_fallback(tmp_path: Path) -> None:
    """Without an installed _bmad/, components are found next to workflow.yaml; the missing config is reported."""
    source = FIXTURE / "src" / "modules" / "demo" / "workflows" / "greet" / "workflow.yaml"
    diagnostics = lint_bmad_legacy(source, tmp_path)
    errors = {d.code for d in diagnostics if d.severity == "error"}
    assert "missing-config" in errors and "variable-cycle" not in errors
    assert {d.code for d in diagnostics} >= {"not-installed"}


def test_is_bmad_legacy(project: Path, tmp_path: Path) -> None:
    """Detection accepts a workflow.yaml or its folder and refuses other files."""
    assert is_bmad_legacy(greet(project)) and is_bmad_legacy(greet(project).parent)
    (tmp_path / "x.yaml").write_text("name: x\n", encoding="utf-8")
    assert not is_bmad_legacy(tmp_path / "x.yaml")


def _copy_greet(project: Path, tmp: Path) -> Path:
    target = project / "_bmad" / "demo" / "workflows" / "broken"
    shutil.copytree(greet(project).parent, target)
    text = (target / "workflow.yaml").read_text(encoding="utf-8").replace("workflows/greet", "workflows/broken")
    (target / "workflow.yaml").write_text(text, encoding="utf-8")
    return target


def test_yaml_syntax_error_is_one_line_with_location(project: Path, tmp_path: Path) -> None:
    """A YAML syntax error raises a ReaderError whose one-line message starts with file:line."""
    folder = _copy_greet(project, tmp_path)
    (folder / "workflow.yaml").write_text("name: x\ninstructions: [oops\nother: 1\n", encoding="utf-8")
    with pytest.raises(ReaderError) as info:
        load_bmad_legacy(folder, project_root=project)
    message = str(info.value)
    assert message.startswith(f"{folder / 'workflow.yaml'}:") and "\n" not in message
    [diag] = lint_bmad_legacy(folder, project)
    assert diag.code == "yaml-syntax" and diag.line is not None


def test_missing_config_source(project: Path, tmp_path: Path) -> None:
    """A config_source that does not exist raises with the config_source line and the fix."""
    folder = _copy_greet(project, tmp_path)
    wf = folder / "workflow.yaml"
    wf.write_text(wf.read_text(encoding="utf-8").replace("_bmad/demo/config.yaml", "_bmad/nope/config.yaml"),
                  encoding="utf-8")
    with pytest.raises(ReaderError, match=r"workflow\.yaml:5: config_source .* does not exist; install"):
        load_bmad_legacy(folder, project_root=project)


def test_variable_cycle(project: Path, tmp_path: Path) -> None:
    """Two variables that refer to each other raise a ReaderError naming the cycle and a line."""
    folder = _copy_greet(project, tmp_path)
    wf = folder / "workflow.yaml"
    wf.write_text(wf.read_text(encoding="utf-8") + 'loop_a: "{loop_b}/x"\nloop_b: "{loop_a}/y"\n', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"workflow\.yaml:\d+: variables refer to each other in a cycle"):
        load_bmad_legacy(folder, project_root=project)


def test_broken_tags_and_bad_references_are_linted(project: Path, tmp_path: Path) -> None:
    """Unclosed tags, gotos to missing steps/anchors and missing invoked files are reported with lines."""
    folder = _copy_greet(project, tmp_path)
    (folder / "instructions.xml").write_text(
        '<workflow>\n<step n="1" goal="a">\n<check if="x">\n<goto step="7"/>\n</step>\n'
        '<step n="2" goal="b">\n<goto anchor="nowhere"/>\n<invoke-workflow path="{project-root}/_bmad/missing.yaml">'
        "</invoke-workflow>\n<action>GOTO step 2b</action>\n</step>\n</workflow>\n",
        encoding="utf-8",
    )
    diagnostics = lint_bmad_legacy(folder, project)
    found = {(d.severity, d.code, d.line) for d in diagnostics}
    assert ("warning", "misnested-tag", 5) in found
    assert ("error", "goto-target", 4) in found
    assert ("error", "goto-target", 7) in found
    assert ("error", "missing-file", 8) in found
    assert ("warning", "goto-target", 9) in found
    assert all(d.path.endswith("instructions.xml") for d in diagnostics)
    spec = load_bmad_legacy(folder, project_root=project)
    assert [s.id for s in spec.steps] == ["step-1", "step-2"]


def test_missing_instructions(project: Path, tmp_path: Path) -> None:
    """An instructions file that does not exist is a ReaderError on the instructions line."""
    folder = _copy_greet(project, tmp_path)
    (folder / "instructions.xml").unlink()
    with pytest.raises(ReaderError, match=r"workflow\.yaml:12: instructions file .* does not exist"):
        load_bmad_legacy(folder, project_root=project)


def test_missing_workflow_file(tmp_path: Path) -> None:
    """A path that does not exist is a NotFoundError."""
    with pytest.raises(NotFoundError):
        load_bmad_legacy(tmp_path / "nope" / "workflow.yaml", project_root=tmp_path)


def test_heading_steps_and_unique_ids(project: Path, tmp_path: Path) -> None:
    """Untagged markdown instructions get one step per '## Step N' heading; duplicate labels get unique ids."""
    folder = _copy_greet(project, tmp_path)
    (folder / "instructions.xml").write_text(
        "# Title\n\nIntro\n\n## Step 1: Load\n\nRead it.\n\n## Step 1: Again\n\nx\n\n### Step 2a - Finish\n\ny\n",
        encoding="utf-8",
    )
    spec = load_bmad_legacy(folder, project_root=project)
    assert [(s.id, s.name) for s in spec.steps] == [("step-1", "Load"), ("step-1-2", "Again"), ("step-2a", "Finish")]
    assert spec.meta["step_source"] == "headings" and spec.steps[2].source is not None
    assert spec.steps[2].source.line == 13


@pytest.mark.corpus
def test_whole_corpus_installs_loads_and_lints(tmp_path: Path) -> None:
    """Every workflow.yaml of the installed corpus loads and lints without an exception."""
    if not BMAD_SOURCE.is_dir():
        pytest.skip("shared corpus not available")
    project = tmp_path / "acme"
    install_bmad(BMAD_SOURCE, project, {})
    workflows = sorted((project / "_bmad").rglob("workflow.yaml"))
    assert len(workflows) == 26
    loaded = [load_bmad_legacy(path, project_root=project) for path in workflows]
    assert all(spec.steps for spec in loaded)
    assert sum(len(spec.steps) for spec in loaded) > 150
    for path in workflows:
        for diag in lint_bmad_legacy(path, project):
            assert diag.line is not None and Path(diag.path).is_file()
