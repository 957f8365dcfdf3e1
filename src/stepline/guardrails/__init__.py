"""Guardrails on step inputs and outputs (R-S1): secret redaction, size limits, paths kept in the project.

The engine runs :func:`check_input` before a step's tools, :func:`check_artifacts` on the files its executor
wrote (a secret there is reported per file and kind, never redacted: the file is the user's),
stores the reports on ``RunStep.guardrails`` and fails the step on :func:`blocking_failures`. Everything it
journals or sends to a model first goes through :func:`redact_obj` (or ``GuardrailPolicy.redact``).

Path confinement itself is :mod:`stepline._paths` (every layer reads and writes files through it).
Names are loaded on first use: importing the package must not pay for pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from stepline.guardrails._checks import (
        GuardrailPolicy,
        GuardrailReport,
        blocking_failures,
        check_artifacts,
        check_input,
        check_output,
    )
    from stepline.guardrails._secrets import SecretScanner, describe_secrets, find_secrets, redact, redact_obj

__all__ = [
    "GuardrailPolicy",
    "GuardrailReport",
    "SecretScanner",
    "blocking_failures",
    "check_artifacts",
    "check_input",
    "check_output",
    "describe_secrets",
    "find_secrets",
    "redact",
    "redact_obj",
]

_EXPORTS: dict[str, str] = {
    "GuardrailPolicy": "_checks",
    "GuardrailReport": "_checks",
    "SecretScanner": "_secrets",
    "blocking_failures": "_checks",
    "check_artifacts": "_checks",
    "check_input": "_checks",
    "check_output": "_checks",
    "describe_secrets": "_secrets",
    "find_secrets": "_secrets",
    "redact": "_secrets",
    "redact_obj": "_secrets",
}


__getattr__, __dir__ = _lazy_exports("stepline.guardrails", globals(), {k: "." + v for k, v in _EXPORTS.items()})
