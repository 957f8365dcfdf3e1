"""A skill's persistent facts, loaded by its activation: ``file:`` globs under the project root read as text (each
with its sha256), other entries as written; a fact from outside the project is refused."""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path
from typing import Any

from stepline._paths import escape
from stepline.engine import StepContext
from stepline.errors import StepFailed
from stepline.formats import read_text
from stepline.skills._host import render

__all__ = ["load_facts"]

_FACT_LIMIT = 65_536
_SKIPPED_DIRS = {"_bmad", "node_modules", ".git", ".stepline", ".venv", "__pycache__"}


def _glob(root: Path, pattern: str) -> list[Path]:
    """Files under ``root`` matching ``pattern``; ``**`` walks the tree without entering ``_bmad``, hidden
    folders, ``node_modules`` or virtual environments (a fact is the project's, and the walk stays cheap)."""
    if "**" not in pattern:
        return sorted(p for p in root.glob(pattern) if p.is_file())
    prefix, _, suffix = pattern.partition("**/")
    base = root / prefix if prefix else root
    found: list[Path] = []
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in names:
            parts = (Path(folder) / name).relative_to(base).parts
            if any(fnmatch.fnmatchcase("/".join(parts[i:]), suffix) for i in range(len(parts))):
                found.append(Path(folder) / name)
    return sorted(found)


def load_facts(ctx: StepContext, entries: list[Any]) -> list[dict[str, Any]]:
    """``persistent_facts``: ``file:`` globs under the project root read as text, other entries as written."""
    facts: list[dict[str, Any]] = []
    root = ctx.project_root
    for entry in entries:
        text = render(ctx, str(entry))
        if not text.startswith("file:"):
            facts.append({"fact": text})
            continue
        pattern = text[len("file:"):].strip()
        relative = pattern[len(str(root)) + 1:] if pattern.startswith(str(root) + "/") else pattern
        if escape(root, relative, follow=False) is not None:
            # The format reads facts from "paths or globs under {project-root}": a fact from elsewhere would
            # make the run depend on files the project does not hold (and carry them into every request).
            raise StepFailed(f"persistent_facts entry {str(entry)!r} names a file outside the project root",
                             hint="file: entries are paths or globs under {project-root}; copy the file into the "
                                  "project, or give the fact as text")
        matches = _glob(root, relative)
        for path in matches:
            if escape(root, path) is not None:  # a symlink to a file elsewhere: as a path naming one
                raise StepFailed(f"persistent_facts entry {str(entry)!r}: {path.relative_to(root)} is a symlink to "
                                 f"a file outside the project root", hint="copy the file into the project, or give "
                                                                          "the fact as text")
            content = read_text(path)
            digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
            facts.append({"source": str(entry), "path": str(path), "sha256": digest, "text": content[:_FACT_LIMIT]})
        if not matches:
            facts.append({"source": str(entry), "path": None, "note": f"no file matches {pattern}"})
    return facts
