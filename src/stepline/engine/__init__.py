"""The engine: the only code that changes run state (step loop, resume, gates, the step protocol).

It knows no workflow family: each family registers its step driver (and flow) with :func:`register_driver`,
and :func:`stepline.families.register_drivers` imports them all.
"""

from __future__ import annotations

from stepline.engine._config import RuntimeConfig, load_runtime_config
from stepline.engine._context import StepContext
from stepline.engine._flow import CursorFlow
from stepline.engine._gates import GateBook, gate_choices, gate_question, gate_reason
from stepline.engine._human import HumanChannel, Prompt, Question, terminal_prompt
from stepline.engine._runner import Engine, EventListener, RunObserver, StepDriver, register_driver, register_observer
from stepline.engine._session import Outcome, run_tool_once, sha256_file
from stepline.engine._signals import StepBlocked
from stepline.engine._timeline import build_timeline

__all__ = [
    "CursorFlow",
    "Engine",
    "EventListener",
    "GateBook",
    "HumanChannel",
    "Outcome",
    "Prompt",
    "Question",
    "RunObserver",
    "RuntimeConfig",
    "StepBlocked",
    "StepContext",
    "StepDriver",
    "build_timeline",
    "gate_choices",
    "gate_question",
    "gate_reason",
    "load_runtime_config",
    "register_driver",
    "register_observer",
    "run_tool_once",
    "sha256_file",
    "terminal_prompt",
]
