"""`ccw execute --with-commit` (CCW v7): one commit per completed task, of its own files, exactly once."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stepline.ccw._commit import commit_message
from stepline.interfaces.cli._app import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FILES = {"IMPL-1": "src/client.py", "IMPL-2": "src/checkout.py", "IMPL-3": "src/refund.py"}


def _git(project: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The payment session in a git repository whose first commit holds everything; a script where each task
    writes its own source file (IMPL-2 also an untracked scratch file it does not write through stepline)."""
    root = tmp_path / "project"
    shutil.copytree(FIXTURES / "ccw" / "project-active", root)
    shutil.rmtree(root / ".workflow" / "active" / "WFS-auth-system")
    (root / ".gitignore").write_text(".stepline/\n", encoding="utf-8")
    (root / "script.yaml").write_text(yaml.safe_dump({"steps": {task: [
        {"write_output": {"content": f"# {task}\n", "path": path}},
        {"finish": {"summary": f"Implemented {path}\nmore detail"}}] for task, path in FILES.items()}}),
        encoding="utf-8")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "base")
    (root / "notes.txt").write_text("a user's own uncommitted change\n", encoding="utf-8")
    return root


def _execute(project: Path) -> int:
    return run_cli(["ccw", "execute", "-y", "--no-complete", "--with-commit", "--script", "script.yaml",
                    "-j", "1", "-C", str(project), "-q"])


@pytest.fixture(autouse=True)
def _identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(name, "stepline test")
    for name in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(name, "test@example.com")


def test_each_task_is_one_commit_of_its_own_files_with_ccw_s_message(project: Path) -> None:
    """Three tasks, three commits: each holds only the file its task wrote, its message is
    `{type}: {title} - {summary's first line}`, and a user's unrelated change stays uncommitted."""
    assert _execute(project) == 0
    log = _git(project, "log", "--format=%s", "main").splitlines()
    assert log == ["fix: Refund flow - Implemented src/refund.py",
                   "feat: Checkout endpoint - Implemented src/checkout.py",
                   "feat: Add payment provider client - Implemented src/client.py", "base"]
    for task, path in FILES.items():
        sha = _git(project, "log", "--format=%H", f"--grep=Stepline-Task: {task}$", "main").split()[0]
        assert _git(project, "show", "--format=", "--name-only", sha).split() == [path]
    assert "notes.txt" in _git(project, "status", "--porcelain")


def test_a_crash_after_git_ran_does_not_commit_twice(project: Path) -> None:
    """Killed after a task's commit, before its result reached the journal: the resumed run finds the commit
    by its trailers and records it; no task is committed twice."""
    assert _execute(project) == 0
    journal = next((project / ".stepline" / "runs").glob("run-*/journal.jsonl"))
    lines = journal.read_bytes().splitlines(keepends=True)
    intent = next(i for i, line in enumerate(lines) if b'"ccw_commit"' in line
                  and json.loads(line)["type"] == "CallStarted" and json.loads(line)["step_id"] == "IMPL-2")
    journal.write_bytes(b"".join(lines[: intent + 1]))
    manifest = journal.parent / "manifest.json"
    data = json.loads(manifest.read_bytes())
    data.update(journal_seq=intent + 1, status="running")
    manifest.write_text(json.dumps(data), encoding="utf-8")
    _git(project, "reset", "-q", "--hard", "HEAD~1")  # IMPL-3's commit came after the kill: undo it
    (project / "notes.txt").write_text("a user's own uncommitted change\n", encoding="utf-8")
    assert _execute(project) == 0
    subjects = _git(project, "log", "--format=%s", "main").splitlines()
    assert len(subjects) == 4 and len(set(subjects)) == 4, subjects
    events = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    redo = [e["data"]["result"] for e in events if e["type"] == "CallRecorded" and e["data"].get("op") == "ccw_commit"
            and e["step_id"] == "IMPL-2"]
    assert redo and redo[-1]["redo"] == "found in the history"


def test_no_commit_for_an_empty_summary_and_a_failed_commit_is_told(project: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """CCW: no summary, no commit; a commit git refuses is journaled and shown, and the session goes on."""
    assert commit_message("feature", "T", "\n# Task: IMPL-1 T\n\n") is None
    assert commit_message("bugfix", "T", "Fixed it\n") == "fix: T - Fixed it"
    assert commit_message("research", "T", "Found it\n") == "chore: T - Found it"
    hook = project / ".git" / "index.lock"
    hook.write_text("", encoding="utf-8")  # git refuses to touch the index while it exists
    assert run_cli(["ccw", "execute", "-y", "--no-complete", "--with-commit", "--script", "script.yaml",
                    "-j", "1", "-C", str(project), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "completed"
    hook.unlink()
    assert _git(project, "log", "--format=%s", "main").splitlines() == ["base"]
    journal = next((project / ".stepline" / "runs").glob("run-*/journal.jsonl"))
    errors = [json.loads(line)["data"]["result"] for line in journal.read_text(encoding="utf-8").splitlines()
              if '"ccw_commit"' in line and '"error"' in line]
    assert len(errors) == 3 and "index.lock" in errors[0]["error"]
