"""Executors: whoever does a step's judgement (a script, a model, a CLI agent, a person), over one protocol."""

from __future__ import annotations

from stepline.executors._base import (
    Executor,
    ExecutorFactory,
    available_executors,
    create_executor,
    register_executor,
)
from stepline.executors._dryrun import DryRunExecutor, default_choice
from stepline.executors._protocol import (
    STANDING_HINT,
    Choice,
    MenuOption,
    RequestKind,
    StepRequest,
    StepSession,
    WriteMode,
    match_answer,
    menu_text,
    options_named,
    standing_text,
)
from stepline.executors._scripted import ScriptedExecutor, load_script

__all__ = [
    "STANDING_HINT",
    "Choice",
    "DryRunExecutor",
    "Executor",
    "ExecutorFactory",
    "MenuOption",
    "RequestKind",
    "ScriptedExecutor",
    "StepRequest",
    "StepSession",
    "WriteMode",
    "available_executors",
    "create_executor",
    "default_choice",
    "load_script",
    "match_answer",
    "menu_text",
    "options_named",
    "register_executor",
    "standing_text",
]
