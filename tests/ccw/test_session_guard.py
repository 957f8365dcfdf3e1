"""Issue 15's CCW failure paths: one driver per session, what `ccw status` shows after a crash, and what a
task's plan may touch (paths outside the project, pre_analysis commands and their output)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from stepline.ccw._driver import session_lock
from stepline.interfaces.cli._app import run_cli
from stepline.store import RunStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BENCH_GEN = Path(__file__).resolve().parents[2] / "bench" / "ccw_gen.py"
ALLOW_SHELL = "tools:\n  risk_policy:\n    high_requires_approval: false\n"


def _generate(project: Path, tasks: int) -> Path:
    spec = importlib.util.spec_from_file_location("ccw_gen", BENCH_GEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    session_dir: Path = module.generate_session(project, tasks, seed=3, max_deps=1)
    return session_dir


def _slow_session(tmp_path: Path, tasks: int = 4, seconds: float = 0.4) -> tuple[Path, Path, list[str]]:
    """A project whose session's tasks each take ``seconds`` (a shell sleep) and append their id to
    effects.log; returns the project, the session and the `ccw execute` arguments."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "config").mkdir()
    (project / "config" / "runtime.yaml").write_text(ALLOW_SHELL, encoding="utf-8")
    session_dir = _generate(project, tasks)
    for path in (session_dir / ".task").glob("*.json"):  # a command a kill may interrupt
        data = json.loads(path.read_text(encoding="utf-8"))
        data.setdefault("flow_control", {})["pre_analysis"] = [{"step": "wait", "command": f"bash(sleep {seconds})"}]
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    script = project / "script.yaml"
    script.write_text(yaml.safe_dump({"steps": {f"IMPL-{k}": [
        {"write_output": {"content": f"IMPL-{k}\n", "path": "effects.log"}},
        {"finish": {"summary": f"did IMPL-{k}"}}] for k in range(1, tasks + 1)}}), encoding="utf-8")
    args = [sys.executable, "-m", "stepline.interfaces.cli", "ccw", "execute", "--resume-session", session_dir.name,
            "--script", str(script), "-j", "1", "-C", str(project), "-q"]
    return project, session_dir, args


def _wait_for_run(project: Path, timeout: float = 20.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = sorted((project / ".stepline" / "runs").glob("run-*/journal.jsonl"))
        if runs and runs[0].stat().st_size > 0:
            return runs[0].parent
        time.sleep(0.02)
    raise AssertionError("the first execute never started its run")


def _effects(project: Path) -> Counter[str]:
    return Counter((project / "effects.log").read_text(encoding="utf-8").splitlines())


@pytest.mark.slow
def test_a_second_execute_of_a_running_session_is_refused_and_each_task_runs_once(tmp_path: Path) -> None:
    """Two `ccw execute` of one session: the second is refused (exit 5) with one line naming the first's pid
    and run, and every task's effect happens once."""
    project, _, args = _slow_session(tmp_path)
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = _wait_for_run(project)
    second = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert second.returncode == 5, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and f"process {first.pid} (run {run_dir.name})" in lines[0], lines
    assert first.wait(timeout=60) == 0, first.stderr.read() if first.stderr else ""
    assert _effects(project) == Counter({f"IMPL-{k}": 1 for k in range(1, 5)})
    assert len(list((project / ".stepline" / "runs").glob("run-*"))) == 1


@pytest.mark.slow
def test_a_session_whose_executor_died_is_taken_over_and_finished_once(tmp_path: Path) -> None:
    """SIGKILL the execute mid-session: the next execute takes the session over (no refusal), resumes the same
    run, and each task's effect is done exactly once."""
    project, _, args = _slow_session(tmp_path)
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = _wait_for_run(project)
    deadline = time.monotonic() + 20
    while not (project / "effects.log").is_file() and time.monotonic() < deadline:
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    again = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if again.returncode == 9:
        # Killed inside a task's pre_analysis command (its sleep): its outcome is unknown, so the takeover asks
        # at a rerun: gate instead of running it again silently (issue 28); a person approves, it goes on.
        gates = [gate for gate in json.loads(_cli(project, "gates", "--json").stdout)
                 if gate["gate_id"].startswith("rerun:shell:")]
        assert len(gates) == 1, (again.stderr, gates)
        assert _cli(project, "approve", gates[0]["run_id"], gates[0]["gate_id"], "--by", "test").returncode == 0
        again = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert [path.name for path in (project / ".stepline" / "runs").glob("run-*")] == [run_dir.name]
    assert _effects(project) == Counter({f"IMPL-{k}": 1 for k in range(1, 5)})


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)],
                          capture_output=True, text=True, timeout=120)


def test_complete_is_refused_while_the_session_is_executed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ccw complete` of a session another process executes: exit 5, one line naming the holder; nothing moved."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "ccw" / "project-active", project)
    session_dir = project / ".workflow" / "active" / "WFS-payment-module"
    with session_lock(RunStore(project / ".stepline" / "runs"), session_dir):
        assert run_cli(["ccw", "complete", "payment", "-C", str(project)]) == 5
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and "session WFS-payment-module is being executed by process" in err[0], err
        assert session_dir.is_dir()
    assert run_cli(["ccw", "complete", "payment", "-C", str(project)]) == 0  # the holder is gone: it goes ahead
    assert (project / ".workflow" / "archives" / "WFS-payment-module").is_dir()


def _journaled_but_unwritten(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose session's run journaled IMPL-1's completion and stopped before writing its files (the
    done record and the file changes taken back out, as a SIGKILL between intent and files leaves them)."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "ccw" / "project-active", project)
    session_dir = project / ".workflow" / "active" / "WFS-payment-module"
    before = {path: path.read_bytes() for path in session_dir.rglob("*") if path.is_file()}
    assert run_cli(["ccw", "execute", "--resume-session", "payment", "-C", str(project), "-q"]) == 0
    journal = next((project / ".stepline" / "runs").glob("run-*/journal.jsonl"))
    lines = journal.read_bytes().splitlines(keepends=True)
    intent = next(i for i, line in enumerate(lines)
                  if b'"ccw_complete"' in line and json.loads(line)["type"] == "CallStarted")
    journal.write_bytes(b"".join(lines[: intent + 1]))  # killed right after IMPL-1's intent
    manifest = journal.parent / "manifest.json"
    data = json.loads(manifest.read_bytes())
    data.update(journal_seq=intent + 1, status="running")
    manifest.write_text(json.dumps(data), encoding="utf-8")
    for path in list(session_dir.rglob("*")):
        if path.is_file() and path not in before:
            path.unlink()
    for path, content in before.items():
        path.write_bytes(content)
    return project, session_dir


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(path.relative_to(root)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("command", ["status", "check", "sessions"])
def test_readers_write_nothing_and_report_the_completions_the_journal_holds(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """After a crash between a completion's intent and its files, `ccw status`, `check` and `sessions` only read
    (issue 28 item 5): on a disk that refuses every write they answer, no byte of the project changes, and they
    report the journaled completion (status shows it as ``completing``); the next execute writes it."""
    project, session_dir = _journaled_but_unwritten(tmp_path)
    capsys.readouterr()
    before = _tree(project)

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    import stepline.ccw._state as state

    monkeypatch.setattr(state, "write_files", disk_full)
    monkeypatch.setattr(state.os, "replace", disk_full)
    args = ["ccw", command, *([] if command == "sessions" else ["payment"]), "-C", str(project), "--json"]
    assert run_cli(args) in (0, 10)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert ("1 completion(s) journaled by its last run are not all in the session's files yet "
            "(`stepline ccw execute` writes them): IMPL-1") in captured.err
    assert _tree(project) == before
    if command == "status":
        rows = {row["id"]: row["status"] for row in json.loads(captured.out)["tasks"]}
        assert rows["IMPL-1"] == "completing"
    monkeypatch.undo()
    # The next execute finishes the run: the completion is written, and journaled done.
    assert run_cli(["ccw", "execute", "--resume-session", "payment", "-C", str(project), "-q"]) == 0
    assert json.loads((session_dir / ".task" / "IMPL-1.json").read_text(encoding="utf-8"))["status"] == "completed"
    todo = (session_dir / "TODO_LIST.md").read_text(encoding="utf-8")
    assert any(line.startswith("- [x]") and "IMPL-1" in line for line in todo.splitlines())


def test_a_live_run_s_pending_completions_are_shown_as_completing(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """While another process holds the session, `ccw status` shows the journaled completions as ``completing``,
    naming the process writing them."""
    project, session_dir = _journaled_but_unwritten(tmp_path)
    capsys.readouterr()
    before = (session_dir / ".task" / "IMPL-1.json").read_bytes()
    with session_lock(RunStore(project / ".stepline" / "runs"), session_dir):
        assert run_cli(["ccw", "status", "payment", "-C", str(project), "--json"]) == 0
    captured = capsys.readouterr()
    rows = {row["id"]: row["status"] for row in json.loads(captured.out)["tasks"]}
    assert rows["IMPL-1"] == "completing"
    assert "is writing them now): IMPL-1" in captured.err
    assert (session_dir / ".task" / "IMPL-1.json").read_bytes() == before


def _task(session_dir: Path, name: str) -> Path:
    return session_dir / ".task" / name


def test_check_reports_paths_outside_the_project_and_strict_makes_them_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """focus_paths and target_files that leave the project (`../../etc`, `/etc/passwd`) are warnings naming
    the file and line; `--strict` makes them errors (exit 10)."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "ccw" / "project-active", project)
    session_dir = project / ".workflow" / "active" / "WFS-payment-module"
    path = _task(session_dir, "IMPL-1.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    data["context"]["focus_paths"] = ["src/payments", "../../etc"]
    data.setdefault("flow_control", {})["target_files"] = ["/etc/passwd", "src/payments/ok.py"]
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    assert run_cli(["ccw", "check", "payment", "-C", str(project)]) == 0
    out = capsys.readouterr().out
    outside = [line for line in out.splitlines() if "outside the project" in line]
    assert len(outside) == 2, out
    assert any("focus_paths names '../../etc'" in line and "IMPL-1.json:" in line for line in outside)
    assert any("target_files names '/etc/passwd'" in line for line in outside)
    assert "src/payments" not in "".join(outside)
    assert run_cli(["ccw", "check", "payment", "-C", str(project), "--strict"]) == 10
    assert "2 error(s)" in capsys.readouterr().out


def _reading_outside(tmp_path: Path, secret: str) -> tuple[Path, Path]:
    """A project without the shell allowance whose one task's pre_analysis reads a file outside it."""
    outside = tmp_path / "outside.txt"
    outside.write_text(f"token={secret}\n", encoding="utf-8")
    project = tmp_path / "project"
    shutil.copytree(FIXTURES / "ccw" / "project-active", project)
    shutil.rmtree(project / "config")  # the default policy: shell is high risk
    shutil.rmtree(project / ".workflow" / "active" / "WFS-auth-system")
    session_dir = project / ".workflow" / "active" / "WFS-payment-module"
    for path in sorted((session_dir / ".task").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data.get("flow_control", {}).pop("pre_analysis", None)
        if data["id"] == "IMPL-1":
            data.setdefault("flow_control", {})["pre_analysis"] = [
                {"step": "peek", "command": f"bash(cat {outside})", "output_to": "peek", "on_error": "fail"}]
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return project, session_dir


def test_a_pre_analysis_shell_command_waits_for_approval_in_a_normal_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `bash(...)` pre_analysis command is a high-risk tool call: without a person's approval it does not
    run, and the run is blocked at the task's gate; approved, it runs and the session completes."""
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    project, _ = _reading_outside(tmp_path, secret)
    assert run_cli(["ccw", "execute", "--resume-session", "payment", "-C", str(project), "--json"]) == 9
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "blocked"
    journal = next((project / ".stepline" / "runs").glob("run-*/journal.jsonl"))
    events = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    assert not [e for e in events if e["type"] == "ToolStarted"]  # the command did not run
    assert any(e["type"] == "ToolApprovalRequired" and e["data"]["gate_id"] == "tool:shell:IMPL-1" for e in events)
    assert run_cli(["approve", result["run_id"], "tool:shell:IMPL-1", "--by", "ops", "-C", str(project)]) == 0
    assert run_cli(["ccw", "execute", "--resume-session", "payment", "-C", str(project), "-q"]) == 0
    text = journal.read_text(encoding="utf-8")
    assert secret not in text and "token=" in text  # the output ran, and its secret is redacted


def test_under_yes_a_pre_analysis_command_runs_with_a_journaled_allowance_and_its_secret_is_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With -y the command runs without a gate, the allowance is journaled, and a secret in its output is a
    failed guardrail report (told), redacted from the journal, the tool results and the agent's prompt."""
    secret = "AKIA" + "Z7Y6X5W4V3U2T1S0"
    project, session_dir = _reading_outside(tmp_path, secret)
    assert run_cli(["ccw", "execute", "-y", "--no-complete", "-C", str(project), "--json"]) == 0
    capsys.readouterr()
    run_dir = next((project / ".stepline" / "runs").glob("run-*"))
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()]
    allowance = [e["data"] for e in events if e["type"] == "ToolApprovalRequired"]
    assert allowance and allowance[0]["allowed_by"].startswith("-y (unattended)")
    failed = [e["data"] for e in events if e["type"] == "ValidationFailed" and e["data"].get("guardrail") == "secrets"]
    assert failed and failed[0]["stage"] == "input"
    for name in ("journal.jsonl", "tool_results.json"):
        assert secret not in (run_dir / name).read_text(encoding="utf-8"), name
    work = [e for e in events if e["type"] == "CallRecorded" and e["data"].get("op") == "pre_analysis"]
    assert work and "token=" in work[0]["data"]["result"]["output"]
    assert secret not in (session_dir / ".summaries" / "IMPL-1-summary.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("damage", ["meta-paths", "task-json", "completion"])
def test_a_damaged_ccw_record_is_one_line_and_exit_6(tmp_path: Path, damage: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """What the CCW driver reads back on resume — the session's paths and each task's JSON path in the manifest,
    a completion intent in the journal — damaged: one `error:` line naming the file (and line), exit 6, for
    execute and for `ccw status`; nothing written to the session."""
    project, session_dir = _journaled_but_unwritten(tmp_path)
    run_dir = next((project / ".stepline" / "runs").glob("run-*"))
    if damage == "completion":
        journal = run_dir / "journal.jsonl"
        lines = journal.read_text(encoding="utf-8").splitlines()
        record = json.loads(lines[-1])
        record["data"]["args"]["completion"]["history"] = "not a list"
        lines[-1] = json.dumps(record)
        journal.write_text("\n".join(lines) + "\n", encoding="utf-8")
        where = f"journal.jsonl:{len(lines)}: bad completion record: the completion's history"
    else:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        if damage == "meta-paths":
            del manifest["workflow"]["meta"]["paths"]["summaries_dir"]
            where = "workflow.meta.paths must name the session's"
        else:
            manifest["workflow"]["steps"][0]["meta"]["task_json"] = 7
            where = "meta.task_json is not the path of its task JSON"
        (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    before = {path: path.read_bytes() for path in session_dir.rglob("*") if path.is_file()}
    commands = [["ccw", "execute", "--resume-session", "payment", "-C", str(project), "-q"]]
    if damage == "completion":
        commands.append(["ccw", "status", "payment", "-C", str(project)])
    for args in commands:
        assert run_cli(args) == 6, args
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and err[0].startswith("error: ") and where in err[0], err
    assert {path: path.read_bytes() for path in session_dir.rglob("*") if path.is_file()} == before
