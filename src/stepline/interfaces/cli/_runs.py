"""Commands that start, continue and inspect runs: run, resume, status, list, show, export."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stepline.interfaces.cli._app import ConfigOption, Directory, JsonOutput, ProjectRoot, Where, app, where
from stepline.interfaces.cli._render import (
    err_console,
    paged,
    print_contexts,
    print_errors,
    print_json,
    print_secrets,
    print_secrets_in_artifacts,
    print_table,
    progress_listener,
    run_exit_code,
    run_summary,
)

if TYPE_CHECKING:
    from stepline.engine import Engine
    from stepline.model import Run, RunMode
    from stepline.store import RunDir, RunStore

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


def use_backend(engine: Engine, backend: str | None, ray_address: str | None, concurrency: int | None = None,
                *, quiet: bool = False) -> None:
    """Apply ``--backend``/``--ray-address``/``--concurrency`` to the engine's runtime config (they override
    runtime.yaml). On Ray with no concurrency given (option or runtime.concurrency), the cluster is joined now
    and its capacity chosen (see :class:`stepline.distributed.ClusterCapacity`), said in one line."""
    from stepline.errors import UsageError

    runtime = engine.config.runtime
    if concurrency is not None:
        engine.concurrency = runtime.concurrency = concurrency
    if backend is not None:
        check_backend_name(backend)
        runtime.backend = backend  # type: ignore[assignment]  # checked just above
    if ray_address is not None:
        if runtime.backend != "ray":
            raise UsageError("--ray-address goes with --backend ray")
        runtime.ray_address = ray_address
    if runtime.backend == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise UsageError("--backend ray needs Ray, which is not installed",
                             hint="install it with `pip install 'stepline[ray]'`, or run with --backend local")
        from stepline.distributed import check_reachable

        check_reachable(runtime.ray_address)  # before a run is created: Ray would retry an address for minutes
        if engine.executor_explicit:
            _ = engine.executor  # built now (Ray is not joined yet): one that cannot run on a worker is refused here
        if concurrency is None and "concurrency" not in runtime.model_fields_set:
            from stepline.distributed import join_cluster

            capacity = join_cluster(runtime.ray_address)
            engine.concurrency = runtime.concurrency = capacity.concurrency
            if not quiet:
                err_console.print(capacity.describe(), markup=False, highlight=False)


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


def build_engine(at: Where, config: Path | None, executor: str | None, script: Path | None,
                 mode: RunMode, quiet: bool, extra_options: dict[str, Any] | None = None, *,
                 drivers: bool = True) -> Engine:
    """The engine for a CLI command, with the progress display attached (``config`` and ``script`` as given
    on the command line). ``drivers=False`` leaves the families' step drivers to the caller (``run`` registers
    those of the workflow it read: a native run loads no other family)."""
    from stepline.engine import Engine, load_runtime_config
    from stepline.errors import NotFoundError, UsageError
    from stepline.families import register_drivers

    root = at.root
    config = at.option(config)
    script = at.option(script)
    runtime = load_runtime_config(root, config)
    options: dict[str, Any] = dict(extra_options or {})
    if script is not None:
        if executor not in (None, "scripted"):
            raise UsageError(f"--script goes with the scripted executor, not {executor!r}")
        if not script.is_file():
            raise NotFoundError(f"{script}: no such script file", hint="pass an existing --script FILE")
        executor = "scripted"
        options["script"] = str(script)
    if executor is not None:
        from stepline.executors import create_executor

        checked = {k: v for k, v in options.items() if k != "record"}
        create_executor(executor, {**runtime.executors.get(executor, {}), **checked})  # fail fast on a bad name
    if drivers:
        register_drivers()
    return Engine(project_root=root, config=runtime, executor=executor, executor_options=options, mode=mode,
                  listeners=[progress_listener(quiet, live=nobody_asked(mode, executor))])


def nobody_asked(mode: RunMode, executor: str | None) -> bool:
    """Whether no person is asked anything on this terminal during the run: its input is no terminal, or the run
    never asks (yolo, non-interactive) and its executor is not a person at the keyboard."""
    return not sys.stdin.isatty() or (mode != "normal" and executor != "human")


def _finish(engine: Engine, run: Run, as_json: bool) -> None:
    from stepline.interfaces.cli._digest import record_digest

    run_dir = engine.store.open(run.run_id)
    record_digest(run_dir, run, run_dir.events())
    if as_json:
        print_json(run_summary(run))
    else:  # plain print, not rich: its import is a sixth of a short run's cost, and user data is no markup
        done = sum(1 for s in run.steps.values() if s.status.value in ("completed", "skipped"))
        lines = [f"run {run.run_id} {run.status.value}: {done}/{len(run.steps)} steps"]
        if run.status.value == "failed":
            lines += [f"  {run.error}", f"  fix the cause, then: stepline resume {run.run_id}"]
        elif run.status.value == "blocked":
            lines += [f"  {run.blocked_reason}",
                      f"  see `stepline gates {run.run_id}`; approve/answer, then `stepline resume {run.run_id}`"]
        print("\n".join(lines))
        print_secrets_in_artifacts(run)
    raise typer.Exit(run_exit_code(run))


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
    register_drivers(workflow.format)
    import asyncio  # here, not at the top: `stepline --help` imports every command module

    result = asyncio.run(engine.start(workflow, variables))
    _finish(engine, result, as_json)


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
    engine = build_engine(where(directory, project_root), config, executor, script, "normal", quiet or as_json)
    use_backend(engine, backend, ray_address, concurrency, quiet=quiet or as_json)
    import asyncio

    result = asyncio.run(engine.resume(run_id))
    _finish(engine, result, as_json)


def open_store(at: Where, config: Path | None) -> RunStore:
    """The runs of the project (under its configured storage root); ``config`` as given on the command line."""
    from stepline.engine import load_runtime_config
    from stepline.store import RunStore

    return RunStore(at.root / load_runtime_config(at.root, at.option(config)).runtime.storage_root)


def reader_engine(at: Where, config: Path | None) -> Engine:
    """An engine that reads the project's runs (loads, checks them); it drives none, so no family is loaded."""
    from stepline.engine import Engine, load_runtime_config

    return Engine(project_root=at.root, config=load_runtime_config(at.root, at.option(config)))


def find_run(engine: Engine, run_id: str | None) -> RunDir:
    """The directory of the run ``run_id`` names (a unique part of its id), or of the latest run."""
    from stepline.errors import NotFoundError

    if run_id is not None:
        return engine.store.open(run_id)
    latest = engine.store.latest()
    if latest is None:
        raise NotFoundError(f"no runs under {engine.store.root}", hint="start one with `stepline run PATH`")
    return latest


def load_run(at: Where, config: Path | None, run_id: str | None) -> Run:
    """The run with ``run_id`` (or the latest), rebuilt from its journal."""
    engine = reader_engine(at, config)
    return engine.load(find_run(engine, run_id))


def _view(at: Where, config: Path | None, run_id: str | None, *, whole: bool) -> tuple[str, dict[str, Any]]:
    """The run's id and what status and show print of it: from its digest, or with ``whole`` every step and
    event from its journal. A damaged run raises what its journal says (as loading it does)."""
    from stepline.interfaces.cli._digest import KEEP, digest_of, make_digest

    engine = reader_engine(at, config)
    run_dir = find_run(engine, run_id)
    if not whole:
        shown = digest_of(engine, run_dir).get("run")
        if shown is not None:
            return run_dir.run_id, shown
    run = engine.load(run_dir)
    return run_dir.run_id, make_digest(run_dir, run, run_dir.events(), keep=None if whole else KEEP)["run"]


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

    at = where(directory, project_root)
    if not (as_json or verbose):
        shown_id, view = _view(at, config, run_id, whole=show_all)
        if view["status"] == "running" and reader_engine(at, config).store.summary(shown_id).live_pid is None:
            view = {**view, "status": "interrupted (resume it)"}  # as `list` says: no process drives it
        with paged(show_all):
            _print_status(shown_id, view)
        return
    try:
        found = load_run(at, config, run_id)
    except JournalError:
        if not verbose:
            raise
        from stepline.interfaces.cli._doctor import EXIT_DAMAGED, diagnose_run, open_run_dir, print_diagnosis

        damaged = diagnose_run(at, config, open_run_dir(at, config, run_id))
        if as_json:
            print_json(damaged.to_dict())
        else:
            print_diagnosis(damaged)
        raise typer.Exit(EXIT_DAMAGED) from None
    from stepline.interfaces.cli._digest import KEEP, make_digest
    from stepline.interfaces.cli._doctor import diagnose_run, print_diagnosis

    run_dir = _run_dir(at, config, found.run_id)
    diagnosis = diagnose_run(at, config, run_dir) if verbose else None
    if as_json:
        summary = run_summary(found)
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

    from stepline.interfaces.cli._digest import summary_row

    engine = reader_engine(where(directory, project_root), config)
    store = engine.store
    rows = [summary_row(store, engine, run_id) for run_id in store.run_ids()]
    if as_json:
        print_json([asdict(r) for r in rows])
        return
    if not rows:
        err_console.print(f"no runs under {store.root}", markup=False)
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
    at = where(directory, project_root)
    if prompt is not None or as_json:
        from stepline.engine import build_timeline

        found = load_run(at, config, run_id)
        if prompt is not None:
            _print_prompts(_run_dir(at, config, found.run_id), found, prompt, as_json)
        else:
            print_json(build_timeline(_run_dir(at, config, found.run_id)))
        return
    shown_id, view = _view(at, config, run_id, whole=show_all)
    with paged(show_all):
        _print_show(shown_id, view)
        from stepline.interfaces.cli._history import print_lineage

        print_lineage(open_store(at, config), shown_id)


def _print_show(shown_id: str, view: dict[str, Any]) -> None:
    print(f"{shown_id}  {view['workflow']}  status: {view['status']}")
    # One line per event; the detail takes what the other columns leave of the terminal's width (COLUMNS, or
    # the terminal's). The whole of a failed step's error is printed below the table, never cut.
    print_table(("seq", "time", "step", "event", "detail"),
                ([str(seq), when[11:23], step, kind, detail] for seq, when, step, kind, detail in view["events"]),
                fit_last=True)
    _omitted(len(view["events"]), view["events_total"], "events", f"stepline show {shown_id}")
    if view["usage"]:
        print_table(("step", "model calls", "input tokens", "cached (read)", "cached (written)", "output tokens",
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


def _run_dir(at: Where, config: Path | None, run_id: str) -> RunDir:
    return open_store(at, config).open(run_id)


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
    found = load_run(at, config, run_id)
    run_dir = _run_dir(at, config, found.run_id)
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


def resume_command(run_dir: RunDir) -> str:
    """The command that goes on with a run: a sprint story's run goes on with its loop (the stories after it too)."""
    return "stepline sprint resume" if run_dir.manifest().workflow.format == "sprint" else \
        f"stepline resume {run_dir.run_id}"


# -- stepline logs ---------------------------------------------------------------------------------------------
def _log_line(event: Any) -> str | None:
    """One line of ``stepline logs`` for a journal record (None: nothing to say)."""
    data: dict[str, Any] = event.data
    step = event.step_id or "-"
    when = str(event.time)[11:19]
    if event.type == "CallRecorded":
        op, result = str(data.get("op", "")), data.get("result")
        if op.startswith("memo:") and isinstance(result, dict):  # an agent's (or model's) call ended
            text = " ".join(str(result.get("text") or "").split())[:300]
            usage = result.get("usage") or {}
            stopped = f"  STOPPED: {result['stopped']}" if result.get("stopped") else ""
            return (f"{when} {step:<14} {op[5:]}: {text or '(no text)'}  "
                    f"[{usage.get('input_tokens', 0):.0f} in / {usage.get('output_tokens', 0):.0f} out]{stopped}")
        if op.startswith("sprint:check/") and isinstance(result, dict):
            mark = "ok" if result.get("ok") else "FAILED"
            output = str(result.get("output") or "").strip()
            tail = ("\n    " + "\n    ".join(output.splitlines()[-15:])) if output and not result.get("ok") else ""
            return f"{when} {step:<14} check {op[13:]}: {mark} {result.get('detail', '')}{tail}"
        if op.startswith("sprint:") and isinstance(result, dict):
            return f"{when} {step:<14} {op[7:]}: {', '.join(f'{k}={v}' for k, v in result.items())[:300]}"
        return None
    if event.type in ("CallStarted", "CursorMoved", "VariableSet"):
        return None
    detail = " ".join(str(data.get("error") or data.get("reason") or data.get("summary") or data.get("gate_id")
                          or "").split())
    return f"{when} {step:<14} {event.type}{': ' + detail[:400] if detail else ''}"


class _AgentLogs:
    """What running agents printed (the run's ``logs/<step>.log`` files), read on from where it stopped last."""

    def __init__(self, folder: Path, *, raw: bool) -> None:
        self.folder = folder
        self.raw = raw
        self.read_to: dict[Path, int] = {}

    def new_lines(self) -> list[tuple[str, str]]:
        """(time, line to print) for each complete line appended since the last call."""
        found: list[tuple[str, str]] = []
        for path in sorted(self.folder.glob("*.log")) if self.folder.is_dir() else []:
            with path.open("rb") as handle:
                handle.seek(self.read_to.get(path, 0))
                data = handle.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
            self.read_to[path] = self.read_to.get(path, 0) + len(complete)
            for raw in complete.decode("utf-8", "replace").splitlines():
                stamp, _, rest = raw.partition(" ")  # "<time> <agent>#<call> <out|err|--->| <line>"
                head, _, text = rest.partition("| ")
                if not self.raw and head.endswith(" out"):
                    from stepline.executors.cli_agents import describe_output

                    text = describe_output(text)
                text = text if len(text) <= 400 else text[:400] + "…"
                found.append((stamp, f"{stamp[11:19]} {path.stem:<14} {head}| {text}"))
        return found


RawOption = Annotated[bool, typer.Option("--raw", help="An agent's lines as it printed them (its stream-JSON "
                                        "events unabridged), not said short.")]


@app.command("logs")
def logs(
    run_id: Annotated[str, typer.Argument(help="The run (a sprint story's run id, as `sprint status` shows).")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as the run goes on, until it "
                                         "ends (Ctrl-C to stop watching; the run goes on).")] = False,
    raw: RawOption = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
) -> None:
    """A run's timeline as it happens: stages and steps, checks with their output, gates, each agent call's
    text and tokens when it ends, and the lines a running CLI agent prints (stdout `out|`, its stream-JSON events
    said short unless --raw; stderr `err|`) as it prints them. With -f, follow a run another process drives until
    it ends."""
    import time as clock

    from stepline.errors import RunStateError
    from stepline.store import read_journal

    at = where(directory, project_root)
    run_dir = open_store(at, config).open(run_id)
    agents = _AgentLogs(run_dir.path / "logs", raw=raw)
    seen = 0
    undriven = 0  # polls in a row that found the run unfinished and no process driving it
    while True:
        events = read_journal(run_dir.journal_path, run_dir.run_id)
        lines = [(str(event.time), line) for event in events[seen:] if (line := _log_line(event)) is not None]
        for _, line in sorted(lines + agents.new_lines(), key=lambda item: item[0]):
            print(line, flush=True)
        seen = len(events)
        ended = bool(events) and events[-1].type in ("WorkflowCompleted", "WorkflowFailed", "WorkflowBlocked")
        driven = run_dir.holder() is not None
        if not follow or (ended and not driven):
            return
        undriven = 0 if ended or driven else undriven + 1
        if undriven == 2:  # twice, 0.3 s apart: not a resume between releasing the lock and taking it
            raise RunStateError(f"run {run_dir.run_id} is not running: it did not finish and no process drives it "
                                "(killed?)", hint=f"`{resume_command(run_dir)}` goes on where it stopped")
        clock.sleep(0.3)
