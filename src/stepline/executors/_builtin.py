"""Registration of the executors that ship with stepline (imported lazily on first lookup)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["register_all"]


def register_all(register: Callable[[str, Any], None], registry: dict[str, Any]) -> None:
    """Register every built-in executor that is not registered yet (a third party may have replaced one)."""
    from stepline.executors._dryrun import DryRunExecutor
    from stepline.executors._scripted import ScriptedExecutor

    builtins: dict[str, Any] = {
        "dry-run": DryRunExecutor,
        "scripted": ScriptedExecutor,
    }
    for name, factory in builtins.items():
        if name not in registry:
            register(name, factory)
