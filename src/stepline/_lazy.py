"""Lazy public names for a package (PEP 562): the module defining a name is imported when it is first used.

Used by packages whose import must stay cheap (``stepline`` itself for ``stepline --help``, ``tools`` and
``guardrails`` for tool worker processes, which must not pay for pydantic).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, namespace: dict[str, Any], exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``__getattr__`` and ``__dir__`` for ``package``; ``exports`` maps a name to its module.

    A module path starting with ``.`` (``"._checks"``) is relative to ``package``.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        target = package + module if module.startswith(".") else module
        value = getattr(importlib.import_module(target), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
