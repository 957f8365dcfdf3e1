"""Path confinement: a path a step or tool touches must stay inside the project root.

Tool workers import this module, so it stays free of pydantic.
"""

from __future__ import annotations

from pathlib import Path

from stepline.errors import ToolError

__all__ = ["confine_path"]


def confine_path(project_root: Path | str, path: str | Path) -> Path:
    """Resolve ``path`` inside ``project_root`` or raise :class:`~stepline.errors.ToolError`.

    Refused: any ``..`` component (even one that would land back inside: it is never needed and hides
    intent), an absolute path outside the root, and a path whose symlinks resolve outside the root. The
    returned path is fully resolved, so the caller opens exactly what was checked.
    """
    root = Path(project_root).resolve()
    raw = Path(path)
    if ".." in raw.parts:
        raise ToolError(f"path {str(path)!r} contains '..'", hint="use a path relative to the project root")
    candidate = raw if raw.is_absolute() else root / raw
    if not candidate.absolute().is_relative_to(root):
        raise ToolError(f"path {str(path)!r} is outside the project root {str(root)!r}")
    resolved = candidate.resolve()
    if not resolved.is_relative_to(root):
        raise ToolError(f"path {str(path)!r} leaves the project root through a symlink "
                        f"(it resolves to {str(resolved)!r})")
    return resolved
