"""The ``stepline`` entry point: the commands registered, every user error reported as one line, the one
``sys.exit``.

Exit codes: :data:`stepline.errors.EXIT_CODES` (the docs' exit-code reference is made from it).
"""

from __future__ import annotations

import gc
import sys

from stepline.interfaces.cli._options import app

__all__ = ["USAGE", "app", "main", "run_cli"]


#: What a bare ``stepline`` prints: the commands to start with, not the whole help.
USAGE = """usage: stepline COMMAND [OPTIONS] [ARGS]...
  stepline run PATH         run a workflow (native, BMAD, Agent Skill, CCW session)
  stepline status [RUN]     a run's status; `stepline list` lists every run
  stepline --help           every command; `stepline COMMAND --help` its options
  stepline --version        the version"""


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``stepline`` script: run the app, turn every user error into one line + exit code."""
    # The cyclic collector's young threshold (700 allocations) is tuned for programs that make garbage; a command
    # first loads tens of thousands of objects that live as long as the process (modules, pydantic's validators,
    # which are slow to walk), and at 700 it walks them ~100 times before a 1-step run ends (~20 ms). Collect
    # less often, as mypy does (bench/cli_scale.py --only cold-start). Here, not in run_cli: a process that goes
    # on (a test) keeps its collector as it was.
    if sys.implementation.name == "cpython":
        gc.set_threshold(200_000, 30, 30)
    code = run_cli(argv)
    # Only the exit is left: spare it the full collection over everything loaded (~20-50 ms after a run).
    gc.freeze()
    sys.exit(code)


def run_cli(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code instead of exiting (tests call this)."""
    if not (sys.argv[1:] if argv is None else argv):
        print(USAGE, file=sys.stderr)
        return 2
    from stepline.interfaces.cli import _commands  # noqa: F401 - registers the commands

    try:
        result = app(args=argv, standalone_mode=False, prog_name="stepline")
    except KeyboardInterrupt:
        print("interrupted; the run can be resumed with `stepline resume RUN`", file=sys.stderr)
        return 130
    except Exception as exc:
        return _report(exc)
    return int(result or 0)


def _report(exc: Exception) -> int:
    """Print a user error as one line and return its exit code; re-raise bugs (they deserve a traceback)."""
    from stepline.errors import SteplineError

    if isinstance(exc, SteplineError):
        print(f"error: {exc.format_message()}", file=sys.stderr)
        return type(exc).exit_code
    # typer vendors click in recent releases, so match its exceptions by name rather than by class.
    if type(exc).__module__.startswith(("click", "typer")):
        kind = type(exc).__name__
        if kind == "Exit":
            return int(getattr(exc, "exit_code", 0) or 0)
        if kind == "Abort":
            print("Aborted!", file=sys.stderr)
            return 130
        if kind == "NoArgsIsHelpError":  # a bare command group (`stepline ccw`): its help, no "error: Usage:"
            print(exc.format_message() if hasattr(exc, "format_message") else exc, file=sys.stderr)
            return 2
        format_message = getattr(exc, "format_message", None)
        message = format_message() if callable(format_message) else str(exc)
        print(f"error: {message} (see `stepline --help`)", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2) or 2)
    raise exc
