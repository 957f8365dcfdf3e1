"""The engine: the only code that changes run state (step loop, resume, gates, the step protocol)."""

from __future__ import annotations

from stepline.engine import _formats  # noqa: F401 - registers the format drivers
from stepline.engine._config import RuntimeConfig, load_runtime_config
from stepline.engine._context import StepContext, render_variables
from stepline.engine._gates import GateBook, gate_reason
from stepline.engine._human import HumanChannel, Prompt, terminal_prompt
from stepline.engine._runner import Engine, EventListener, StepDriver, register_driver
from stepline.engine._session import Outcome
from stepline.engine._signals import StepBlocked
from stepline.engine._timeline import build_timeline

__all__ = [
    "Engine",
    "EventListener",
    "GateBook",
    "HumanChannel",
    "Outcome",
    "Prompt",
    "RuntimeConfig",
    "StepBlocked",
    "StepContext",
    "StepDriver",
    "build_timeline",
    "gate_reason",
    "load_runtime_config",
    "register_driver",
    "render_variables",
    "terminal_prompt",
]
