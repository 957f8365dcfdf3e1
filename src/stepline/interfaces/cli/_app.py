"""The ``stepline`` application object, shared options, error reporting and the one ``sys.exit``.

Exit codes: :data:`stepline.errors.EXIT_CODES` (the docs' exit-code reference is made from it).
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="stepline",
    help="Run BMAD and Claude-Code-Workflow agent workflows deterministically, durably and auditably.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: typer's rich help formatter alone costs ~0.1 s of imports, and `--help` must stay under 0.3 s.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

def _print_version(value: bool) -> None:
    if value:
        from stepline import __version__

        print(f"stepline {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print stepline's version and exit.")] = False,
) -> None:
    """Run BMAD and Claude-Code-Workflow agent workflows deterministically, durably and auditably."""


#: What a bare ``stepline`` prints: the commands to start with, not the whole help.
USAGE = """usage: stepline COMMAND [OPTIONS] [ARGS]...
  stepline run PATH         run a workflow (native, BMAD, Agent Skill, CCW session)
  stepline status [RUN]     a run's status; `stepline list` lists every run
  stepline --help           every command; `stepline COMMAND --help` its options
  stepline --version        the version"""

EXIT_FAILED = 8
EXIT_BLOCKED = 9
EXIT_INVALID = 10
EXIT_DIFFERENT = 12

ProjectRoot = Annotated[Path | None, typer.Option(
    "--project-root", file_okay=False, metavar="DIR",
    help="The project folder (default: the -C folder, else the current one). Like every path on the command "
         "line, a relative one is taken from the current folder (or from -C DIR).")]
Directory = Annotated[Path | None, typer.Option(
    "-C", "--directory", file_okay=False, metavar="DIR",
    help="Work as if started in DIR (as `git -C` and `make -C`): it is the project folder unless "
         "--project-root says otherwise, and every relative path on the command line is taken from it.")]
JsonOutput = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
ConfigOption = Annotated[Path | None, typer.Option("--config", help="Runtime config file (default: "
                                                   "config/runtime.yaml in the project root).")]


@dataclass(frozen=True)
class Where:
    """Where a command's paths lead: ``base`` is what a relative path on the command line is taken from (the
    current folder, or ``-C DIR``), ``root`` the project folder (absolute)."""

    base: Path
    root: Path

    def path(self, value: Path) -> Path:
        """A path from the command line: absolute as given, else taken from :attr:`base` (kept relative when
        there is no ``-C``, so messages show it as typed)."""
        return value if value.is_absolute() else self.base / value

    def option(self, value: Path | None) -> Path | None:
        """:meth:`path` of an optional path, made absolute (the engine may record it)."""
        return None if value is None else self.path(value).absolute()


def where(directory: Path | None, project_root: Path | None) -> Where:
    """Resolve ``-C DIR`` and ``--project-root`` (both must be existing folders) into a :class:`Where`."""
    from stepline.errors import NotFoundError

    base = Path() if directory is None else directory
    if not base.is_dir():
        raise NotFoundError(f"{directory}: no such folder", hint="pass an existing -C DIR")
    root = base if project_root is None else Where(base, base).path(project_root)
    if not root.is_dir():
        raise NotFoundError(f"{root}: no such project folder", hint="pass an existing --project-root")
    return Where(base=base, root=root.resolve())


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
