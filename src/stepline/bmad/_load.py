"""Load any BMAD workflow — legacy, hybrid or micro-file — from its file or folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepline.errors import ReaderError
from stepline.model import WorkflowSpec

__all__ = ["load_bmad_workflow"]


def load_bmad_workflow(path: Path, *, project_root: Path, variables: dict[str, Any] | None = None,
                       mode: str | None = None) -> WorkflowSpec:
    """Read the BMAD workflow at ``path`` (``workflow.yaml``, ``workflow*.md`` or a folder holding one)."""
    from stepline.bmad._legacy import holds_xml_steps, load_bmad_legacy

    variables = variables or {}
    legacy = path / "workflow.yaml" if path.is_dir() else path
    if (legacy.name != "workflow.yaml" or not legacy.is_file()) and not holds_xml_steps(path):
        from stepline.bmad._microfile import load_bmad_microfile

        return _confined(load_bmad_microfile(path, project_root=project_root, variables=variables, mode=mode))
    spec = load_bmad_legacy(legacy if legacy.is_file() else path, project_root=project_root, variables=variables)
    if spec.format != "bmad-hybrid":
        return spec
    # Hybrid (R-F4): config from the yaml, execution as a micro-file workflow.
    from stepline.bmad._microfile import load_bmad_microfile

    hybrid = _confined(load_bmad_microfile(Path(spec.meta["workflow_md"]), project_root=project_root,
                                           variables={**spec.variables, **variables}, mode=mode))
    hybrid.meta["hybrid_yaml"] = str(path)
    return hybrid.model_copy(update={"id": spec.id or hybrid.id})


def _confined(spec: WorkflowSpec) -> WorkflowSpec:
    """``spec`` (a micro-file workflow), refused when symlinks lead one of its files out of the project: the run
    would read that file and send it to the model (``stepline validate`` names every such file)."""
    from stepline.bmad._microfile import LINK_LEAVES_PROJECT

    escape = next((d for d in spec.meta.get("diagnostics", []) if d["code"] == LINK_LEAVES_PROJECT), None)
    if escape is not None:
        raise ReaderError(escape["message"], path=escape["path"], line=escape["line"],
                          hint="`stepline validate` lists every such file")
    return spec
