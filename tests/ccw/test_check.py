"""``check_ccw_session``: every problem of a session folder as one file:line diagnostic (R-E8b)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stepline.ccw._check import check_ccw_session
from stepline.errors import NotFoundError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ccw"
AUTH = FIXTURES / "project-active" / ".workflow" / "active" / "WFS-auth-system"
SESSIONS = FIXTURES / "sessions"


def _codes(session_dir: Path) -> list[tuple[str, str, int | None]]:
    return [(d.code, Path(d.path).name, d.line) for d in check_ccw_session(session_dir)]


@pytest.mark.parametrize("session_dir", [
    AUTH,
    FIXTURES / "project-active" / ".workflow" / "active" / "WFS-payment-module",
    FIXTURES / "project-flat" / ".workflow" / "active" / "WFS-report-export",
    FIXTURES / "project-legacy" / ".workflow" / "WFS-user-auth",
    SESSIONS / "WFS-failing-deps",
    SESSIONS / "WFS-tdd-parser",
], ids=lambda p: p.name)
def test_healthy_sessions_have_no_diagnostics(session_dir: Path) -> None:
    """The well-formed fixtures check clean."""
    assert check_ccw_session(session_dir) == []


def test_broken_session_reports_each_problem_once() -> None:
    """Missing session file, missing plan, schema errors, bad status, mismatch, missing tasks and deps."""
    assert _codes(SESSIONS / "WFS-broken") == [
        ("missing-session-file", "workflow-session.json", None),
        ("missing-impl-plan", "IMPL_PLAN.md", None),
        ("task-schema", "IMPL-3.json", 1),
        ("task-schema", "IMPL-3.json", 4),
        ("status-mismatch", "TODO_LIST.md", 4),
        ("todo-missing-task", "TODO_LIST.md", 6),
        ("missing-dependency", "IMPL-1.json", 20),
    ]


def test_each_diagnostic_is_one_line_with_file_and_line() -> None:
    """Every diagnostic prints as one line starting with file:line."""
    for diagnostic in check_ccw_session(SESSIONS / "WFS-broken"):
        text = str(diagnostic)
        assert "\n" not in text
        assert text.startswith(diagnostic.path)


def test_corrupt_task_is_reported_once() -> None:
    """A task JSON that does not parse is a json-syntax error at its line, not also a missing task."""
    assert _codes(SESSIONS / "WFS-corrupt") == [("json-syntax", "IMPL-2.json", 24)]


def test_cycle_is_reported() -> None:
    """A dependency cycle is one error naming the tasks."""
    (diagnostic,) = check_ccw_session(SESSIONS / "WFS-cycle")
    assert diagnostic.code == "dependency-cycle"
    assert "IMPL-1 → IMPL-2 → IMPL-3 → IMPL-1" in diagnostic.message


def test_warnings_for_drift_between_files(tmp_path: Path) -> None:
    """Unlisted tasks, renamed files, a foreign session_id and plan.json ids without tasks are warnings."""
    session_dir = tmp_path / "WFS-auth-system"
    shutil.copytree(AUTH, session_dir)
    (session_dir / "workflow-session.json").write_text(json.dumps({"session_id": "WFS-other"}), encoding="utf-8")
    data = json.loads((session_dir / ".task" / "IMPL-4.json").read_text(encoding="utf-8"))
    data["id"] = "IMPL-5"
    (session_dir / ".task" / "IMPL-4.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    (session_dir / "plan.json").write_text(json.dumps({"task_ids": ["IMPL-1", "IMPL-8"]}), encoding="utf-8")
    codes = {(d.severity, d.code) for d in check_ccw_session(session_dir)}
    assert codes == {("warning", "session-id-mismatch"), ("warning", "id-mismatch"),
                     ("error", "todo-missing-task"), ("warning", "task-not-in-todo"),
                     ("warning", "plan-missing-task")}


def test_missing_todo_list_is_a_warning(tmp_path: Path) -> None:
    """Without TODO_LIST.md the session still runs, in task-id order; the check says so."""
    session_dir = tmp_path / "WFS-auth-system"
    shutil.copytree(AUTH, session_dir)
    (session_dir / "TODO_LIST.md").unlink()
    assert [(d.severity, d.code) for d in check_ccw_session(session_dir)] == [("warning", "missing-todo-list")]


def test_missing_folder_is_not_found(tmp_path: Path) -> None:
    """Checking a folder that does not exist is NotFoundError."""
    with pytest.raises(NotFoundError):
        check_ccw_session(tmp_path / "WFS-none")
