"""Commands that start, continue and inspect runs: run, resume, status, list, show, export."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stepline.interfaces.cli._driving import build_engine, finish, resume_run, use_backend
from stepline.interfaces.cli._options import (
    EXIT_DAMAGED,
    BackendOption,
    ConcurrencyOption,
    ConfigOption,
    Directory,
    ExecutorOption,
    JsonOutput,
    ProjectRoot,
    Quiet,
    RayAddressOption,
    ScriptOption,
    ShowAll,
    app,
    parse_vars,
    project_runs,
    where,
)
from stepline.interfaces.cli._render import (
    err_console,
    paged,
    print_contexts,
    print_diagnosis,
    print_errors,
    print_json,
    print_secrets,
    print_table,
)

if TYPE_CHECKING:
    from stepline.model import Run, RunMode
    from stepline.store import RunDir, RunStore


@app.command()
def run(
    path: Annotated[Path, typer.Argument(help="Workflow file or folder (native YAML/JSON, BMAD, CCW session).")],
    executor: ExecutorOption = None,
    script: ScriptOption = None,
    var: Annotated[list[str] | None, typer.Option("--var", help="Set a variable: NAME=VALUE (repeatable).")] = None,
    yolo: Annotated[bool, typer.Option("--yolo", help="No confirmations; the executor answers questions as "
                                                      "a simulated expert user.")] = False,
    non_interactive: Annotated[bool, typer.Option("--non-interactive", help="Never prompt: a step that needs "
                                                  "a person blocks the run.")] = False,
    workflow_mode: Annotated[str | None, typer.Option("--mode", help="Tri-modal workflows: create, edit or "
                                                      "validate.")] = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    record: Annotated[Path | None, typer.Option("--record", help="Also write every executor exchange to this "
                                                "cassette (replay it with --executor replay).")] = None,
    cassette: Annotated[Path | None, typer.Option("--cassette", help="The cassette the replay executor plays "
                                                  "back.")] = None,
    as_json: JsonOutput = False,
    quiet: Quiet = False,
    backend: BackendOption = None,
    ray_address: RayAddressOption = None,
    concurrency: ConcurrencyOption = None,
) -> None:
    """Run a workflow from its first step until it completes, fails or waits for a person."""
    from stepline.errors import UsageError
    from stepline.families import load_workflow, register_drivers

    if yolo and non_interactive:
        raise UsageError("--yolo and --non-interactive exclude each other")
    variables = parse_vars(var or [])
    mode: RunMode = "yolo" if yolo else "non-interactive" if non_interactive else "normal"
    at = where(directory, project_root)
    extra: dict[str, Any] = {}
    if record is not None:
        extra["record"] = str(at.option(record))
    if cassette is not None:
        if executor not in (None, "replay"):
            raise UsageError(f"--cassette goes with the replay executor, not {executor!r}")
        executor = "replay"
        extra["cassette"] = str(at.option(cassette))
    engine = build_engine(at, config, executor, script, mode, quiet or as_json, extra, drivers=False)
    use_backend(engine, backend, ray_address, concurrency, quiet=quiet or as_json)
    workflow = load_workflow(at.path(path).absolute(), project_root=at.root, variables=variables,
                             mode=workflow_mode)
    for problem in workflow.meta.get("structure_problems") or []:  # upstream markup the reader recovered
        print(f"{problem['path']}:{problem['line']}: warning: {problem['message']} (recovered: closed at its "
              "parent's end, as an HTML parser does)", file=sys.stderr)
    register_drivers(workflow.format)
    import asyncio  # here, not at the top: `stepline --help` imports every command module

    result = asyncio.run(engine.start(workflow, variables))
    finish(engine, result, as_json)


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue (a unique part of its id is enough).")],
    executor: ExecutorOption = None,
    script: ScriptOption = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    quiet: Quiet = False,
    backend: BackendOption = None,
    ray_address: RayAddressOption = None,
    concurrency: ConcurrencyOption = None,
) -> None:
    """Continue a run from its first unfinished step; completed steps never run again."""
    resume_run(where(directory, project_root), config, run_id, executor=executor, script=script, as_json=as_json,
               quiet=quiet, backend=backend, ray_address=ray_address, concurrency=concurrency)


def _omitted(shown: int, total: int, what: str, command: str) -> None:
    """Say how many rows a long run's table left out, and how to see them."""
    if shown < total:
        print(f"({total - shown} of {total} {what} not shown; every one: {command} --all)")


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument(help="The run (default: the latest).")] = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also check the run directory as `stepline "
                                          "doctor` does; a damaged one is explained (exit 6).")] = False,
    show_all: ShowAll = False,
) -> None:
    """Show a run's status and its steps (a long run: its failed, blocked and retried steps and the last ones);
    a failed step's whole error below the table."""
    from stepline.errors import JournalError
    from stepline.service import KEEP, make_digest, run_summary

    runs = project_runs(where(directory, project_root), config)
    if not (as_json or verbose):
        shown_id, view = runs.view(run_id, whole=show_all)
        if view["status"] == "running" and runs.store.summary(shown_id).live_pid is None:
            view = {**view, "status": "interrupted (resume it)"}  # as `list` says: no process drives it
        with paged(show_all):
            _print_status(shown_id, view)
        return
    run_dir = runs.open(run_id)
    try:
        found = runs.load(run_dir)
    except JournalError:
        if not verbose:
            raise
        damaged = runs.diagnose(run_dir)
        if as_json:
            print_json(damaged.to_dict())
        else:
            print_diagnosis(damaged)
        raise typer.Exit(EXIT_DAMAGED) from None
    diagnosis = runs.diagnose(run_dir) if verbose else None
    if as_json:
        from stepline.service import project_prices, run_cost, usage_summary

        summary = {**run_summary(found), "usage": usage_summary(run_cost(runs, run_dir).ledger, project_prices(runs))}
        if diagnosis is not None:
            summary["run_directory"] = diagnosis.to_dict()
        print_json(summary)
        return
    _print_status(found.run_id, make_digest(run_dir, found, run_dir.events(), keep=None if show_all else KEEP)["run"])
    if diagnosis is not None:
        print_diagnosis(diagnosis)


def _print_status(run_id: str, view: dict[str, Any]) -> None:
    print(f"{run_id}  {view['workflow']} ({view['format']})  status: {view['status']}")
    if view["blocked_reason"]:
        print(f"blocked: {view['blocked_reason']}")
    print_table(("step", "name", "status", "attempts", "error"),
                ([sid, name, state, str(attempts), error] for _, sid, name, state, attempts, error in view["steps"]),
                fit_last=True)
    counts = ", ".join(f"{n} {state}" for state, n in view["counts"].items())
    _omitted(len(view["steps"]), view["total"], f"steps ({counts})", f"stepline status {run_id}")
    print_errors(view["errors"])
    _omitted(len(view["errors"]), view["errors_total"], "errors", f"stepline status {run_id}")
    print_secrets(view["secrets"])


@app.command("list")
def list_runs(
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """List the runs of this project, oldest first; a damaged run is listed as such (each run directory is
    checked as `stepline doctor` checks it, once: a digest beside its journal keeps the result until the run's
    files change)."""
    from dataclasses import asdict

    runs = project_runs(where(directory, project_root), config)
    rows = runs.runs()
    if as_json:
        print_json([asdict(r) for r in rows])
        return
    if not rows:
        err_console.print(f"no runs under {runs.store.root}", markup=False)
        return
    shown = []
    for row in rows:
        state = row.status
        if row.damage is not None:
            state = f"{row.status} (see below)"
        elif row.status == "running" and row.live_pid is None:
            state = "interrupted (resume it)"
        elif row.live_pid is not None:
            state = f"{row.status} (pid {row.live_pid})"
        shown.append([row.run_id, row.workflow, state, f"{row.steps_done}/{row.steps_total}", row.updated_at[:19]])
    print_table(("run", "workflow", "status", "steps", "updated"), shown)
    for row in rows:
        if row.damage is not None:
            print(f"{row.run_id} {row.status}: {row.damage}"
                  + (f"; see `stepline doctor {row.run_id}`" if row.status == "damaged" else ""))


@app.command()
def history(
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """Same as ``list``: every run of this project, oldest first."""
    list_runs(directory=directory, project_root=project_root, config=config, as_json=as_json)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    prompt: Annotated[str | None, typer.Option(
        "--prompt", metavar="STEP",
        help="Print exactly what the step's model requests sent (system text, messages, tools).")] = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    show_all: ShowAll = False,
) -> None:
    """Show a run's timeline: its events, artifacts, gates and decisions in order (a long run: its failures,
    gates, checks and last events), and model usage; then each failed step's whole error and the files that
    hold secrets."""
    runs = project_runs(where(directory, project_root), config)
    if prompt is not None or as_json:
        from stepline.engine import build_timeline

        run_dir = runs.open(run_id)
        found = runs.load(run_dir)
        if prompt is not None:
            _print_prompts(run_dir, found, prompt, as_json)
        else:
            print_json(build_timeline(run_dir))
        return
    shown_id, view = runs.view(run_id, whole=show_all)
    with paged(show_all):
        _print_show(shown_id, view)
        print_lineage(runs.store, shown_id)


def print_lineage(store: RunStore, run_id: str) -> None:
    """What ``show`` prints of a run's parent and children (forks, and runs a workflow started)."""
    import orjson

    def manifest(rid: str) -> dict[str, Any]:
        try:
            found = orjson.loads((store.root / rid / "manifest.json").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return found if isinstance(found, dict) else {}

    def link(raw: dict[str, Any], rid: str) -> str:
        return f"{rid} at step {raw['forked_at']}" if raw.get("forked_at") else rid

    own = manifest(run_id)
    if own.get("parent_run_id"):
        print(f"{'forked from' if own.get('forked_at') else 'started by'} {link(own, str(own['parent_run_id']))}")
    children = [(rid, raw) for rid in store.run_ids() if rid != run_id
                for raw in [manifest(rid)] if raw.get("parent_run_id") == run_id]
    forks = [link(raw, rid) for rid, raw in children if raw.get("forked_at")]
    started = [rid for rid, raw in children if not raw.get("forked_at")]
    if forks:
        print("forks: " + ", ".join(forks))
    if started:
        print("child runs: " + ", ".join(started))


def _print_show(shown_id: str, view: dict[str, Any]) -> None:
    print(f"{shown_id}  {view['workflow']}  status: {view['status']}")
    # One line per event; the detail takes what the other columns leave of the terminal's width (COLUMNS, or
    # the terminal's). The whole of a failed step's error is printed below the table, never cut.
    print_table(("seq", "time", "step", "event", "detail"),
                ([str(seq), when[11:23], step, kind, detail] for seq, when, step, kind, detail in view["events"]),
                fit_last=True)
    _omitted(len(view["events"]), view["events_total"], "events", f"stepline show {shown_id}")
    if view["answers"]:
        print("answers given:")
        print_table(("step", "answer", "by", "gate"),
                    ([step, answer, by, gate] for step, gate, answer, by in view["answers"]))
    if view["usage"]:
        print_table(("step", "model calls", "input tokens", "output tokens", "cache read", "cache write",
                     "cost (USD)"),
                    [*([sid, *(f"{v:g}" for v in values)] for sid, *values in view["usage"]),
                     ["run", *(f"{v:g}" for v in view["usage_total"])]])
        _omitted(len(view["usage"]), view["usage_steps"], "steps' usage", f"stepline show {shown_id}")
    print_contexts(view["contexts"])
    _omitted(len(view["contexts"]), view["contexts_total"], "contexts", f"stepline show {shown_id}")
    print_errors(view["errors"])
    _omitted(len(view["errors"]), view["errors_total"], "errors", f"stepline show {shown_id}")
    print_secrets(view["secrets"])


def _print_prompts(run_dir: RunDir, run: Run, step_id: str, as_json: bool) -> None:
    """The model requests of ``step_id`` as they were sent (journaled with each call, secrets redacted)."""
    import json

    from stepline.errors import NotFoundError

    if step_id not in run.steps:
        raise NotFoundError(f"run {run.run_id} has no step {step_id!r}",
                            hint="see `stepline show " + run.run_id + "` for its steps")
    requests = [event.data["args"]["payload"] for event in run_dir.events()
                if event.type == "CallRecorded" and event.step_id == step_id
                and str(event.data.get("op", "")).startswith("memo:")
                and isinstance((event.data.get("args") or {}).get("payload"), dict)
                and "prompt" in event.data["args"]["payload"]]
    if as_json:
        print_json([request["prompt"] for request in requests])
        return
    if not requests:
        err_console.print(f"step {step_id} of run {run.run_id} sent no model request (or its executor is not an "
                          "LLM executor)", markup=False)
        return
    for number, request in enumerate(requests, start=1):
        sent = request["prompt"]
        print(f"=== request {number} (turn {request.get('turn')}, model {request.get('model')}, "
              f"sha256 {str(request.get('sha256'))[:12]}) ===")
        print(f"--- tools: {', '.join(sent['tools'])} (sha256 {sent['tools_sha256'][:12]})")
        print(f"--- system\n{sent['system']}")
        for message in sent["messages"]:
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=2)
            calls = message.get("tool_calls")
            print(f"--- {message.get('role')}\n{text or ''}" + (f"\n{json.dumps(calls, ensure_ascii=False)}"
                                                                  if calls else ""))


@app.command()
def export(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
) -> None:
    """Export a run as one JSON document: manifest, journal and every audit file."""
    import json
    from dataclasses import asdict

    from stepline.engine import build_timeline
    from stepline.store import RUN_FILES

    at = where(directory, project_root)
    runs = project_runs(at, config)
    run_dir = runs.open(run_id)
    found = runs.load(run_dir)
    document: dict[str, Any] = {"run": found.model_dump(mode="json"),
                                "events": [asdict(event) for event in run_dir.events()]}
    for name in RUN_FILES:
        if name not in ("manifest.json", "timeline.json"):
            document[name.removesuffix(".json")] = run_dir.read(name, None)
    document["timeline"] = build_timeline(run_dir)  # derived: rebuilt, never read from a maybe stale file
    text = json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n"
    if output is None:
        print(text, end="")
    else:
        _write_export(at.path(output), text)


def _write_export(output: Path, text: str) -> None:
    """Write ``export -o FILE``; a path that is a folder, or in none, is one line naming it (no traceback)."""
    from stepline.errors import NotFoundError, StorageError, UsageError

    if output.is_dir():
        raise UsageError(f"-o {output}: is a folder, not a file", hint=f"give a file name: -o {output / 'run.json'}")
    if not output.parent.is_dir():
        raise NotFoundError(f"-o {output}: no such folder {output.parent}",
                            hint="create it first, or write to an existing folder")
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StorageError.from_os(exc, output) from exc
    print(f"wrote {output}", file=sys.stderr)
