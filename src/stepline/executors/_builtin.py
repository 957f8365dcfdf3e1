"""The executors that ship with stepline, by name, imported only when one is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["BUILTIN_EXECUTORS", "register_all"]

#: name -> "module:attribute" of a factory taking the options mapping.
BUILTIN_EXECUTORS: dict[str, str] = {
    "dry-run": "stepline.executors._dryrun:DryRunExecutor",
    "scripted": "stepline.executors._scripted:ScriptedExecutor",
    "openai": "stepline.executors._openai:OpenAIExecutor",
    "anthropic": "stepline.executors._anthropic:AnthropicExecutor",
    "cli-agent": "stepline.executors.cli_agents:CliAgentExecutor",
    "human": "stepline.executors._human:HumanExecutor",
    "replay": "stepline.executors._cassette:ReplayExecutor",
}


def _lazy(target: str) -> Callable[[dict[str, Any]], Any]:
    module_name, _, attribute = target.partition(":")

    def factory(options: dict[str, Any]) -> Any:
        return getattr(importlib.import_module(module_name), attribute)(options)

    return factory


def register_all(register: Callable[[str, Any], None], registry: dict[str, Any]) -> None:
    """Register every built-in executor that is not registered yet (a third party may have replaced one)."""
    for name, target in BUILTIN_EXECUTORS.items():
        if name not in registry:
            register(name, _lazy(target))
