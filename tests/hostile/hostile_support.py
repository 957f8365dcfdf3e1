"""The CLI run in-process for the hostile-input tests: exit code and output, never a traceback."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from stepline.interfaces.cli._app import run_cli


@dataclass(frozen=True)
class Outcome:
    """What one CLI command did: its exit code, and what it printed."""

    code: int
    out: str
    err: str

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if "error: " in line]


def cli(*argv: str) -> Outcome:
    """Run the CLI in this process (stdin empty); a bug is re-raised by run_cli and fails the test."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_cli(list(argv))
    finally:
        sys.stdin = saved
    outcome = Outcome(code, out.getvalue(), err.getvalue())
    assert "Traceback" not in outcome.out + outcome.err, outcome
    return outcome


def refused(project: Path, workflow: Path, *needles: str) -> None:
    """``run`` of ``workflow`` ends in one error line and exit 4 before a run starts, and ``validate`` reports it
    (exit 10); both name every one of ``needles``."""
    run = cli("run", str(workflow), "--executor", "dry-run", "--yolo", "-q", "-C", str(project))
    assert run.code == 4 and len(run.errors) == 1, run
    check = cli("validate", str(workflow), "-C", str(project))
    assert check.code == 10, check
    for needle in needles:
        assert needle in run.err and needle in check.out, (run, check)
    runs = project / ".stepline" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
