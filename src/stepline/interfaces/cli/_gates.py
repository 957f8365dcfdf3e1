"""Commands for the people a run waits for: gates, approve, reject, answer."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from stepline.interfaces.cli._driving import resume_run
from stepline.interfaces.cli._options import ConfigOption, Directory, JsonOutput, ProjectRoot, app, project_runs, where
from stepline.interfaces.cli._render import print_json, print_table


@app.command()
def gates(
    run_id: Annotated[str | None, typer.Argument(help="The run (default: every run).")] = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """List the gates waiting for a person (approvals, high-risk tools, questions)."""
    rows, skipped = project_runs(where(directory, project_root), config).pending_gates(run_id)
    for problem in skipped:
        print(f"warning: {problem}", file=sys.stderr)
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


By = Annotated[str | None, typer.Option("--by", help="Who decides, recorded in approvals.json (default: git's "
                                                     "user.name, else your login name).")]
Notes = Annotated[str | None, typer.Option("--notes", help="Why (recorded with the decision).")]
GateArg = Annotated[str | None, typer.Argument(help="The gate (default: the run's only pending gate).")]
Resume = Annotated[bool, typer.Option("--resume", help="Then continue the run at once (as `stepline resume RUN`).")]


@app.command()
def approve(run_id: Annotated[str, typer.Argument(help="The blocked run.")], gate: GateArg = None,
            by: By = None, notes: Notes = None, directory: Directory = None, project_root: ProjectRoot = None,
            config: ConfigOption = None) -> None:
    """Approve a pending gate; then `stepline resume RUN` continues the run."""
    runs = project_runs(where(directory, project_root), config)
    decided = runs.decide(run_id, gate, approved=True, by=by, notes=notes)
    print(f"approved {decided.gate.gate_id} by {decided.gate.approver}; continue with: "
          f"{runs.resume_command(runs.store.open(decided.run_id))}")


@app.command()
def reject(run_id: Annotated[str, typer.Argument(help="The blocked run.")], gate: GateArg = None,
           by: By = None, notes: Notes = None, directory: Directory = None, project_root: ProjectRoot = None,
           config: ConfigOption = None) -> None:
    """Reject a pending gate: the gated step fails (resume to record it)."""
    runs = project_runs(where(directory, project_root), config)
    decided = runs.decide(run_id, gate, approved=False, by=by, notes=notes)
    print(f"rejected {decided.gate.gate_id} by {decided.gate.approver}; "
          f"`{runs.resume_command(runs.store.open(decided.run_id))}` records the step as failed")


@app.command()
def answer(run_id: Annotated[str, typer.Argument(help="The blocked run.")],
           text: Annotated[str, typer.Argument(help="The answer to the pending question (for a menu: an option's "
                                                    "key or label; another is refused, naming them).")],
           gate: Annotated[str | None, typer.Option("--gate", help="The question's gate id, when several wait.")]
           = None,
           by: By = None, resume: Resume = False,
           directory: Directory = None, project_root: ProjectRoot = None, config: ConfigOption = None) -> None:
    """Answer the question a blocked run is waiting on; then `stepline resume RUN` continues it (or --resume)."""
    at = where(directory, project_root)
    runs = project_runs(at, config)
    answered = runs.answer(run_id, text, gate_id=gate, by=by)
    run_dir = runs.store.open(answered.run_id)
    said = f"answered {answered.gate.gate_id} with {answered.gate.answer}"
    if not resume:
        print(f"{said}; continue with: {runs.resume_command(run_dir)} (`stepline answer RUN ANSWER --resume` "
              "does both)")
        return
    print(said, file=sys.stderr)
    if runs.resume_command(run_dir) != f"stepline resume {answered.run_id}":  # a sprint story: its loop goes on
        print(f"continue with: {runs.resume_command(run_dir)}")
        return
    resume_run(at, config, answered.run_id)

