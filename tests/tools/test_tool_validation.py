"""Validation runners: Python AST/mypy/ruff, JSON, YAML, template completeness."""

from __future__ import annotations

from pathlib import Path

from stepline.model import ToolCall
from stepline.tools import (
    ToolPipeline,
    check_template_complete,
    default_registry,
    validate_json,
    validate_python_files,
    validate_yaml,
)


class TestPython:
    """validate_python_files parses, type-checks and lints the targets."""

    def test_syntax_error_is_located(self, tmp_path: Path) -> None:
        """A file that does not parse is reported by ``ast`` with its line, and skipped by mypy/ruff."""
        (tmp_path / "bad.py").write_text("x = 1\ndef f(:\n")
        report = validate_python_files(["bad.py"], tmp_path)
        assert not report.passed
        assert [(i.check, i.path, i.line) for i in report.issues] == [("ast", "bad.py", 2)]

    def test_clean_file_passes_all_checks(self, tmp_path: Path) -> None:
        """A typed, lint-clean module passes ast, mypy and ruff."""
        (tmp_path / "good.py").write_text('"""Good."""\n\n\ndef add(a: int, b: int) -> int:\n    return a + b\n')
        report = validate_python_files(["good.py"], tmp_path)
        assert report.passed, report.summary()
        assert report.checked == ["good.py"]

    def test_mypy_and_ruff_problems_are_reported(self, tmp_path: Path) -> None:
        """A type error is reported by mypy and an unused import by ruff, each with file and line."""
        (tmp_path / "pkg").mkdir()
        (tmp_path / "pkg" / "mod.py").write_text("import os\n\n\ndef f() -> int:\n    return 'no'\n")
        report = validate_python_files(["pkg"], tmp_path)
        checks = {(i.check, i.path, i.line) for i in report.issues}
        assert ("mypy", "pkg/mod.py", 5) in checks
        assert ("ruff", "pkg/mod.py", 1) in checks
        assert "pkg/mod.py:5" in report.summary()

    def test_checks_can_be_chosen(self, tmp_path: Path) -> None:
        """With only ``ast`` selected, type errors are not looked for."""
        (tmp_path / "m.py").write_text("def f() -> int:\n    return 'no'\n")
        assert validate_python_files(["m.py"], tmp_path, checks=["ast"]).passed

    def test_targets_are_confined_and_must_exist(self, tmp_path: Path) -> None:
        """Targets outside the project or missing are issues, not crashes."""
        report = validate_python_files(["../x.py", "missing.py"], tmp_path)
        assert [i.message for i in report.issues] == [
            f"path '../x.py' is outside the project root {tmp_path.resolve()}", "no such file"]


class TestJsonYaml:
    """JSON and YAML parse checks locate the problem."""

    def test_json(self, tmp_path: Path) -> None:
        """Broken JSON files and texts are reported with line and column; good ones pass."""
        (tmp_path / "ok.json").write_text('{"a": 1}')
        (tmp_path / "bad.json").write_text('{\n  "a": 1,\n}')
        report = validate_json(["ok.json", "bad.json"], tmp_path, texts={"inline": "[1, 2"})
        assert sorted((i.path, i.line) for i in report.issues) == [("bad.json", 3), ("inline", 1)]
        assert validate_json(["ok.json"], tmp_path).passed

    def test_yaml(self, tmp_path: Path) -> None:
        """Broken YAML (in any document of a stream) is reported with its line."""
        (tmp_path / "bad.yaml").write_text("a: 1\n---\nb: [1, 2\nc: 3\n")
        report = validate_yaml(["bad.yaml"], tmp_path)
        assert not report.passed and report.issues[0].path == "bad.yaml" and report.issues[0].line == 4
        assert validate_yaml(texts={"t": "a: [1, 2]\n"}).passed

    def test_validate_json_tool(self, tmp_path: Path) -> None:
        """As a tool, a failed validation is an ``error`` result carrying the report and its summary."""
        result = ToolPipeline(default_registry()).run(
            ToolCall(name="validateJson", args={"text": "{oops"}), step_id="s1", project_root=tmp_path)
        assert result.status == "error" and result.result["passed"] is False
        assert "<text>:1:2: [json]" in (result.error or "")


TEMPLATE = """---
title: {{title}}
---
# {{project_name}} PRD

## Goals

{{goals}}

## Requirements for {{project_name}}

{{requirements}}

```markdown
## Example heading inside a fence
```
"""


class TestTemplate:
    """check_template_complete: no placeholders left, every ``##`` section present, frontmatter valid."""

    def test_complete_document_passes(self) -> None:
        """Filled placeholders and all sections (a heading placeholder matches any text) pass."""
        text = "---\ntitle: Shop\n---\n# Shop PRD\n\n## Goals\n\nSell.\n\n## Requirements for Shop\n\nFast.\n"
        report = check_template_complete(text, TEMPLATE)
        assert report.passed, report.summary()

    def test_leftover_placeholder_and_missing_section_fail(self) -> None:
        """A ``{{placeholder}}`` left in the text and a missing section are both reported."""
        text = "# Shop PRD\n\n## Goals\n\n{{goals}}\n"
        report = check_template_complete(text, TEMPLATE, name="prd.md")
        assert [(i.check, i.line) for i in report.issues] == [("placeholder", 5), ("section", None)]
        assert "Requirements for {{project_name}}" in report.issues[1].message

    def test_fenced_examples_are_ignored(self) -> None:
        """Headings and placeholders inside code fences are examples, not slots to fill."""
        template = "## Usage\n\n```\n## Not a section\n{{not_a_slot}}\n```\n"
        text = "## Usage\n\n```\n{{still_fine}}\n```\n"
        assert check_template_complete(text, template).passed

    def test_invalid_frontmatter_fails(self) -> None:
        """Frontmatter that does not parse as YAML, or is not closed, is reported."""
        bad = check_template_complete("---\ntitle: [oops\n---\n## Goals\n", "## Goals\n")
        assert [i.check for i in bad.issues] == ["frontmatter"]
        unclosed = check_template_complete("---\ntitle: x\n## Goals\n", "## Goals\n")
        assert "not closed" in unclosed.issues[0].message
