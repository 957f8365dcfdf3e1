"""``stepline doctor RUN``: what is damaged in a run directory, and whether (and how) the run can go on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stepline.interfaces.cli._app import ConfigOption, Directory, JsonOutput, ProjectRoot, Where, app, where
from stepline.interfaces.cli._render import console, print_json

if TYPE_CHECKING:
    from stepline.store import Diagnosis, RunDir

#: The exit code of a damaged run directory (errors.JournalError's).
EXIT_DAMAGED = 6


def open_run_dir(at: Where, config: Path | None, run_id: str | None) -> RunDir:
    """The run directory of ``run_id`` (the latest when None), without reading any of it."""
    from stepline.errors import NotFoundError
    from stepline.interfaces.cli._runs import open_store

    store = open_store(at, config)
    if run_id is None:
        latest = store.latest()
        if latest is None:
            raise NotFoundError(f"no runs under {store.root}", hint="start one with `stepline run PATH`")
        return latest
    return store.open(run_id)


def diagnose_run(at: Where, config: Path | None, run_dir: RunDir) -> Diagnosis:
    """The diagnosis of ``run_dir`` by the project's engine (its journal folded as a resume folds it)."""
    from stepline.engine import Engine, load_runtime_config

    return Engine(project_root=at.root, config=load_runtime_config(at.root, at.option(config))).diagnose(run_dir)


def print_diagnosis(found: Diagnosis) -> None:
    """The doctor's report, line by line (plain text: paths and messages are not rich markup)."""
    from rich.text import Text

    for line in found.report():
        style = "red" if line.startswith("verdict") and found.damaged else None
        console.print(Text(line, style=style or ""), soft_wrap=True)


@app.command()
def doctor(
    run_id: Annotated[str, typer.Argument(help="The run to check (a unique part of its id is enough).")],
    truncate: Annotated[bool, typer.Option(
        "--truncate-to-last-good",
        help="Repair a damaged journal: keep journal.jsonl and manifest.json as they are in a backup-<time>/ "
             "folder of the run, cut the journal after its last good record, and let `stepline resume` do "
             "again what the cut records did.")] = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """Check a run directory: what is damaged (file, line, what), and whether the run can be resumed up to its
    last good record. Exit 0 when it is whole, 6 when it is damaged."""
    at = where(directory, project_root)
    run_dir = open_run_dir(at, config, run_id)
    if not truncate:
        found = diagnose_run(at, config, run_dir)
        if as_json:
            print_json(found.to_dict())
        else:
            print_diagnosis(found)
        raise typer.Exit(EXIT_DAMAGED if found.damaged else 0)
    from stepline.engine import Engine, load_runtime_config

    engine = Engine(project_root=at.root, config=load_runtime_config(at.root, at.option(config)))
    backup, found = engine.truncate_to_last_good(run_dir)
    if as_json:
        print_json({**found.to_dict(), "backup": str(backup)})
    else:
        from rich.text import Text

        console.print(Text(f"repaired: the journal and the manifest as they were are kept in {backup}"),
                      soft_wrap=True)
        print_diagnosis(found)
    raise typer.Exit(EXIT_DAMAGED if found.damaged else 0)
