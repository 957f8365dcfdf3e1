"""The Python API: load a workflow, run it, resume it — the same operations the CLI performs.

Importing it registers every family's step drivers, so an :class:`Engine` taken from here (or from
``stepline.Engine``) can drive a workflow of any family.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from stepline.engine import Engine, RuntimeConfig
from stepline.executors import Executor
from stepline.families import load_workflow, register_drivers
from stepline.model import Run, RunMode
from stepline.service import RunService

__all__ = ["Engine", "resume_run", "run_workflow"]

register_drivers()


def _engine(project_root: Path | str | None, config: RuntimeConfig | Path | str | None,
            executor: Executor | str | None, executor_options: dict[str, Any] | None, mode: RunMode,
            engine_options: dict[str, Any]) -> Engine:
    runs = RunService(Path(project_root or "."),
                      config if isinstance(config, RuntimeConfig) else Path(config) if config else None)
    return runs.engine(executor=executor, executor_options=executor_options, mode=mode, **engine_options)


def run_workflow(path: Path | str, *, project_root: Path | str | None = None,
                 variables: dict[str, Any] | None = None, executor: Executor | str = "dry-run",
                 executor_options: dict[str, Any] | None = None, mode: RunMode = "normal",
                 config: RuntimeConfig | Path | str | None = None, **engine_options: Any) -> Run:
    """Load the workflow at ``path`` and run it until it completes, fails or blocks; return the run."""
    engine = _engine(project_root, config, executor, executor_options, mode, engine_options)
    workflow = load_workflow(path, project_root=engine.project_root, variables=variables)
    return asyncio.run(engine.start(workflow, variables))


def resume_run(run_id: str, *, project_root: Path | str | None = None, executor: Executor | str | None = None,
               executor_options: dict[str, Any] | None = None,
               config: RuntimeConfig | Path | str | None = None, **engine_options: Any) -> Run:
    """Continue run ``run_id`` from its first unfinished step; completed steps never run again.

    The run keeps the executor (and options) it was started with unless ``executor`` names another.
    """
    engine = _engine(project_root, config, executor, executor_options, "normal", engine_options)
    return asyncio.run(engine.resume(run_id))
