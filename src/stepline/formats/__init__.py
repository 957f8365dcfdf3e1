"""Readers: one module per workflow format, each turning files into a WorkflowSpec. Readers never write."""

from __future__ import annotations

from stepline.formats._detect import detect_format, lint_path, load_workflow
from stepline.formats._diagnostics import Diagnostic, Severity
from stepline.formats._native import load_native

__all__ = ["Diagnostic", "Severity", "detect_format", "lint_path", "load_native", "load_workflow"]
