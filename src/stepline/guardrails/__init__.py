"""Guardrails on step inputs and outputs (R-S1): secret redaction, size limits, path confinement.

The engine runs :func:`check_input` before a step's tools, :func:`check_output` after its executor wrote,
stores the reports on ``RunStep.guardrails`` and fails the step on :func:`blocking_failures`. Everything it
journals or sends to a model first goes through :func:`redact_obj` (or ``GuardrailPolicy.redact``).

Names are loaded on first use: tool worker processes need :func:`confine_path` and must not pay for pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepline.guardrails._checks import (
        GuardrailPolicy,
        GuardrailReport,
        blocking_failures,
        check_input,
        check_output,
    )
    from stepline.guardrails._paths import confine_path
    from stepline.guardrails._secrets import SecretScanner, find_secrets, redact, redact_obj

__all__ = [
    "GuardrailPolicy",
    "GuardrailReport",
    "SecretScanner",
    "blocking_failures",
    "check_input",
    "check_output",
    "confine_path",
    "find_secrets",
    "redact",
    "redact_obj",
]

_EXPORTS: dict[str, str] = {
    "GuardrailPolicy": "_checks",
    "GuardrailReport": "_checks",
    "SecretScanner": "_secrets",
    "blocking_failures": "_checks",
    "check_input": "_checks",
    "check_output": "_checks",
    "confine_path": "_paths",
    "find_secrets": "_secrets",
    "redact": "_secrets",
    "redact_obj": "_secrets",
}


def __getattr__(name: str) -> Any:
    """Import the private module that defines ``name`` when it is first used (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'stepline.guardrails' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"stepline.guardrails.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
