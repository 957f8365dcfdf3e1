"""Time travel over recorded runs: ``stepline fork``, ``stepline replay`` and ``stepline diff``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stepline.interfaces.cli._driving import build_engine, finish
from stepline.interfaces.cli._options import (
    EXIT_DIFFERENT,
    ConfigOption,
    Directory,
    ExecutorOption,
    JsonOutput,
    ProjectRoot,
    Quiet,
    ScriptOption,
    app,
    parse_vars,
    project_runs,
    where,
)
from stepline.interfaces.cli._render import print_json, progress_listener, run_exit_code

if TYPE_CHECKING:
    from stepline.timetravel import Report

RunArgument = Annotated[str, typer.Argument(help="The recorded run (a unique part of its id is enough).")]


@app.command()
def fork(
    run_id: RunArgument,
    at_step: Annotated[str, typer.Option(
        "--at", metavar="STEP",
        help="The step to go back to: the fork starts as the run was when this step began, and runs it again.")],
    set_var: Annotated[list[str] | None, typer.Option(
        "--set", metavar="NAME=VALUE", help="Change a variable from that step on (repeatable).")] = None,
    answer: Annotated[list[str] | None, typer.Option(
        "--answer", metavar="TEXT", help="Answer the fork's next question with this, in order (repeatable); after "
                                         "them, the parent's answers to the same questions.")] = None,
    executor: ExecutorOption = None,
    script: ScriptOption = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    quiet: Quiet = False,
) -> None:
    """Start a new run from a recorded run's step: its journal up to that step, the project's files put back to
    that point, then the step and those after it run again (with changed variables or answers). The recorded
    run is not changed."""
    import asyncio

    from stepline.timetravel import Answers, prepare_fork, read_run

    at = where(directory, project_root)
    parent = read_run(project_runs(at, config).engine(), run_id)
    engine = build_engine(at, config, executor, script, parent.run.mode, quiet or as_json)
    child, restoration = prepare_fork(engine, parent, at_step, parse_vars(set_var or []))
    engine.human = Answers(engine.human, answer or [], parent.answers(parent.cut_before(at_step)), by="fork")
    if not as_json:
        print(f"fork {child.run_id} of {parent.run_id} at step {at_step}: the project's files as they were then "
              f"({len(restoration.restored)} restored, {len(restoration.removed)} removed, "
              f"{restoration.unchanged} already so)")
        for line in restoration.lines():
            print(line)
    finish(engine, asyncio.run(engine.resume(child.run_id)), as_json)


@app.command()
def replay(
    run_id: RunArgument,
    against: Annotated[Path, typer.Option(
        "--against", metavar="PATH",
        help="The workflow to run (a changed copy of the run's workflow, skill or session).")],
    executor: ExecutorOption = None,
    script: ScriptOption = None,
    strict: Annotated[bool, typer.Option("--strict", help="A model request the recorded run did not make stops "
                                                          "the replay (reported) instead of going to the model.")
                      ] = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    quiet: Quiet = False,
) -> None:
    """Run the workflow at --against with a recorded run's answers and model responses (a request whose text is
    unchanged is answered from the record), then report what changed: prompts, artifacts, tokens and cost.
    Exit 0: the artifacts are the same; 12: they differ."""
    import asyncio

    from stepline.executors import Usage, usage_row
    from stepline.families import load_workflow, register_drivers
    from stepline.timetravel import read_run, serving
    from stepline.timetravel import replay as run_replay

    at = where(directory, project_root)
    runs = project_runs(at, config)
    recorded = read_run(runs.engine(), run_id)
    options: dict[str, Any] = {}
    script_path = at.option(script)
    if script_path is not None:
        executor, options["script"] = executor or "scripted", str(script_path)
    workflow = load_workflow(at.path(against).absolute(), project_root=at.root,
                             variables=recorded.given_variables(), mode=recorded.workflow_mode())
    register_drivers()
    served = serving(runs.config, recorded, executor, options, strict=strict)
    engine = runs.engine(executor=served, mode=recorded.run.mode,
                         listeners=[progress_listener(quiet or as_json, live=False)])
    result = asyncio.run(run_replay(engine, recorded, workflow, served))
    report = result.report
    if as_json:
        print_json({"run": result.run.run_id, "status": result.run.status.value, "served": result.served,
                    "sent": [r.step_id for r in result.sent], "stopped_at": result.stopped_at, **report.to_dict()})
    else:
        spent = usage_row(sum((request.usage() for request in result.sent), Usage()))
        sent = (f" (steps {', '.join(dict.fromkeys(r.step_id for r in result.sent))}: {int(spent['input_tokens'])} "
                f"input and {int(spent['output_tokens'])} output tokens, {spent['cost_usd']:.6f} USD spent)"
                if result.sent else "")
        print(f"replay {result.run.run_id} of {recorded.run_id} ({result.run.status.value}): "
              f"{result.served} model requests answered from the record, {len(result.sent)} sent{sent}")
        rewound = result.rewound
        if rewound.restored or rewound.removed or rewound.left_alone:
            print(f"the project's files were first put back to before {recorded.run_id}:")
            for line in rewound.lines():
                print(line)
        if result.stopped_at:
            print(f"stopped at step {result.stopped_at}: its request changed (--strict)")
        _print(report)
    raise typer.Exit(_exit_code(report, run_exit_code(result.run)))


@app.command()
def diff(
    run_a: Annotated[str, typer.Argument(help="The first run (A).")],
    run_b: Annotated[str, typer.Argument(help="The second run (B).")],
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """Compare two runs of one workflow: steps, decisions and answers, model requests (a diff of the first
    changed prompt of each step), artifacts (unified diffs), tokens and cost. Exit 0: the artifacts are the
    same; 12: they differ."""
    from stepline.errors import UsageError
    from stepline.timetravel import compare, read_run

    engine = project_runs(where(directory, project_root), config).engine()
    first, second = read_run(engine, run_a), read_run(engine, run_b)
    if first.run.workflow.id != second.run.workflow.id:
        raise UsageError(f"run {first.run_id} is of workflow {first.run.workflow.id!r}, run {second.run_id} of "
                         f"{second.run.workflow.id!r}", hint="compare two runs of one workflow")
    report = compare(first, second)
    if as_json:
        print_json(report.to_dict())
    else:
        _print(report)
    raise typer.Exit(_exit_code(report, 0))


def _print(report: Report) -> None:
    print("\n".join(report.lines()))


def _exit_code(report: Report, run_code: int) -> int:
    """The run's own code when it did not complete; else 0 when the artifacts are the same, 12 when not."""
    if run_code:
        return run_code
    return 0 if report.artifacts_same else EXIT_DIFFERENT
