"""``stepline plan``: the plan of a workflow, before anything runs — its steps in order, and in each the points
where its text hands the turn to the person (questions, choices with their options and conditions,
confirmations, conversation loops), the files it routes to and the skills it hands over to."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stepline.interfaces.cli._options import Directory, JsonOutput, ProjectRoot, app, where
from stepline.interfaces.cli._render import print_json

if TYPE_CHECKING:
    from stepline.stepchain import Plan, Point

_TEXT_WIDTH = 110


@app.command()
def plan(
    path: Annotated[Path, typer.Argument(help="A workflow file or folder, or a tree of them.")],
    directory: Directory = None,
    project_root: ProjectRoot = None,
    as_json: JsonOutput = False,
) -> None:
    """Print the plan of a workflow before it runs: its steps in order, each question, choice (with its options
    and condition), confirmation and conversation loop, each route and hand-over; a sentence that speaks of the
    person's turn but fits none of these is shown as unclassified."""
    from stepline.families import read_plans

    at = where(directory, project_root)
    target = at.path(path)
    if not target.is_absolute() and Path.cwd().resolve() != at.root:
        target = target.absolute()  # readers take a relative path from the project folder, which this is not
    plans = read_plans(target, project_root=at.root if project_root is not None or directory else None)
    if as_json:
        print_json([p.to_json() for p in plans] if len(plans) > 1 else plans[0].to_json())
        return
    for index, found in enumerate(plans):
        if index:
            print()
        print("\n".join(_lines(found, at.base)))


def _shown(path: Path, base: Path) -> str:
    """``path`` from the folder the command was given in when it is under it, else absolute."""
    relative = os.path.relpath(Path(path).absolute(), base.absolute())
    return str(Path(path).absolute()) if relative.startswith("..") else relative


def _lines(found: Plan, base: Path) -> list[str]:
    counts: dict[str, int] = {}
    for point in found.points():
        counts[point.kind.value] = counts.get(point.kind.value, 0) + 1
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no points"
    head = f"{found.name} ({found.kind}) {_shown(found.path, base)}: {len(found.steps)} step(s); {summary}"
    lines = [head]
    if found.auto_mode:
        lines.append(f"  auto mode: {found.auto_mode} (the executor answers each point; its answers are journaled)")
    for number, step in enumerate(found.steps, start=1):
        title = f" — {step.title}" if step.title and step.title != step.id else ""
        lines.append(f"{number:>3}. {step.id}{title}  [{step.kind}] {_shown(step.file, base)}:{step.line}")
        lines.extend(_point_lines(point, base) for point in step.points)
    lines.extend(f"  {d}" for d in found.diagnostics)
    return lines


def _point_lines(point: Point, base: Path) -> str:
    where_ = f"{Path(point.file).name}:{point.line}"
    text = " ".join(point.text.split())
    text = text if len(text) <= _TEXT_WIDTH else text[:_TEXT_WIDTH - 1] + "…"
    out = [f"       {point.kind.value:<12} {where_:<22} {text}"]
    if point.condition:
        out.append(f"{'':<42}when: {point.condition}")
    if point.target is not None:
        resolved = ("-> " + _shown(point.resolved, base)) if point.resolved else \
            (f"-> section {point.section!r}" if point.section else "-> NOT FOUND")
        out.append(f"{'':<42}target: {point.target} {resolved}")
    if point.ends_when:
        out.append(f"{'':<42}ends when: {point.ends_when}")
    for option in point.options:
        mark = " (default)" if option.key == point.default else ""
        out.append(f"{'':<42}[{option.key}] {option.label}{mark}")
    if point.multi:
        out.append(f"{'':<42}(several may be chosen)")
    if point.auto:
        out.append(f"{'':<42}auto mode: {point.auto}")
    return "\n".join(out)
