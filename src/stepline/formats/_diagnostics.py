"""Diagnostics: what readers and ``stepline validate`` report about a workflow, each with file:line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Diagnostic", "Severity"]

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a workflow file.

    ``code`` is a short stable identifier (``yaml-syntax``, ``missing-file``, ``unknown-variable``,
    ``unreachable-step``, ``goto-target``, ``dependency-cycle``, …) that tests and ``--json`` output use.
    """

    severity: Severity
    code: str
    message: str
    path: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.severity}: {self.message} [{self.code}]"
