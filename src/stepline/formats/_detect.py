"""Pick the reader for a path: native StepSpec files, BMAD legacy/hybrid/micro-file workflows, CCW sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepline.errors import NotFoundError, ReaderError
from stepline.formats._diagnostics import Diagnostic
from stepline.formats._native import is_native_workflow, lint_native, load_native
from stepline.model import WorkflowSpec

__all__ = ["detect_format", "lint_path", "load_workflow"]


def detect_format(path: Path) -> str:
    """Name the format of the workflow at ``path`` (a file or a folder holding one)."""
    if path.is_dir():
        if (path / "workflow.yaml").is_file() and is_native_workflow(path / "workflow.yaml"):
            return "native"
        if (path / "workflow.yaml").is_file():
            return "bmad-legacy"
        if any(path.glob("workflow*.md")):
            return "bmad-microfile"
        if path.name.startswith("WFS-") or (path / "workflow-session.json").is_file():
            return "ccw"
        raise ReaderError("no workflow here (expected workflow.yaml, workflow.md, a WFS-* session or a "
                          "native .yaml/.json file)", path=str(path))
    if is_native_workflow(path):
        return "native"
    if path.name == "workflow.yaml":
        return "bmad-legacy"
    if path.suffix == ".md" and path.name.startswith("workflow"):
        return "bmad-microfile"
    raise ReaderError("not a workflow file (expected workflow.yaml, workflow*.md, or a native .yaml/.json "
                      "file with steps:)", path=str(path))


def load_workflow(path: Path | str, *, project_root: Path | str | None = None,
                  variables: dict[str, Any] | None = None, mode: str | None = None) -> WorkflowSpec:
    """Read the workflow at ``path`` into the canonical model, whatever its format."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or folder", hint="check the path")
    root = Path(project_root) if project_root is not None else Path.cwd()
    fmt = detect_format(path)
    if fmt == "native":
        return load_native(path / "workflow.yaml" if path.is_dir() else path)
    return _load_other(fmt, path, root.resolve(), variables or {}, mode)


def _load_other(fmt: str, path: Path, root: Path, variables: dict[str, Any], mode: str | None) -> WorkflowSpec:
    raise ReaderError(f"{fmt} workflows are not supported by this build", path=str(path))


def lint_path(path: Path, *, project_root: Path | None = None) -> list[Diagnostic]:
    """Every problem in the workflow at ``path``, or in every workflow under a folder."""
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or folder", hint="check the path")
    if path.is_file():
        fmt = detect_format(path)
        return lint_native(path) if fmt == "native" else []
    diagnostics: list[Diagnostic] = []
    for candidate in sorted(path.rglob("*")):
        if candidate.is_file() and candidate.suffix in (".yaml", ".yml", ".json") and is_native_workflow(candidate):
            diagnostics.extend(lint_native(candidate))
    return diagnostics
