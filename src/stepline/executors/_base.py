"""The executor interface and the registry of executors by name."""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from stepline.errors import NotFoundError
from stepline.executors._protocol import StepRequest, StepSession

__all__ = ["Executor", "ExecutorFactory", "available_executors", "create_executor", "register_executor"]


class Executor(ABC):
    """Does the judgement part of a step by speaking the step protocol.

    Subclasses set ``name`` and implement :meth:`perform`. ``pure`` executors (dry-run, scripted, replay) have no
    effect outside the process, so the runtime need not make its journal durable before calling them. An
    executor that ``speaks_for_user`` (the human executor, an IDE agent over MCP) shows a step's menu to the
    person and brings back their choice, so the runtime takes that choice as the person's answer instead of
    asking the same menu again. An executor that ``is_the_person`` (the human executor) does the step's work
    itself: the questions the step's text hands the person are theirs as they work, not asked a second time.
    """

    name: ClassVar[str] = ""
    pure: ClassVar[bool] = False
    speaks_for_user: ClassVar[bool] = False
    is_the_person: ClassVar[bool] = False

    @abstractmethod
    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Do what ``request`` asks, through ``session``; end with ``finish`` (or ``decide``)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most executors hold nothing
        """Release connections or processes held across steps."""


ExecutorFactory = Callable[[dict[str, Any]], Executor]

_registry: dict[str, ExecutorFactory] = {}


def register_executor(name: str, factory: ExecutorFactory) -> None:
    """Make an executor available by ``name`` (``--executor NAME``); ``factory(options)`` builds one per run."""
    _registry[name] = factory


def available_executors() -> list[str]:
    """Names of every registered executor."""
    _load_builtins()
    return sorted(_registry)


def create_executor(name: str, options: dict[str, Any] | None = None) -> Executor:
    """Build the executor registered as ``name`` with ``options``."""
    _load_builtins()
    factory = _registry.get(name)
    if factory is None:
        close = difflib.get_close_matches(name, list(_registry), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "available: " + ", ".join(sorted(_registry))
        raise NotFoundError(f"unknown executor {name!r}", hint=hint)
    return factory(dict(options or {}))


def _load_builtins() -> None:
    # Imported on first use so `stepline --help` stays fast and importing stepline registers nothing heavy.
    from stepline.executors import _builtin

    _builtin.register_all(register_executor, _registry)
