"""``stepline doctor [RUN]``: what is damaged in a run directory (or in every run's), and whether (and how) the
run can go on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from stepline.interfaces.cli._options import (
    EXIT_DAMAGED,
    ConfigOption,
    Directory,
    JsonOutput,
    ProjectRoot,
    app,
    project_runs,
    where,
)
from stepline.interfaces.cli._render import console, print_diagnosis, print_json, print_table

if TYPE_CHECKING:
    from stepline.service import RunService


@app.command()
def doctor(
    run_id: Annotated[str | None, typer.Argument(
        help="The run to check (a unique part of its id is enough); default: every run of the project.")] = None,
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
    last good record; without RUN, every run of the project, one line each. Exit 0 when all is whole, 6 when one
    is damaged."""
    from stepline.errors import UsageError

    runs = project_runs(where(directory, project_root), config)
    if run_id is None:
        if truncate:
            raise UsageError("--truncate-to-last-good repairs one run", hint="name it: stepline doctor RUN "
                                                                             "--truncate-to-last-good")
        _check_every_run(runs, as_json)
        return
    run_dir = runs.open(run_id)
    if not truncate:
        found = runs.diagnose(run_dir)
        if as_json:
            print_json(found.to_dict())
        else:
            print_diagnosis(found)
        raise typer.Exit(EXIT_DAMAGED if found.damaged else 0)
    backup, found = runs.engine().truncate_to_last_good(run_dir)
    if as_json:
        print_json({**found.to_dict(), "backup": str(backup)})
    else:
        from rich.text import Text

        console.print(Text(f"repaired: the journal and the manifest as they were are kept in {backup}"),
                      soft_wrap=True)
        print_diagnosis(found)
    raise typer.Exit(EXIT_DAMAGED if found.damaged else 0)


def _check_every_run(runs: RunService, as_json: bool) -> None:
    """Diagnose each run; one row a run (its verdict and first damage), then which one to look at."""
    found = {run_id: runs.diagnose(runs.store.open(run_id)) for run_id in runs.store.run_ids()}
    damaged = [run_id for run_id, diagnosis in found.items() if diagnosis.damaged]
    if as_json:
        print_json([{"run_id": run_id, **diagnosis.to_dict()} for run_id, diagnosis in found.items()])
    elif not found:
        print(f"no runs under {runs.store.root}")
    else:
        print_table(("run", "verdict", "first damage"),
                    ([run_id, "damaged" if diagnosis.damaged else "whole",
                      first.short() if (first := diagnosis.first()) is not None else ""]
                     for run_id, diagnosis in found.items()), fit_last=True)
        print(f"{len(found)} run(s) checked: {len(found) - len(damaged)} whole, {len(damaged)} damaged"
              + (f"; see `stepline doctor {damaged[0]}`" if damaged else ""))
    raise typer.Exit(EXIT_DAMAGED if damaged else 0)
