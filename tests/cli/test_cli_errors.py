"""Every user mistake is one clear line on stderr, a documented non-zero exit code, and no damage."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli


def _tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "lock"}


@pytest.fixture
def finished_run(project: Path, write_workflow: Callable[..., Path]) -> str:
    """A completed run in the project."""
    path = write_workflow([{"id": "a"}, {"id": "b"}])
    assert run_cli(["run", str(path), "-C", str(project), "-q"]) == 0
    return next((project / ".stepline" / "runs").iterdir()).name


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    assert err[0].startswith("error: ")
    return err[0]


def test_malformed_native_workflow_names_file_and_line(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A schema error in a workflow file is reported as file:line with the field, exit 4."""
    bad = project / "bad.yaml"
    bad.write_text("id: x\nsteps:\n  - id: ok\n  - id: two\n    retries: {max: -1}\n", encoding="utf-8")
    assert run_cli(["run", str(bad), "-C", str(project)]) == 4
    line = _one_line_error(capsys)
    assert f"{bad}:5:" in line and "retries.max" in line


def test_yaml_syntax_error_names_file_and_line(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A YAML syntax error is reported with its line: run exits 4, validate lists it and exits 10."""
    bad = project / "bad.yaml"
    bad.write_text("id: x\nsteps:\n  - id: [unclosed\n", encoding="utf-8")
    assert run_cli(["run", str(bad), "-C", str(project)]) == 4
    assert f"{bad}:4: YAML error" in _one_line_error(capsys)
    assert run_cli(["validate", str(bad)]) == 10
    assert f"{bad}:4: error: YAML error" in capsys.readouterr().out.splitlines()[0]


def test_unknown_run_is_not_found_with_a_suggestion(project: Path, finished_run: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown run id exits 3 and suggests the closest run."""
    before = _tree_digest(project)
    wrong = finished_run[:-1] + ("0" if finished_run[-1] != "0" else "1")
    assert run_cli(["resume", wrong, "-C", str(project)]) == 3
    assert f"did you mean {finished_run}" in _one_line_error(capsys)
    assert _tree_digest(project) == before


def test_missing_workflow_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path that does not exist exits 3 naming it."""
    assert run_cli(["run", str(project / "nope.yaml"), "-C", str(project)]) == 3
    assert "nope.yaml: no such file" in _one_line_error(capsys)


def test_bad_var_is_a_usage_error(project: Path, write_workflow: Callable[..., Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--var without NAME=VALUE exits 2 with an example of the right form."""
    path = write_workflow([{"id": "a"}])
    assert run_cli(["run", str(path), "--var", "novalue", "-C", str(project)]) == 2
    assert "--var expects NAME=VALUE, got 'novalue'" in _one_line_error(capsys)
    assert not (project / ".stepline").exists()


def test_unknown_flag_and_executor(project: Path, write_workflow: Callable[..., Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong flag exits 2; a misspelt executor exits 3 with 'did you mean'."""
    path = write_workflow([{"id": "a"}])
    assert run_cli(["run", str(path), "--frobnicate"]) == 2
    assert "No such option" in _one_line_error(capsys)
    assert run_cli(["run", str(path), "--executor", "dryrun", "-C", str(project)]) == 3
    assert "did you mean 'dry-run'" in _one_line_error(capsys)


def test_resuming_a_completed_run_is_refused_without_changes(project: Path, finished_run: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """resume on a completed run exits 5 and leaves its directory byte-identical."""
    before = _tree_digest(project)
    assert run_cli(["resume", finished_run, "-C", str(project)]) == 5
    assert "already completed" in _one_line_error(capsys)
    assert _tree_digest(project) == before


def test_a_second_process_on_a_locked_run_names_the_holder(project: Path, finished_run: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """While another process holds a run, resume exits 5 naming that process, and nothing changes."""
    lock = project / ".stepline" / "runs" / finished_run / "lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from pathlib import Path; from stepline.store import RunLock;"
         f"l=RunLock(Path({str(lock)!r}), 'r'); l.acquire(); print('held', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = _tree_digest(project)
        assert run_cli(["resume", finished_run, "-C", str(project)]) == 5
        assert f"driven by process {holder.pid}" in _one_line_error(capsys)
        assert _tree_digest(project) == before
    finally:
        holder.kill()
        holder.wait()


def test_real_process_prints_one_line_and_exit_code(project: Path) -> None:
    """The installed entry point itself (not just run_cli) reports an error without a traceback."""
    done = subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", "status", "run-nope", "-C",
                           str(project)], capture_output=True, text=True)
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_run_status_show_export_list(project: Path, finished_run: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The inspection commands work on a finished run and --json is machine-readable."""
    import json

    assert run_cli(["status", finished_run, "-C", str(project), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    assert run_cli(["list", "-C", str(project), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["run_id"] == finished_run
    assert run_cli(["show", finished_run, "-C", str(project), "--json"]) == 0
    types = [e["type"] for e in json.loads(capsys.readouterr().out)["events"]]
    assert types[0] == "WorkflowStarted" and types[-1] == "WorkflowCompleted"
    out = project / "export.json"
    assert run_cli(["export", finished_run, "-C", str(project), "-o", str(out)]) == 0
    exported = json.loads(out.read_text())
    assert exported["run"]["run_id"] == finished_run and len(exported["events"]) == len(types)


def test_export_rebuilds_the_timeline_a_power_cut_may_have_left_empty(
        project: Path, finished_run: str, capsys: pytest.CaptureFixture[str]) -> None:
    """timeline.json is written without fsync (it is derived): readers rebuild it, so an empty one (what a
    power cut can leave on some file systems) does not break an export."""
    import json

    run_dir = next((project / ".stepline" / "runs").glob(f"{finished_run}"))
    (run_dir / "timeline.json").write_bytes(b"")
    assert run_cli(["show", finished_run, "-C", str(project), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    out = project / "export.json"
    assert run_cli(["export", finished_run, "-C", str(project), "-o", str(out)]) == 0
    exported = json.loads(out.read_text())
    assert exported["timeline"]["events"] == shown["events"] and shown["events"]


def test_loading_the_cli_imports_nothing_heavy() -> None:
    """`stepline --help` stays fast because registering the commands imports no engine, SDK or asyncio."""
    code = ("import sys; from stepline.interfaces.cli import _commands; "
            "print(sorted(m for m in ('asyncio', 'pydantic', 'rich.console', 'yaml', 'stepline.engine', 'openai', "
            "'anthropic', 'mcp') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
