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
    NOTES_HEADING,
    REPEATED_HINT,
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
    with_notes,
)
from stepline.executors._scripted import ScriptedExecutor, load_script
from stepline.executors._usage import (
    DEFAULT_PRICES,
    ROW,
    Entry,
    Ledger,
    Price,
    PriceTable,
    Usage,
    usage_row,
)

__all__ = [
    "DEFAULT_PRICES",
    "NOTES_HEADING",
    "REPEATED_HINT",
    "ROW",
    "STANDING_HINT",
    "Choice",
    "DryRunExecutor",
    "Entry",
    "Executor",
    "ExecutorFactory",
    "Ledger",
    "MenuOption",
    "Price",
    "PriceTable",
    "RequestKind",
    "ScriptedExecutor",
    "StepRequest",
    "StepSession",
    "Usage",
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
    "usage_row",
    "with_notes",
]
