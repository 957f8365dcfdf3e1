"""Task JSON of CCW sessions: both schemas, status spellings, light scan and full validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stepline.ccw._task import (
    detect_schema,
    infer_agent,
    normalize_status,
    read_task_file,
    scan_task_file,
    validate_task_data,
)
from stepline.errors import ReaderError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ccw"
AUTH = FIXTURES / "project-active" / ".workflow" / "active" / "WFS-auth-system"
FLAT = FIXTURES / "project-flat" / ".workflow" / "active" / "WFS-report-export"
CORPUS_SCHEMA = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "ccw" / "schemas" / "task-schema.json"


def _write(tmp_path: Path, data: Any, name: str = "IMPL-1.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


@pytest.mark.parametrize(("raw", "expected"), [
    ("pending", "pending"), ("active", "in_progress"), ("in_progress", "in_progress"),
    ("In Progress", "in_progress"), ("in-progress", "in_progress"), ("completed", "completed"),
    ("done", "completed"), ("blocked", "blocked"), ("container", "container"), ("failed", "failed"),
    ("skipped", "skipped"), ("someday", None), (3, None),
])
def test_status_spellings_are_normalised(raw: object, expected: str | None) -> None:
    """Every spelling CCW used maps to one canonical status; unknown ones map to None."""
    assert normalize_status(raw) == expected


def test_agent_comes_from_meta_or_is_inferred_from_type() -> None:
    """meta.agent wins; without it the task type picks the agent, with a default for unknown types."""
    assert infer_agent("@test-fix-agent", "feature") == "@test-fix-agent"
    assert infer_agent(None, "docs") == "@doc-generator"
    assert infer_agent(None, "test-fix") == "@test-fix-agent"
    assert infer_agent(None, None) == "@code-developer"


def test_schema_detection_tells_six_field_from_flat() -> None:
    """context/flow_control mean the 6-field schema; convergence or top-level depends_on the flat one."""
    assert detect_schema({"id": "a", "context": {}, "flow_control": {}}) == "six-field"
    assert detect_schema({"id": "a", "depends_on": [], "convergence": {}}) == "flat"
    assert detect_schema({"id": "a"}) is None


def test_scan_keeps_only_scheduling_fields_of_a_six_field_task() -> None:
    """The light scan of a 6-field task reads depends_on, group, parent, type and agent from meta/context."""
    ref = scan_task_file(AUTH / ".task" / "IMPL-1.3.json")
    assert (ref.id, ref.schema, ref.status) == ("IMPL-1.3", "six-field", "pending")
    assert ref.execution_group == "parallel-db-schema"
    assert ref.parent == "IMPL-1"
    assert (ref.type, ref.agent) == ("feature", "@code-developer")
    assert not hasattr(ref, "data")


def test_scan_reads_flat_task_fields_at_top_level() -> None:
    """A flat task's depends_on, type and parallel_group (as a string group) come from the top level."""
    ref = scan_task_file(FLAT / ".task" / "IMPL-003.json")
    assert (ref.schema, ref.depends_on, ref.execution_group, ref.type) == ("flat", ("IMPL-001",), "2", "feature")


def test_full_read_returns_the_whole_task() -> None:
    """read_task_file validates and keeps the parsed JSON for the executor."""
    task = read_task_file(FLAT / ".task" / "IMPL-005.json")
    assert task.id == "IMPL-005"
    assert task.data["convergence"]["criteria"]
    assert task.description.startswith("Wire export button")
    assert task.agent == "@code-developer"


def test_six_field_description_joins_requirements() -> None:
    """A 6-field task's description is its requirements, one per line."""
    assert read_task_file(AUTH / ".task" / "IMPL-2.json").description == "Integration tests: 1 module changed"


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    """A task file that does not parse is a ReaderError at path:line."""
    path = tmp_path / "IMPL-1.json"
    path.write_text('{\n  "id": "IMPL-1",\n  "title": oops\n}\n', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"IMPL-1\.json:3: task JSON does not parse"):
        scan_task_file(path)


def test_a_task_file_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    """Latin-1 bytes in a task file: one ReaderError naming the file, not a decoding traceback."""
    path = tmp_path / "IMPL-1.json"
    path.write_bytes('{"id": "IMPL-1", "title": "caf\u00e9"}'.encode("latin-1"))
    with pytest.raises(ReaderError, match=r"IMPL-1\.json:1: not UTF-8 at byte 30 \(invalid continuation byte: 0xe9\)"):
        scan_task_file(path)
    with pytest.raises(ReaderError, match="re-save the file as UTF-8"):
        read_task_file(path)


def test_unknown_status_is_an_error_with_its_line(tmp_path: Path) -> None:
    """An unknown status spelling stops the scan at the line of the status key."""
    path = _write(tmp_path, {"id": "IMPL-1", "title": "t", "status": "someday", "meta": {}, "context": {},
                             "flow_control": {}})
    with pytest.raises(ReaderError, match=r"IMPL-1\.json:4: task IMPL-1: unknown status 'someday'"):
        scan_task_file(path)


def test_depends_on_must_be_a_list_of_ids(tmp_path: Path) -> None:
    """A depends_on that is not a list of strings is refused with the line of the key."""
    path = _write(tmp_path, {"id": "IMPL-1", "title": "t", "depends_on": "IMPL-0",
                             "convergence": {"criteria": ["x"]}, "description": "d"})
    with pytest.raises(ReaderError, match="depends_on` must be a list"):
        scan_task_file(path)


def test_validation_lists_every_six_field_problem() -> None:
    """Missing required fields, wrong types and unnamed pre_analysis steps are all reported."""
    data = {"id": "IMPL-1", "title": 5, "status": "pending", "meta": [], "context": {"depends_on": "x"},
            "flow_control": {"pre_analysis": [{"action": "no name"}]}}
    problems = [message for message, _ in validate_task_data(data, json.dumps(data, indent=2))]
    assert "`title` must be a string" in problems
    assert "`meta` must be an object" in problems
    assert "context.`depends_on` must be a list of strings" in problems
    assert "pre_analysis step 1 needs a string `step` name" in problems


def test_validation_of_flat_schema_requires_convergence_criteria() -> None:
    """A flat task needs description, depends_on and non-empty convergence.criteria."""
    data = {"id": "T1", "title": "t", "depends_on": [], "convergence": {"criteria": []}, "parallel_group": "a"}
    problems = [message for message, _ in validate_task_data(data, json.dumps(data))]
    assert "flat task JSON lacks description" in problems
    assert "`convergence.criteria` must be a non-empty list of strings" in problems
    assert "`parallel_group` must be a number" in problems


def test_full_read_refuses_an_invalid_task(tmp_path: Path) -> None:
    """read_task_file raises on the first schema problem and says how many more there are."""
    path = _write(tmp_path, {"id": "IMPL-1", "title": "t", "status": "pending", "context": {}})
    with pytest.raises(ReaderError, match="lacks meta, flow_control"):
        read_task_file(path)


@pytest.mark.corpus
def test_flat_fixtures_match_the_published_task_schema() -> None:
    """The flat fixtures validate against CCW's own task-schema.json (when the corpus is present)."""
    if not CORPUS_SCHEMA.is_file():
        pytest.skip("shared corpus not present")
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(CORPUS_SCHEMA.read_text(encoding="utf-8"))
    # The published schema documents its sections with string-valued "_comment_*" properties, which are
    # not schemas; drop them so a strict validator accepts the rest.
    schema["properties"] = {k: v for k, v in schema["properties"].items() if not k.startswith("_comment")}
    validator = jsonschema.Draft7Validator(schema)
    for path in sorted((FLAT / ".task").glob("*.json")):
        validator.validate(json.loads(path.read_text(encoding="utf-8")))
