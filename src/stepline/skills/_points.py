"""The points of a skill's steps: what each step's text asks of the person, where it routes and whom it hands
over to (:func:`stepline.stepchain._plan.read_points`), put in each step's ``meta["points"]`` at load.

Each step reads the text the skills driver hands over for it: a step file's body, a section (and the sections it
names as ``## Title`` are routes to them), the activation section with the skill's preamble, the intent modes, a
shim's whole text, an activation instruction of the customization; an agent's menu and a router's modes are
choices with their items as options.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepline.formats import read_text
from stepline.model import StepSpec
from stepline.skills._skill import Section, SkillFiles
from stepline.stepchain import Option, Point, PointKind, Route, read_points

__all__ = ["attach_points", "preamble_of"]

Finder = Callable[[str], Path | None]


def preamble_of(files: SkillFiles) -> tuple[str, int]:
    """The entry document's text before its first ``## `` section (after the frontmatter), and its first line."""
    doc = files.entry
    lines = doc.text.splitlines()
    first = files.sections[0].line if files.sections else len(lines) + 1
    return "\n".join(lines[doc.body_line - 1:first - 1]), doc.body_line


def _body(files: SkillFiles, *, skill_md: bool = False) -> tuple[str, int, Path]:
    doc = files.skill if skill_md else files.entry
    return "\n".join(doc.text.splitlines()[doc.body_line - 1:]), doc.body_line, doc.path


def _in_text(files: SkillFiles) -> tuple[str, ...]:
    """The titles of the sections a step may route to by name: every section (a step's own title included)."""
    return tuple(s.title for s in files.sections)


def _read(text: str, file: Path, line: int, files: SkillFiles, finder: Finder,
          steps: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    points = read_points(text, file=file, first_line=line, base=files.root, find_skill=finder,
                         sections=_in_text(files))
    return [p.to_json() for p in _with_named_sections(points, files, finder, steps)]


def _with_named_sections(points: tuple[Point, ...], files: SkillFiles, finder: Finder,
                         steps: frozenset[str]) -> list[Point]:
    """``points``, each route to a section that is not a step of its own (``steps``: the titles of the sections
    that are) followed by that section's points: the driver hands such a section over with the step that names
    it."""
    out: list[Point] = []
    seen: set[str] = set()
    for point in points:
        out.append(point)
        if point.kind is not PointKind.ROUTE or point.section is None or point.section in steps | seen:
            continue
        seen.add(point.section)
        section = next((s for s in files.sections if s.title == point.section), None)
        if section is not None:
            out.extend(read_points(section.text, file=files.entry.path, first_line=section.line, base=files.root,
                                   find_skill=finder, sections=_in_text(files)))
    return out


def _section(files: SkillFiles, title: str) -> Section | None:
    return next((s for s in files.sections if s.title == title), None)


def _choice(text: str, file: Path, options: list[tuple[str, str]], line: int = 1) -> list[dict[str, Any]]:
    point = Point(kind=PointKind.CHOICE, text=text, file=file, line=line,
                  options=tuple(Option(key, label, Route("local")) for key, label in options))
    return [point.to_json()]


_INTENTS = re.compile(r"(?i)\bintent\b")
#: a section that says it is a reference other parts use (``## Reviewer Gate`` — ``Used by Validate and Finalize.``):
#: its points apply when it is used, not when the run passes it in order
_USED_BY = re.compile(r"\A(?:\s*#[^\n]*\n)?\s*(?P<used>\**Used\s+(?:by|at|when|in|from)\b[^.\n]*)")
_BOLD = re.compile(r"\*\*([A-Za-z][\w-]*)\*\*(?P<after>[^*]{0,80})")


def _intent_of_section(files: SkillFiles, title: str) -> str | None:
    """The intent a section is for, when the activation names the skill's intents in bold (``Detect the intent —
    **create** (the default), **update** an existing spine, or **validate** one (see those sections)``) and the
    section's title names one of them but not the default (the first, unless one says it is): ``update``. Its
    points are under that intent (a run of another intent passes the section)."""
    activation = next((s.text for s in files.sections if "activation" in s.title.lower()), "")
    for line in activation.splitlines():
        found = _BOLD.findall(line) if _INTENTS.search(line) else []
        if len(found) < 2:
            continue
        names = [str(name).lower() for name, _ in found]
        default = next((str(name).lower() for name, after in found if re.match(r"\W*\(?[^)]*\bdefault\b", after)),
                       names[0])
        words = set(re.findall(r"[a-z]+", title.lower()))
        named = [name for name in names if name in words]
        if named and default not in named:
            return named[0]
    return None


def _points_of(step: StepSpec, files: SkillFiles, finder: Finder, steps: frozenset[str]) -> list[dict[str, Any]]:
    role = step.meta.get("role")
    if role == "step-file":
        doc = files.docs[step.meta["file"]]
        return _read("\n".join(doc.text.splitlines()[doc.body_line - 1:]), doc.path, doc.body_line, files, finder)
    if role in ("section", "intent"):
        title = step.meta.get("title") or next((s.title for s in files.sections if "intent" in s.title.lower()
                                                and "mode" in s.title.lower()), "")
        section = _section(files, title)
        if section is None:
            return []
        points = _read(section.text, files.entry.path, section.line, files, finder, steps)
        intent = _intent_of_section(files, title) if role == "section" else None
        used = _USED_BY.search(section.text) if role == "section" else None
        over = f"{intent} intent" if intent else str(used["used"]).strip(" *.") if used else ""
        for point in points if over else ():
            point["condition"] = over + (f"; {point['condition']}" if point.get("condition") else "")
        return points
    if role == "on-activation":
        preamble, first = preamble_of(files)
        activation = next((s for s in files.sections if "activation" in s.title.lower()), None)
        found = _read(preamble, files.entry.path, first, files, finder)
        if activation is not None:
            found += _read(activation.text, files.entry.path, activation.line, files, finder)
        return found
    if role in ("body", "shim"):
        text, first, path = _body(files, skill_md=role == "shim")
        return _read(text, path, first, files, finder)
    if role == "route":  # a file the skill's text routes to, run as a step of its own
        path = files.root / str(step.meta["file"])
        return _read(read_text(path), path, 1, files, finder) if path.is_file() else []
    if role == "instruction":
        return _read(str(step.meta.get("text") or ""), files.root / "customize.toml", 1, files, finder)
    if role == "agent-menu":
        items = step.meta.get("items") or []
        return _choice("the agent's menu", files.root / "customize.toml",
                       [(i["code"], i["description"]) for i in items])
    if role == "mode":
        modes = step.meta.get("modes") or []
        return _choice("choose the mode", files.entry.path, [(m["key"], m["label"]) for m in modes])
    return []


def attach_points(steps: list[StepSpec], files: dict[str, SkillFiles], finder: Finder) -> None:
    """Put each step's points in its ``meta["points"]`` (plain data, :meth:`Point.to_json`); ``files`` are the
    skills the steps belong to, by name (a shim's and its target's)."""
    titles = frozenset(str(s.meta.get("title")) for s in steps if s.meta.get("role") == "section")
    for step in steps:
        skill = files.get(str(step.meta.get("skill")))
        if skill is not None and "points" not in step.meta:
            step.meta["points"] = _points_of(step, skill, finder, titles)
