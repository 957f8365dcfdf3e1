"""Guardrails on step inputs and outputs (R-S1): secret redaction, size limits, path confinement.

The engine runs :func:`check_input` before a step's tools, :func:`check_output` after its executor wrote,
stores the reports on ``RunStep.guardrails`` and fails the step on :func:`blocking_failures`. Everything it
journals or sends to a model first goes through :func:`redact_obj` (or ``GuardrailPolicy.redact``).
"""

from __future__ import annotations

from stepline.guardrails._checks import (
    GuardrailPolicy,
    GuardrailReport,
    blocking_failures,
    check_input,
    check_output,
    confine_path,
)
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
