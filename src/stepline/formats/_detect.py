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
    if fmt == "bmad-legacy":
        from stepline.formats._bmad_legacy import load_bmad_legacy

        spec = load_bmad_legacy(path / "workflow.yaml" if path.is_dir() else path, project_root=root,
                                variables=variables)
        problems = spec.meta.get("structure_problems") or []
        if problems:  # refuse to run what the reader had to guess (stepline validate lists every problem)
            first = problems[0]
            raise ReaderError(f"{first['message']}; the step structure is uncertain, so it is not run",
                              path=first["path"], line=first["line"],
                              hint="fix the tag nesting; `stepline validate` lists every problem")
        if spec.format != "bmad-hybrid":
            return spec
        # Hybrid (R-F4): config from the yaml, execution as a micro-file workflow.
        from stepline.formats._bmad_microfile import load_bmad_microfile

        hybrid = load_bmad_microfile(Path(spec.meta["workflow_md"]), project_root=root,
                                     variables={**spec.variables, **variables}, mode=mode)
        hybrid.meta["hybrid_yaml"] = str(path)
        return hybrid.model_copy(update={"id": spec.id or hybrid.id})
    if fmt == "bmad-microfile":
        from stepline.formats._bmad_microfile import load_bmad_microfile

        return load_bmad_microfile(path, project_root=root, variables=variables, mode=mode)
    from stepline.formats._ccw import load_ccw_session

    return load_ccw_session(path)


def _lint_one(fmt: str, path: Path, root: Path) -> list[Diagnostic]:
    if fmt == "native":
        return lint_native(path / "workflow.yaml" if path.is_dir() else path)
    if fmt == "bmad-legacy":
        from stepline.formats._bmad_legacy import lint_bmad_legacy

        return lint_bmad_legacy(path / "workflow.yaml" if path.is_dir() else path, root)
    if fmt == "bmad-microfile":
        from stepline.formats._bmad_microfile import lint_bmad_microfile

        return lint_bmad_microfile(path, root)
    from stepline.formats._ccw_check import check_ccw_session

    return check_ccw_session(path)


def lint_path(path: Path, *, project_root: Path | None = None) -> list[Diagnostic]:
    """Every problem in the workflow at ``path``, or in every workflow found under a folder."""
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or folder", hint="check the path")
    root = (project_root or Path.cwd()).resolve()
    try:
        return _lint_one(detect_format(path), path, root)
    except ReaderError:
        if path.is_file():
            raise
    diagnostics: list[Diagnostic] = []
    for candidate in _workflows_under(path):
        try:
            diagnostics.extend(_lint_one(detect_format(candidate), candidate, root))
        except ReaderError as exc:
            diagnostics.append(Diagnostic("error", "unreadable", exc.detail, exc.path or str(candidate), exc.line))
    return diagnostics


def _workflows_under(folder: Path) -> list[Path]:
    """Every workflow file or session folder under ``folder`` (hidden folders other than .workflow skipped)."""
    found: list[Path] = []
    for candidate in sorted(folder.rglob("*")):
        parts = candidate.relative_to(folder).parts
        if any(p.startswith(".") and p != ".workflow" for p in parts[:-1]):
            continue
        if candidate.is_dir():
            if candidate.name.startswith("WFS-") and (candidate / ".task").is_dir():
                found.append(candidate)
            continue
        name = candidate.name
        is_bmad = name == "workflow.yaml" or (
            name.startswith("workflow") and name.endswith(".md") and any(candidate.parent.glob("steps*")))
        is_native = candidate.suffix in (".yaml", ".yml", ".json") and is_native_workflow(candidate)
        if is_bmad or is_native:
            found.append(candidate)
    return found
