"""stepline: run BMAD and Claude-Code-Workflow agent workflows deterministically, durably and auditably.

The public surface is small: :func:`load_workflow` reads any supported format into a :class:`WorkflowSpec`,
:func:`run_workflow` and :func:`resume_run` drive runs, :class:`Engine` gives full control, and executors are
registered by name. Everything else lives in the subpackages (``stepline.model``, ``stepline.engine``, …).

Names are imported on first use (PEP 562) so that ``stepline --help`` does not pay for pydantic and friends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "Engine": "stepline._api",
    "Executor": "stepline.executors",
    "Run": "stepline.model",
    "RunStep": "stepline.model",
    "RuntimeConfig": "stepline.engine",
    "StepRequest": "stepline.executors",
    "StepSession": "stepline.executors",
    "StepSpec": "stepline.model",
    "SteplineError": "stepline.errors",
    "WorkflowSpec": "stepline.model",
    "load_workflow": "stepline.families",
    "register_executor": "stepline.executors",
    "resume_run": "stepline._api",
    "run_workflow": "stepline._api",
}

__all__ = [
    "Engine",
    "Executor",
    "Run",
    "RunStep",
    "RuntimeConfig",
    "StepRequest",
    "StepSession",
    "StepSpec",
    "SteplineError",
    "WorkflowSpec",
    "load_workflow",
    "register_executor",
    "resume_run",
    "run_workflow",
]

if TYPE_CHECKING:
    from stepline._api import Engine, resume_run, run_workflow
    from stepline.engine import RuntimeConfig
    from stepline.errors import SteplineError
    from stepline.executors import Executor, StepRequest, StepSession, register_executor
    from stepline.families import load_workflow
    from stepline.model import Run, RunStep, StepSpec, WorkflowSpec


__getattr__, __dir__ = _lazy_exports("stepline", globals(), _EXPORTS)
