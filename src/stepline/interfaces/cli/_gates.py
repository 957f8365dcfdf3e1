"""Commands for the people a run waits for: gates, approve, reject, answer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from stepline.interfaces.cli._app import ConfigOption, Directory, JsonOutput, ProjectRoot, Where, app, where
from stepline.interfaces.cli._render import print_json


def decide_gate(project_root: Path, config: Path | None, run_id: str, gate_id: str | None, *, approved: bool,
                by: str, notes: str | None, answer: str | None = None) -> str:
    """Decide a gate of a blocked run; return the gate id (``project_root`` and ``config`` as the engine takes
    them: a relative one is taken from the current folder)."""
    from stepline.engine import Engine, load_runtime_config

    root = project_root.resolve()
    engine = Engine(project_root=root, config=load_runtime_config(root, config))
    return engine.decide_gate(run_id, gate_id, approved=approved, by=by, notes=notes, answer=answer)


def _resume_command(at: Where, config: Path | None, run_id: str) -> str:
    from stepline.interfaces.cli._runs import open_store, resume_command

    return resume_command(open_store(at, config).open(run_id))


@app.command()
def gates(
    run_id: Annotated[str | None, typer.Argument(help="The run (default: every run).")] = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """List the gates waiting for a person (approvals, high-risk tools, questions)."""
    from stepline.errors import JournalError
    from stepline.interfaces.cli._render import print_table
    from stepline.interfaces.cli._runs import open_store

    store = open_store(where(directory, project_root), config)
    run_dirs = [store.open(run_id)] if run_id else [store.open(s.run_id) for s in store.summaries()
                                                     if s.damage is None]
    rows = []
    for run_dir in run_dirs:
        try:
            found = run_dir.read("gates.json", []) or []
        except JournalError as exc:
            if run_id:
                raise
            print(f"warning: {exc.format_message()}", file=sys.stderr)
            continue
        for gate in found if isinstance(found, list) else ():
            if isinstance(gate, dict) and gate.get("status") == "pending":
                rows.append({"run_id": run_dir.run_id, **gate})
    if as_json:
        print_json(rows)
        return
    if not rows:
        print("no pending gates")
        return
    # Plain text, every id whole (a run id or gate id is what the user types next); the reason is cut to fit.
    print_table(("run", "gate", "kind", "step", "reason"),
                ([row["run_id"], str(row.get("gate_id")), str(row.get("kind")), str(row.get("step_id") or ""),
                  str(row.get("reason") or "")] for row in rows), fit_last=True)


By = Annotated[str, typer.Option("--by", help="Who decides (recorded in approvals.json).")]
Notes = Annotated[str | None, typer.Option("--notes", help="Why (recorded with the decision).")]
GateArg = Annotated[str | None, typer.Argument(help="The gate (default: the run's only pending gate).")]


@app.command()
def approve(run_id: Annotated[str, typer.Argument(help="The blocked run.")], gate: GateArg = None,
            by: By = "", notes: Notes = None, directory: Directory = None, project_root: ProjectRoot = None,
            config: ConfigOption = None) -> None:
    """Approve a pending gate; then `stepline resume RUN` continues the run."""
    at = where(directory, project_root)
    gate_id = decide_gate(at.root, at.option(config), run_id, gate, approved=True, by=by, notes=notes)
    print(f"approved {gate_id} by {by}; continue with: {_resume_command(at, config, run_id)}")


@app.command()
def reject(run_id: Annotated[str, typer.Argument(help="The blocked run.")], gate: GateArg = None,
           by: By = "", notes: Notes = None, directory: Directory = None, project_root: ProjectRoot = None,
           config: ConfigOption = None) -> None:
    """Reject a pending gate: the gated step fails (resume to record it)."""
    at = where(directory, project_root)
    gate_id = decide_gate(at.root, at.option(config), run_id, gate, approved=False, by=by, notes=notes)
    print(f"rejected {gate_id} by {by}; `{_resume_command(at, config, run_id)}` records the step as failed")


@app.command()
def answer(run_id: Annotated[str, typer.Argument(help="The blocked run.")],
           text: Annotated[str, typer.Argument(help="The answer to the pending question.")],
           gate: Annotated[str | None, typer.Option("--gate", help="The question's gate id, when several wait.")]
           = None,
           by: Annotated[str, typer.Option("--by", help="Who answers.")] = "cli",
           directory: Directory = None, project_root: ProjectRoot = None, config: ConfigOption = None) -> None:
    """Answer the question a blocked run is waiting on; then `stepline resume RUN` continues it."""
    at = where(directory, project_root)
    gate_id = decide_gate(at.root, at.option(config), run_id, gate, approved=True, by=by, notes=None,
                          answer=text)
    print(f"answered {gate_id}; continue with: {_resume_command(at, config, run_id)}")
