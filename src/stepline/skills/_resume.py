"""Work a skill left in progress, which it would offer to resume rather than start over.

Two forms a skill-era release uses: a document whose frontmatter ``status`` is not final (``prd.md`` with
``status: draft`` in the skill's output folder: "offer to resume rather than starting over"), and a step-file
skill's output whose frontmatter ``stepsCompleted`` lists the steps done ("Document progress in output file
frontmatter using `stepsCompleted`"). This module finds the second kind's candidates and reads which steps are
done; the driver offers them. Pure: reads files, never imports the engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from stepline._paths import inside
from stepline._placeholders import Kind, find
from stepline.errors import ReaderError
from stepline.formats import read_frontmatter, read_text
from stepline.stepchain import marks

__all__ = ["InProgress", "output_mentions", "steps_in_progress"]

#: What follows a placeholder in an output path as step files name them (``{planning_artifacts}/epics.md``,
#: ``{{.work_folder}}/{{date}}/log.md``).
_PATH_AFTER = re.compile(r"(?:/[\w.{}-]+)*/[\w.-]+\.md")
_HEADS = frozenset({Kind.VAR, Kind.RUNTIME, Kind.CONFIG_KEY, Kind.CONFIG_PATH, Kind.CUSTOM})


@dataclass(frozen=True, slots=True)
class InProgress:
    """A document left in progress: where it is, what shows it, and the step to resume at (step files)."""

    path: Path
    detail: str
    resume_at: str | None = None


def output_mentions(texts: Iterable[str]) -> list[str]:
    """The output paths (with their placeholders) the texts name, in order, once each."""
    found: list[str] = []
    for text in texts:
        end = 0
        for token in find(text, _HEADS):
            if token.start >= end and (path := _PATH_AFTER.match(text, token.end)) is not None:
                found.append(text[token.start:path.end()])
                end = path.end()
    return list(dict.fromkeys(found))


def steps_in_progress(paths: Iterable[Path], steps: list[str], skill_root: Path,
                      exists: Callable[[Path], bool] = Path.is_file) -> list[InProgress]:
    """Documents (outside the skill) whose frontmatter ``stepsCompleted`` names some of ``steps`` (step ids, in
    chain order) but not all: each with the first step it does not name."""
    found = []
    for path in paths:
        if not exists(path) or inside(skill_root, path) is not None:
            continue
        try:
            done = read_frontmatter(read_text(path), path=str(path)).data.get("stepsCompleted")
        except ReaderError:  # a file of the user's this reader cannot read is nobody's work in progress
            continue
        if not isinstance(done, list) or not done:
            continue
        remaining = [step for step in steps if not any(marks(entry, Path(step).name) for entry in done)]
        if remaining and len(remaining) < len(steps):
            found.append(InProgress(path, f"stepsCompleted: {done}", remaining[0]))
    return found
