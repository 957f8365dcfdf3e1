"""Executors: whoever does a step's judgement (a script, a model, a CLI agent, a person), over one protocol.

The protocol, the registry and the cheap executors are imported with the package; the others' names (a person's
terminal, the LLM loop, record/replay, the MCP bridge, call budgets) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports
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
    choice_fits,
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
    "BUDGET_HINT",
    "DEFAULT_PRICES",
    "NOTES_HEADING",
    "PERSON_HINT",
    "REPEATED_HINT",
    "ROW",
    "STANDING_HINT",
    "CallBudget",
    "Choice",
    "DryRunExecutor",
    "Entry",
    "Executor",
    "ExecutorFactory",
    "HumanExecutor",
    "LLMExecutor",
    "Ledger",
    "McpBridgeExecutor",
    "MenuOption",
    "Price",
    "PriceTable",
    "RequestKind",
    "ScriptedExecutor",
    "ServingExecutor",
    "StepBridge",
    "StepRequest",
    "StepSession",
    "Usage",
    "WriteMode",
    "add_step_tools",
    "ask_in_thread",
    "available_executors",
    "choice_fits",
    "create_executor",
    "default_choice",
    "load_script",
    "match_answer",
    "memo_digest",
    "menu_text",
    "options_named",
    "register_executor",
    "standing_text",
    "terminal_input",
    "usage_row",
    "with_notes",
    "wrap_recording",
]

_EXPORTS = {
    "BUDGET_HINT": "._budget",
    "CallBudget": "._budget",
    "ServingExecutor": "._cassette",
    "memo_digest": "._cassette",
    "wrap_recording": "._cassette",
    "PERSON_HINT": "._human",
    "HumanExecutor": "._human",
    "ask_in_thread": "._human",
    "terminal_input": "._human",
    "LLMExecutor": "._llm",
    "McpBridgeExecutor": "._mcp_bridge",
    "StepBridge": "._mcp_bridge",
    "add_step_tools": "._mcp_bridge",
}

if TYPE_CHECKING:
    from stepline.executors._budget import BUDGET_HINT, CallBudget
    from stepline.executors._cassette import ServingExecutor, memo_digest, wrap_recording
    from stepline.executors._human import PERSON_HINT, HumanExecutor, ask_in_thread, terminal_input
    from stepline.executors._llm import LLMExecutor
    from stepline.executors._mcp_bridge import McpBridgeExecutor, StepBridge, add_step_tools

__getattr__, __dir__ = _lazy_exports("stepline.executors", globals(), _EXPORTS)
