"""The CLI run in-process for the hostile-input tests: exit code and output, never a traceback."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

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
