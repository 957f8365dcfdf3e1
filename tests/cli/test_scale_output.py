"""What a user touches stays fast and truthful at scale (issue 30 items 1-4, issue 28 items 8-9): status, show
and list read a digest kept beside the journal (never trusted over it), long runs show the rows worth a look,
ids are never cut, progress costs nothing when nobody looks, a native run loads no other family."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stepline.engine import Engine
from stepline.interfaces.cli._app import run_cli

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(project: Path, capsys: pytest.CaptureFixture[str]) -> Run:
    """Run the CLI in the project: (exit code, stdout, stderr)."""

    def call(*args: str) -> tuple[int, str, str]:
        code = run_cli([*args, "-C", str(project)])
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture
def long_run(project: Path, write_workflow: Callable[..., Path], cli: Run) -> str:
    """A completed dry-run of 300 steps (more than a digest keeps), its digest saved by `run`."""
    write_workflow([{"id": f"s{n:03d}"} for n in range(300)])
    assert cli("run", "flow.yaml", "--executor", "dry-run", "--yolo", "-q")[0] == 0
    return next((project / ".stepline" / "runs").iterdir()).name


def _rows(out: str, column: int = 0) -> list[str]:
    """The first column of a table's rows (a run's header line and the notes after the table left out)."""
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.split()[:1] in (["step"], ["seq"], ["run"])) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip() or line.startswith(("(", "errors:", "warning")):
            break
        rows.append(line.split()[column])
    return rows


def test_a_long_run_shows_its_last_steps_and_says_how_to_see_all(long_run: str, cli: Run,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """status and show of a long run come from its digest (the journal is not folded: loading is made to fail),
    print the last rows and say how many are left out; --all reads the journal and prints every row."""
    monkeypatch.setenv("COLUMNS", "80")

    def no_load(self: Engine, run_dir: object) -> None:
        raise AssertionError("the journal was folded although the digest matches it")

    with monkeypatch.context() as patched:
        patched.setattr(Engine, "load", no_load)
        patched.setattr(Engine, "diagnose", no_load)
        code, out, _ = cli("status", long_run)
        assert code == 0
        assert _rows(out) == [f"s{n:03d}" for n in range(280, 300)]
        assert f"(280 of 300 steps (300 completed) not shown; every one: stepline status {long_run} --all)" in out
        code, out, _ = cli("show", long_run)
        assert code == 0
        seqs = [int(seq) for seq in _rows(out)]
        assert seqs[0] == 1 and seqs[-1] == 602 and len(seqs) == 21  # the run's start and its last 20 events
        assert f"(581 of 602 events not shown; every one: stepline show {long_run} --all)" in out
        assert all(len(line) <= 80 for line in out.splitlines() if "not shown" not in line)
    code, out, _ = cli("status", long_run, "--all")
    assert code == 0 and _rows(out) == [f"s{n:03d}" for n in range(300)] and "not shown" not in out
    code, out, _ = cli("show", long_run, "--all")
    assert code == 0 and len(_rows(out)) == 602


def test_the_digest_is_never_trusted_over_the_journal(project: Path, long_run: str, cli: Run) -> None:
    """A journal changed after the digest was saved (a record edited in place, its size kept) is read again: the
    damage is reported (exit 6), by status, show and list alike; a missing digest is rebuilt once and saved."""
    run_dir = project / ".stepline" / "runs" / long_run
    digest = run_dir / "summary.json"
    assert json.loads(digest.read_bytes())["data"]["row"]["steps_done"] == 300
    journal = run_dir / "journal.jsonl"
    data = journal.read_bytes()
    at = data.rindex(b'"WorkflowStepCompleted"')
    journal.write_bytes(data[:at] + b'"WorkflowStepCompleteX"' + data[at + 23:])  # same size
    code, _, err = cli("status", long_run)
    assert code == 6 and "journal.jsonl:" in err
    assert cli("show", long_run)[0] == 6
    code, out, _ = cli("list")
    assert code == 0 and f"{long_run} damaged: journal.jsonl:" in out
    journal.write_bytes(data)
    digest.unlink()
    code, out, _ = cli("list")
    assert code == 0 and f"{long_run}  flow      completed  300/300" in out
    saved = digest.read_bytes()
    assert cli("status", long_run)[0] == 0
    assert digest.read_bytes() == saved  # read, not rebuilt again


def test_list_reads_digests_and_prints_whole_run_ids(project: Path, write_workflow: Callable[..., Path], cli: Run,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """list of runs whose digests match them folds no journal; at 80 columns and piped every run id is whole."""
    write_workflow([{"id": "a"}], id="a-workflow-with-a-rather-long-name-that-takes-room")
    for _ in range(3):
        assert cli("run", "flow.yaml", "-q")[0] == 0
    ids = sorted(p.name for p in (project / ".stepline" / "runs").iterdir())
    monkeypatch.setattr(Engine, "diagnose", lambda self, run_dir: pytest.fail("a journal was checked again"))
    for columns in ("80", None):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        code, out, _ = cli("list")
        assert code == 0 and _rows(out) == ids, out


def test_an_ambiguous_part_of_a_run_id_lists_the_runs_it_matches(project: Path, write_workflow: Callable[..., Path],
                                                                 cli: Run) -> None:
    write_workflow([{"id": "a"}])
    for _ in range(2):
        assert cli("run", "flow.yaml", "-q")[0] == 0
    ids = sorted(p.name for p in (project / ".stepline" / "runs").iterdir())
    code, _, err = cli("status", "run-")
    assert code == 2 and err.count("\n") == 1
    assert f"'run-' is part of 2 run ids: {ids[0]}, {ids[1]}" in err
    assert cli("status", ids[1][-8:])[0] == 0


def test_a_bare_stepline_prints_short_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: stepline COMMAND") and "error" not in err and len(err.splitlines()) <= 5


def test_gate_ids_print_as_written(project: Path, write_workflow: Callable[..., Path],
                                   write_script: Callable[..., Path], cli: Run,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`tool:shell:IMPL-1` holds an emoji code (`:shell:`): gates (at 80 columns) and approve print it as written,
    with the whole run id, so the ids a user copies are those approve takes (issue 28 item 8)."""
    monkeypatch.setenv("COLUMNS", "80")
    write_workflow([{"id": "IMPL-1", "body": "[bold]x[/bold]"}])
    write_script({"IMPL-1": [{"call_tool": {"name": "shell", "args": {"command": "echo hi"}}},
                             {"finish": {"summary": "done"}}]})
    code, _, err = cli("run", "flow.yaml", "--script", "script.yaml", "--non-interactive")
    assert code == 9 and "tool:shell:IMPL-1" in err
    code, out, _ = cli("gates")
    assert code == 0 and "tool:shell:IMPL-1" in out and "🐚" not in out
    run_id = _rows(out)[0]
    gate = out.splitlines()[1].split()[1]
    assert run_id == next((project / ".stepline" / "runs").iterdir()).name and len(out.splitlines()[1]) <= 80
    code, out, _ = cli("approve", run_id, gate, "--by", "[red]ada[/red]")
    assert code == 0 and out.startswith("approved tool:shell:IMPL-1 by [red]ada[/red];"), out


@pytest.mark.parametrize(("target", "code", "says"), [
    ("nodir/run.json", 3, "nodir/run.json: no such folder"), ("/", 2, "is a folder, not a file")])
def test_export_to_a_path_that_cannot_be_a_file_is_one_line(project: Path, write_workflow: Callable[..., Path],
                                                            cli: Run, target: str, code: int, says: str) -> None:
    """Issue 28 item 9: `export -o nodir/run.json` and `export -o /` are one line and a non-zero exit."""
    write_workflow([{"id": "a"}])
    assert cli("run", "flow.yaml", "-q")[0] == 0
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    found, out, err = cli("export", run_id, "-o", target)
    assert (found, out) == (code, "") and len(err.splitlines()) == 1 and says in err and "Traceback" not in err


def _run_in_subprocess(project: Path, code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, check=False,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_native_run_loads_no_other_family_and_piped_progress_no_rich(
        project: Path, write_workflow: Callable[..., Path]) -> None:
    """Issue 30 item 3: a 1-step native run imports no BMAD, CCW, skills or sprint code; item 2: with stderr a
    pipe, its progress is plain lines (rich is not even imported)."""
    write_workflow([{"id": "only", "body": "hi"}])
    out = _run_in_subprocess(project, (
        "import json, sys\n"
        "from stepline.interfaces.cli._app import run_cli\n"
        "code = run_cli(['run', 'flow.yaml'])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[:2] in (['stepline', 'bmad'], ['stepline', 'ccw'], "
        "['stepline', 'skills'], ['stepline', 'sprint']) or m.split('.')[0] == 'rich')\n"
        "print(json.dumps([code, loaded]))\n"))
    assert json.loads(out.splitlines()[-1]) == [0, []]


def test_progress_lines_on_a_pipe_are_plain(project: Path, write_workflow: Callable[..., Path]) -> None:
    """One plain line per step that ends, no terminal codes, the step's id and its summary as written."""
    write_workflow([{"id": "a:smile:"}, {"id": "b"}])
    done = subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", "run", "flow.yaml"], cwd=project,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["✓ a:smile: dry-run: a:smile:", "✓ b dry-run: b"]


def _on_a_terminal(project: Path, *args: str) -> str:
    """What `stepline run flow.yaml ARGS` shows on a pseudo-terminal (its stdin and stderr); it must exit 0."""
    import pty

    leader, follower = pty.openpty()
    done = subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", "run", "flow.yaml", *args], cwd=project,
                          stdin=follower, stdout=subprocess.PIPE, stderr=follower, check=False,
                          env={**os.environ, "COLUMNS": "80"})
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end is closed: all was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert done.returncode == 0, shown
    return shown.decode()


def test_progress_on_a_terminal_is_a_live_line(project: Path, write_workflow: Callable[..., Path]) -> None:
    """With stderr a terminal: a live line counting the steps done below the ended steps' lines, and the
    terminal's cursor shown again when the run ends; none in a run that may ask a person on that terminal (its
    redrawing would garble what they type), which still prints a line per step."""
    write_workflow([{"id": f"s{n}"} for n in range(30)])
    text = _on_a_terminal(project, "--yolo")
    assert "step(s) done" in text and "dry-run: s29" in text
    assert text.rfind("\x1b[?25h") > text.rfind("step(s) done")  # the live line stopped, the cursor back
    text = _on_a_terminal(project)
    assert "step(s) done" not in text and "dry-run: s29" in text


def test_a_long_blocked_run_shows_the_gate_and_the_steps_around_it(project: Path, write_workflow: Callable[..., Path],
                                                                   cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 300-step run blocked at its gate in step 150: status shows the blocked step with the 20 steps before and
    after it, not the early ones; show keeps the run's start and the gate's event among the last events; both
    say how many rows they left out."""
    monkeypatch.setenv("COLUMNS", "120")
    write_workflow([{"id": f"s{n:03d}", **({"human_gate": "required"} if n == 150 else {})} for n in range(300)])
    assert cli("run", "flow.yaml", "--executor", "dry-run", "--non-interactive", "-q")[0] == 9
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    code, out, _ = cli("status", run_id)
    assert code == 0 and _rows(out) == [f"s{n:03d}" for n in range(131, 171)]
    assert [line.split()[:3] for line in out.splitlines() if line.startswith("s150")] == [["s150", "blocked", "1"]]
    assert "(260 of 300 steps (150 completed, 1 blocked, 149 pending) not shown" in out
    code, out, _ = cli("show", run_id)
    kinds = [next(word for word in line.split()[2:] if word[0].isupper()) for line in out.splitlines()[2:]
             if line[:1].isdigit()]
    assert code == 0 and kinds[0] == "WorkflowStarted" and kinds[-1] == "WorkflowBlocked"
    assert "HumanGateRequired" in kinds


def test_all_goes_through_the_pager_on_a_terminal(project: Path, long_run: str) -> None:
    """`status --all` with stdout a terminal: every row, through $PAGER."""
    import pty

    leader, follower = pty.openpty()
    done = subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", "status", long_run, "--all"],
                          cwd=project, stdin=follower, stdout=follower, stderr=subprocess.PIPE, check=False,
                          env={**os.environ, "PAGER": "cat > paged.txt"})
    os.close(follower)
    os.close(leader)
    assert done.returncode == 0, done.stderr
    assert _rows((project / "paged.txt").read_text()) == [f"s{n:03d}" for n in range(300)]
