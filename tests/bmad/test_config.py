"""Tests for BMAD workflow.yaml loading and variable resolution (R-F1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline import time
from stepline._placeholders import resolve
from stepline.bmad._config import load_workflow_config, parse_yaml, reference_diagnostics
from stepline.errors import ReaderError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "_bmad" / "m" / "config.yaml",
          "user_name: Ada\noutput_folder: '{project-root}/out'\nplanning: '{project-root}/out/plan'\nflag: true\n")
    return tmp_path


def test_cycles_and_unknowns_are_reported_with_their_lines() -> None:
    """A cycle is one error naming the loop with its line; an unknown name is a warning, left in place."""
    result = resolve({"a": "{b}", "b": "{a}", "c": "{nope}/x"})
    found = reference_diagnostics(result, path="wf.yaml", lines={"a": 3, "b": 4, "c": 5})
    assert [(d.code, d.line) for d in found] == [("variable-cycle", 3), ("unknown-variable", 5)]
    assert "a -> b -> a" in found[0].message and "{nope} in 'c'" in found[1].message
    assert [d.code for d in reference_diagnostics(result, path="wf.yaml", report_unknown=False)] == [
        "variable-cycle"]


def test_parse_yaml_error_names_file_and_line() -> None:
    """A YAML syntax error is a ReaderError with path:line and a hint."""
    with pytest.raises(ReaderError) as info:
        parse_yaml("a: 1\nb: [x\nc: 2\n", path="wf.yaml")
    assert str(info.value).startswith("wf.yaml:")
    assert info.value.line is not None and info.value.line >= 2


def test_parse_yaml_records_key_lines() -> None:
    """Key lines are recorded with dotted paths, offset by first_line."""
    doc = parse_yaml("a: 1\nvariables:\n  b: 2\n", path="x", first_line=10)
    assert doc.lines == {"a": 10, "variables": 11, "variables.b": 12}


def test_load_workflow_config_resolves_everything(project: Path) -> None:
    """config_source values, {project-root}, {installed_path}, variables: and the date are all resolved."""
    wf = write(project / "_bmad" / "m" / "workflows" / "w" / "workflow.yaml", """\
config_source: "{project-root}/_bmad/m/config.yaml"
user_name: "{config_source}:user_name"
output_folder: "{config_source}:output_folder"
date: system-generated
installed_path: "{project-root}/_bmad/m/workflows/w"
template: "{installed_path}/template.md"
variables:
  story_dir: "{output_folder}/stories"
default_output_file: "{story_dir}/{{story_key}}.md"
""")
    with time.frozen("2026-03-04T05:06:07+00:00"):
        cfg = load_workflow_config(wf, project_root=project)
    root = str(project)
    assert cfg.values["user_name"] == "Ada"
    assert cfg.values["output_folder"] == f"{root}/out"
    assert cfg.values["date"] == "2026-03-04"
    assert cfg.values["template"] == f"{root}/_bmad/m/workflows/w/template.md"
    assert cfg.values["story_dir"] == f"{root}/out/stories"
    assert cfg.values["default_output_file"] == f"{root}/out/stories/{{{{story_key}}}}.md"
    assert cfg.values["planning"] == f"{root}/out/plan"
    assert cfg.values["flag"] is True
    assert cfg.document["variables"] == {"story_dir": f"{root}/out/stories"}
    assert cfg.config_path == project / "_bmad" / "m" / "config.yaml"
    assert cfg.diagnostics == []


def test_overrides_win(project: Path) -> None:
    """Caller variables replace workflow values and feed the values that refer to them."""
    wf = write(project / "w.yaml", 'output_folder: "{project-root}/a"\nreport: "{output_folder}/r.md"\n')
    cfg = load_workflow_config(wf, project_root=project, variables={"output_folder": "/elsewhere"})
    assert cfg.values["report"] == "/elsewhere/r.md"


def test_missing_config_source_is_an_error_diagnostic(project: Path) -> None:
    """A config_source file that does not exist is an error on the config_source line."""
    wf = write(project / "w.yaml",
               'name: w\nconfig_source: "{project-root}/_bmad/zz/config.yaml"\nu: "{config_source}:user_name"\n')
    cfg = load_workflow_config(wf, project_root=project)
    [diag] = [d for d in cfg.diagnostics if d.severity == "error"]
    assert diag.code == "missing-config" and diag.line == 2
    assert "does not exist" in diag.message


def test_missing_config_key_is_a_warning(project: Path) -> None:
    """Reading a key the module config lacks leaves {key} for the runtime to ask, with a warning."""
    wf = write(project / "w.yaml", 'config_source: "{project-root}/_bmad/m/config.yaml"\nx: "{config_source}:absent"\n')
    cfg = load_workflow_config(wf, project_root=project)
    assert cfg.values["x"] == "{absent}"
    assert {d.code for d in cfg.diagnostics} >= {"config-key"}


def test_missing_config_key_of_the_same_name_is_not_a_cycle(project: Path) -> None:
    """``user_name: "{config_source}:user_name"`` with no such config key is asked for, not a cycle."""
    wf = write(project / "w.yaml",
               'config_source: "{project-root}/_bmad/m/config.yaml"\ncolor: "{config_source}:color"\n')
    cfg = load_workflow_config(wf, project_root=project)
    assert cfg.values["color"] == "{color}"
    assert cfg.unresolved == {"color": ("color",)}
    assert "variable-cycle" not in {d.code for d in cfg.diagnostics}


def test_date_written_as_mapping_is_tolerated(project: Path) -> None:
    """``date: { system-date }`` (a YAML mapping) is read as system-generated with a warning."""
    wf = write(project / "w.yaml", "date: { system-date }\n")
    with time.frozen("2026-01-02T00:00:00+00:00"):
        cfg = load_workflow_config(wf, project_root=project)
    assert cfg.values["date"] == "2026-01-02"
    assert [d.code for d in cfg.diagnostics] == ["yaml-mapping"]


def test_cycle_in_workflow_yaml(project: Path) -> None:
    """Two keys that refer to each other produce a variable-cycle error with a line in the file."""
    wf = write(project / "w.yaml", 'name: w\na: "{b}/x"\nb: "{a}/y"\n')
    cfg = load_workflow_config(wf, project_root=project)
    [diag] = [d for d in cfg.diagnostics if d.code == "variable-cycle"]
    assert diag.line in (2, 3)
    assert "a -> b -> a" in diag.message or "b -> a -> b" in diag.message
