"""BMAD legacy bad input through the CLI: one clear line with file:line, exit 4, no run started (a mis-nested
tag, which is recovered, is one warning line)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli

GOOD_YAML = """name: demo
config_source: "{project-root}/_bmad/demo/config.yaml"
output_folder: "{config_source}:output_folder"
installed_path: "{project-root}/_bmad/demo/workflows/demo"
instructions: "{installed_path}/instructions.xml"
"""
GOOD_XML = """<workflow>
<step n="1" goal="Say hello">
  <action>Say hello</action>
</step>
</workflow>
"""


def _project(tmp_path: Path, yaml_text: str = GOOD_YAML, xml: str = GOOD_XML, config: bool = True) -> Path:
    root = tmp_path / "p"
    wf = root / "_bmad" / "demo" / "workflows" / "demo"
    wf.mkdir(parents=True)
    if config:
        (root / "_bmad" / "demo" / "config.yaml").write_text("output_folder: '{project-root}/out'\n")
    (wf / "workflow.yaml").write_text(yaml_text)
    (wf / "instructions.xml").write_text(xml)
    return root


def _run(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = run_cli(["run", "_bmad/demo/workflows/demo", "--executor", "dry-run", "--yolo", "-C", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert not (root / ".stepline").exists()
    return code, err[0]


def test_the_good_workflow_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fixture itself is sound: it runs to completion."""
    root = _project(tmp_path)
    assert run_cli(["run", "_bmad/demo/workflows/demo", "--executor", "dry-run", "--yolo", "-C", str(root),
                    "-q"]) == 0


def test_yaml_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A workflow.yaml that does not parse names its line."""
    root = _project(tmp_path, yaml_text=GOOD_YAML + "broken: [unclosed\n")
    code, line = _run(root, capsys)
    assert code == 4 and re.search(r"workflow\.yaml:[67]: YAML", line)  # PyYAML marks where it noticed


def test_broken_tags_are_recovered_with_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A <check> closed by </step> is closed at its parent's end, as an HTML parser does: one warning naming
    instructions.xml:line, and the run goes on (validate says the same, as a warning)."""
    xml = ('<workflow>\n<step n="1" goal="g">\n  <check if="x is provided">\n    <action>a</action>\n'
           '</step>\n</workflow>\n')
    root = _project(tmp_path, xml=xml)
    code = run_cli(["run", "_bmad/demo/workflows/demo", "--executor", "dry-run", "--yolo", "-C", str(root), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 0
    assert len(err) == 1 and "instructions.xml:5: warning:" in err[0] and "<check> opened on line 3" in err[0], err


def test_missing_config_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config_source that does not exist names the workflow.yaml line that points at it."""
    code, line = _run(_project(tmp_path, config=False), capsys)
    assert code == 4 and "workflow.yaml:2" in line and "config.yaml" in line


def test_variable_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Variables that refer to each other in a circle are named with their line."""
    cyclic = GOOD_YAML + 'a: "{b}/x"\nb: "{a}/y"\n'
    code, line = _run(_project(tmp_path, yaml_text=cyclic), capsys)
    assert code == 4 and "workflow.yaml:" in line and "cycle" in line
