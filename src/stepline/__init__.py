"""stepline: run BMAD and Claude-Code-Workflow agent workflows deterministically, durably and auditably.

The public surface is small: :func:`load_workflow` reads any supported format into a :class:`WorkflowSpec`,
:func:`run_workflow` and :func:`resume_run` drive runs, :class:`Engine` gives full control, and executors are
registered by name. Everything else lives in the subpackages (``stepline.model``, ``stepline.engine``, …).

Names are imported on first use (PEP 562) so that ``stepline --help`` does not pay for pydantic and friends.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Engine": "stepline.engine",
    "Executor": "stepline.executors",
    "Run": "stepline.model",
    "RunStep": "stepline.model",
    "RuntimeConfig": "stepline.engine",
    "StepRequest": "stepline.executors",
    "StepSession": "stepline.executors",
    "StepSpec": "stepline.model",
    "SteplineError": "stepline.errors",
    "WorkflowSpec": "stepline.model",
    "load_workflow": "stepline.formats",
    "register_executor": "stepline.executors",
    "resume_run": "stepline._api",
    "run_workflow": "stepline._api",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from stepline._api import resume_run, run_workflow
    from stepline.engine import Engine, RuntimeConfig
    from stepline.errors import SteplineError
    from stepline.executors import Executor, StepRequest, StepSession, register_executor
    from stepline.formats import load_workflow
    from stepline.model import Run, RunStep, StepSpec, WorkflowSpec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stepline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
