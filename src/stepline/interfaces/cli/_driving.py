"""How a command drives a run: its engine with the progress display, the backend options, how it ended."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from stepline.interfaces.cli._options import Where, check_backend_name, project_runs
from stepline.interfaces.cli._render import (
    err_console,
    print_json,
    print_secrets_in_artifacts,
    progress_listener,
    run_exit_code,
)

if TYPE_CHECKING:
    from stepline.engine import Engine
    from stepline.model import Run, RunMode

__all__ = ["build_engine", "finish", "nobody_asked", "resume_run", "use_backend"]


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


def build_engine(at: Where, config: Path | None, executor: str | None, script: Path | None,
                 mode: RunMode, quiet: bool, extra_options: dict[str, Any] | None = None, *,
                 drivers: bool = True) -> Engine:
    """The engine for a CLI command, with the progress display attached (``config`` and ``script`` as given
    on the command line). ``drivers=False`` leaves the families' step drivers to the caller (``run`` registers
    those of the workflow it read: a native run loads no other family)."""
    from stepline.errors import NotFoundError, UsageError
    from stepline.families import register_drivers

    runs = project_runs(at, config)
    runtime = runs.config
    script = at.option(script)
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
    return runs.engine(executor=executor, executor_options=options, mode=mode,
                       listeners=[progress_listener(quiet, live=nobody_asked(mode, executor))])


def nobody_asked(mode: RunMode, executor: str | None) -> bool:
    """Whether no person is asked anything on this terminal during the run: its input is no terminal, or the run
    never asks (yolo, non-interactive) and its executor is not a person at the keyboard."""
    return not sys.stdin.isatty() or (mode != "normal" and executor != "human")


def finish(engine: Engine, run: Run, as_json: bool) -> None:
    """Say how a run this command drove ended (``--json``: its summary), keep its digest, exit with its code."""
    from stepline.service import record_digest, run_summary

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
            lines += [f"  {run.blocked_reason}", *_what_next(engine, run)]
        print("\n".join(lines))
        print_secrets_in_artifacts(run)
    raise typer.Exit(run_exit_code(run))


def resume_run(at: Where, config: Path | None, run_id: str, *, executor: str | None = None,
               script: Path | None = None, as_json: bool = False, quiet: bool = False, backend: str | None = None,
               ray_address: str | None = None, concurrency: int | None = None) -> None:
    """Continue run ``run_id`` from its first unfinished step, then :func:`finish`. Without an executor named,
    the run's own; a run only another interface can drive (an IDE agent over MCP) goes to the person here."""
    if executor is None and script is None:
        runs = project_runs(at, config)
        executor, why = runs.resume_executor(runs.store.open(run_id))
        if why and not quiet:
            print(why, file=sys.stderr)
    engine = build_engine(at, config, executor, script, "normal", quiet or as_json)
    use_backend(engine, backend, ray_address, concurrency, quiet=quiet or as_json)
    import asyncio

    finish(engine, asyncio.run(engine.resume(run_id)), as_json)


def _what_next(engine: Engine, run: Run) -> list[str]:
    """How a person goes on with a blocked run: the answer command for the question it waits on (its options),
    else the gates to decide."""
    from stepline.executors import options_named
    from stepline.service import RunService

    questions = RunService(engine.project_root, engine.config).questions(run.run_id)
    if len(questions) != 1:
        return [f"  see `stepline gates {run.run_id}`; approve/answer, then `stepline resume {run.run_id}`"]
    choices = questions[0].choices
    if not choices:
        return [f"  answer it: stepline answer {run.run_id} \"YOUR ANSWER\" --resume"]
    return [f"  answer it: stepline answer {run.run_id} {choices[0].key} --resume   (one of: "
            f"{options_named(choices)})"]
