"""What every command shares: the ``stepline`` application object, the options, the exit codes, where a
command's paths lead."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from stepline.service import RunService

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


#: A damaged run directory (errors.JournalError's code).
EXIT_DAMAGED = 6
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


ExecutorOption = Annotated[str | None, typer.Option("--executor", "-e",
                                                    help="Who does the steps: dry-run, scripted, openai, "
                                                         "anthropic, cli-agent, human, replay, or a plugin.")]
ScriptOption = Annotated[Path | None, typer.Option("--script", help="Script of protocol calls for the "
                                                   "scripted executor (implies --executor scripted).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")]
ShowAll = Annotated[bool, typer.Option("--all", help="Every row, read from the journal (a long run shows its "
                                       "failures, gates and last rows), through the pager on a terminal.")]
BackendOption = Annotated[str | None, typer.Option("--backend", help="Where executor work runs: local (this "
                                                   "process) or ray (a Ray cluster). Default: runtime.backend.")]
RayAddressOption = Annotated[str | None, typer.Option("--ray-address", help="The Ray cluster to join (what `ray "
                                                      "start --head` printed); default: RAY_ADDRESS, else a "
                                                      "local Ray.")]


ConcurrencyOption = Annotated[int | None, typer.Option("--concurrency", "-j", min=1, help="Steps (tasks) run at "
                                                       "once. Default: runtime.concurrency (4); with --backend "
                                                       "ray, the cluster's CPUs.")]


def check_backend_name(backend: str | None) -> None:
    """Refuse a ``--backend`` that is neither ``local`` nor ``ray`` (a UsageError)."""
    from stepline.errors import UsageError

    if backend not in (None, "local", "ray"):
        raise UsageError(f"unknown backend {backend!r}", hint="use --backend local or --backend ray")


def parse_vars(pairs: list[str]) -> dict[str, str]:
    """Turn ``--var name=value`` pairs into a mapping; a malformed pair is a UsageError naming it."""
    from stepline.errors import UsageError

    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not name.strip().replace("_", "").replace("-", "").isalnum():
            raise UsageError(f"--var expects NAME=VALUE, got {pair!r}", hint="for example --var user_name=Ada")
        values[name.strip()] = value
    return values


def project_runs(at: Where, config: Path | None) -> RunService:
    """The project's runs (``config`` as given on the command line): what every command reads and decides
    through."""
    from stepline.service import RunService

    return RunService(at.root, at.option(config))
