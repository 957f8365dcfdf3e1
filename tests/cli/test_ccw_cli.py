"""`stepline ccw …`: discovery and choice, execute, status, complete, check, and bad sessions left untouched."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def active(tmp_path: Path) -> Path:
    """A project with two active sessions (auth-system, payment-module) and one archived."""
    root = tmp_path / "project"
    shutil.copytree(FIXTURES / "ccw" / "project-active", root)
    return root


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    # after a prompt read from a pipe the error shares the prompt's line (no typed newline echoed)
    err = [line[line.index("error: "):] for line in capsys.readouterr().err.splitlines() if "error: " in line]
    assert len(err) == 1, err
    return err[0]


def test_sessions_lists_id_project_progress_as_table_and_json(active: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ccw sessions` shows each active session with done/total and percent; --json gives the same data."""
    assert run_cli(["ccw", "sessions", "-C", str(active)]) == 0
    out = capsys.readouterr().out
    assert "WFS-auth-system" in out and "1/6" in out and "16%" in out and "WFS-old-feature" not in out
    assert run_cli(["ccw", "sessions", "-C", str(active), "--json", "--all"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["WFS-payment-module"]["done"] == 0 and rows["WFS-payment-module"]["total"] == 3
    assert rows["WFS-old-feature"]["layout"] == "archived"


def test_execute_without_sessions_names_how_to_create_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No active session: exit 3 and one line that names /workflow:plan."""
    assert run_cli(["ccw", "execute", "-C", str(tmp_path)]) == 3
    assert "/workflow:plan" in _one_line_error(capsys)


def test_execute_takes_the_only_session(active: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With one active session there is no question: it runs to completion."""
    shutil.rmtree(active / ".workflow" / "active" / "WFS-auth-system")
    assert run_cli(["ccw", "execute", "-C", str(active), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["session"] == "WFS-payment-module" and result["status"] == "completed"


@pytest.mark.parametrize("answer", ["2\n", "WFS-payment-module\n", "payment\n"])
def test_execute_with_several_sessions_asks_by_number_id_or_partial_id(
        active: Path, answer: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Several sessions: a numbered list with progress, answered by number, full id or a unique part."""
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    assert run_cli(["ccw", "execute", "-C", str(active), "--json"]) == 0
    captured = capsys.readouterr()
    assert "1. WFS-auth-system | Authentication System | 1/6 tasks (16%)" in captured.err
    assert "2. WFS-payment-module | Payment Integration | 0/3 tasks (0%)" in captured.err
    assert json.loads(captured.out)["session"] == "WFS-payment-module"


def test_execute_with_an_ambiguous_answer_is_a_usage_error(
        active: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An answer matching both sessions is refused (exit 2) and nothing runs."""
    monkeypatch.setattr("sys.stdin", io.StringIO("WFS\n"))
    before = _tree(active / ".workflow")
    assert run_cli(["ccw", "execute", "-C", str(active)]) == 2
    assert "picks no single session" in _one_line_error(capsys)
    assert _tree(active / ".workflow") == before


def test_execute_with_several_sessions_and_nobody_to_ask_says_how_to_pick_one(
        active: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """No terminal and no answer on stdin (CI, cron): one line naming the ways to pick (exit 2), nothing runs."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    before = _tree(active / ".workflow")
    assert run_cli(["ccw", "execute", "-C", str(active)]) == 2
    error = _one_line_error(capsys)
    assert "2 active sessions and no terminal to choose one of them" in error
    assert "--resume-session ID" in error and "-y" in error
    assert _tree(active / ".workflow") == before


def test_execute_yes_takes_the_first_and_complete_archives_it(active: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """-y takes the first session; --complete archives it once every task is done."""
    assert run_cli(["ccw", "execute", "-y", "--complete", "-j", "2", "-C", str(active), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["session"] == "WFS-auth-system"
    assert result["archived"]["archive_path"] == ".workflow/archives/WFS-auth-system"
    assert (active / ".workflow" / "archives" / "WFS-auth-system" / ".summaries" / "IMPL-4-summary.md").is_file()


def test_resume_session_status_and_complete(active: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--resume-session skips discovery; status shows the tasks; complete archives with a manifest entry."""
    assert run_cli(["ccw", "execute", "--resume-session", "payment", "-C", str(active), "-q"]) == 0
    capsys.readouterr()
    assert run_cli(["ccw", "status", "WFS-payment-module", "-C", str(active), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["done"], status["total"], status["execution_model"]) == (3, 3, "sequential")
    assert [task["status"] for task in status["tasks"]] == ["completed"] * 3
    assert run_cli(["ccw", "complete", "payment", "-C", str(active)]) == 0
    assert "archived to .workflow/archives/WFS-payment-module" in capsys.readouterr().out
    manifest = json.loads((active / ".workflow" / "archives" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["archives"][-1]["session_id"] == "WFS-payment-module"


def test_execute_with_a_failing_task_exits_8(active: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A task whose pre_analysis fails fails the run (exit 8) and its dependents are skipped."""
    session = active / ".workflow" / "active" / "WFS-auth-system"
    path = session / ".task" / "IMPL-3.json"
    task = json.loads(path.read_text(encoding="utf-8"))
    task["flow_control"]["pre_analysis"] = [{"step": "boom", "action": "x", "command": "bash(exit 4)",
                                             "on_error": "fail"}]
    path.write_text(json.dumps(task), encoding="utf-8")
    assert run_cli(["ccw", "execute", "--resume-session", "auth", "-C", str(active), "--json"]) == 8
    steps = {s["step_id"]: s["status"] for s in json.loads(capsys.readouterr().out)["steps"]}
    assert steps["IMPL-3"] == "failed" and steps["IMPL-4"] == "skipped" and steps["IMPL-2"] == "completed"


def test_check_reports_every_problem_and_exits_10(capsys: pytest.CaptureFixture[str]) -> None:
    """`ccw check` on a broken session lists each problem with file:line and exits 10."""
    broken = FIXTURES / "ccw" / "sessions" / "WFS-broken"
    assert run_cli(["ccw", "check", str(broken)]) == 10
    out = capsys.readouterr().out
    assert "workflow-session.json is missing" in out and "[missing-session-file]" in out
    assert "TODO_LIST.md:6: error: TODO_LIST.md names task IMPL-7" in out


def _bad(kind: str, active: Path) -> Path:
    session = active / ".workflow" / "active" / "WFS-payment-module"
    if kind == "corrupt-json":
        (session / ".task" / "IMPL-2.json").write_text('{"id": "IMPL-2", "title": ', encoding="utf-8")
    elif kind == "missing-task":
        with (session / "TODO_LIST.md").open("a", encoding="utf-8") as handle:
            handle.write("- [ ] **IMPL-9**: Ghost → [📋](./.task/IMPL-9.json)\n")
    else:
        (session / "IMPL_PLAN.md").unlink()
    return session


@pytest.mark.parametrize(("kind", "expected"), [
    ("corrupt-json", "IMPL-2.json:1: task JSON does not parse"),
    ("missing-task", "TODO_LIST.md:7: TODO_LIST.md names task IMPL-9, which has no task JSON"),
    ("no-plan", "IMPL_PLAN.md: IMPL_PLAN.md is missing"),
])
def test_bad_session_is_one_clear_line_and_nothing_in_it_changes(
        active: Path, kind: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt task JSON, a TODO line naming a missing task, or no IMPL_PLAN.md: exit 4, one line naming
    the file, and the session tree is byte-for-byte what it was (no run, no status change)."""
    session = _bad(kind, active)
    before = _tree(session)
    assert run_cli(["ccw", "execute", "--resume-session", "payment", "-C", str(active)]) == 4
    assert expected in _one_line_error(capsys)
    assert _tree(session) == before
    assert not list((active / ".stepline" / "runs").glob("run-*"))  # no run (only the session's lock file)
