"""A step file's text without the control prose the runtime owns (SPEC R-X7).

A BMAD step file tells the model that runs a workflow itself how to present the menu, when to load the next step
file, how to update the frontmatter and not to look ahead. Under stepline the runtime does all of that, so
:func:`lean_step_text` leaves it out, recognised by structure: the frontmatter; whole sections whose heading names
a mechanism the runtime owns (a menu, the step's completion, the next step) with their subsections; and single
list items or one-line paragraphs elsewhere that only speak of those mechanisms. Everything else stays, in order;
what was left out is returned, so the journal can say it.

:func:`shared_sections` finds the sections a workflow's step files repeat word for word, which
``lean_step_text(text, shared=…)`` then leaves out of each step's own text; :func:`workflow_standing` is a workflow
entry file's judgement (its goal, its role) without its step-file architecture and initialisation. Both are sent
once per run, where a provider caches them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["LeanText", "lean_step_text", "shared_sections", "workflow_standing"]

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
#: Section headings that name a mechanism the runtime owns (the section and its subsections are left out).
_CONTROL_SECTION = re.compile(
    r"(?i)\b(present|handle|display|show)\b.*\bmenu\b|\bmenu\s+(options|handling|selection)\b|"
    r"^\W*(\d+\.\s*)?(final|checkpoint)?\s*menu\W*$|\b(checkpoint|final)\s+menu\b|"
    r"step\s+completion|\bnext\s+step\b|load(ing)?\s+next|^\W*next\W*$")
#: A list item or one-line paragraph that only speaks of the runtime's mechanisms.
_CONTROL_LINE = re.compile(
    r"(?i)(frontmatter|stepsCompleted|lastStep|nextStepFile|"
    r"\bnext\s+step\b|step\s+file|\bload(ing)?\b.{0,40}\bstep\b|read\s+(the\s+)?(complete|entire)|"
    r"\bmenu\b|\[C\]|'C'|\"C\"|halt\s+and\s+wait|wait\s+for\s+user\s+(input|selection)|"
    r"look(ing)?\s+ahead|future\s+steps|skip(ping)?\s+steps|optimiz(e|ing)\s+sequences|"
    r"\b(directs?|sends?|points?)\s+you\s+to\s+(another|the\s+next)\b)")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


@dataclass(frozen=True, slots=True)
class LeanText:
    """A step file's text for the executor, and what was left out of it."""

    text: str
    #: Headings of the sections left out, in order.
    sections: tuple[str, ...] = field(default_factory=tuple)
    #: How many single lines (list items, one-line paragraphs) were left out elsewhere.
    lines: int = 0
    #: Whether the frontmatter was left out.
    frontmatter: bool = False
    #: Headings of the sections the workflow's step files share (sent once, in the run's standing text).
    shared: tuple[str, ...] = field(default_factory=tuple)

    @property
    def left_out(self) -> dict[str, object]:
        """What the journal records of it."""
        return {"sections": list(self.sections), "lines": self.lines, "frontmatter": self.frontmatter,
                "shared": list(self.shared)}


def _without_frontmatter(lines: list[str]) -> tuple[list[str], bool]:
    if not lines or lines[0].strip() != "---":
        return lines, False
    for index in range(1, len(lines)):
        if lines[index].strip() in ("---", "..."):
            return lines[index + 1:], True
    return lines, False


def _split_sections(text: str) -> list[str]:
    """``text`` cut before each heading (outside code fences): each part is a heading with its own body."""
    parts: list[str] = []
    current: list[str] = []
    in_fence = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        if not in_fence and _HEADING.match(line) and current:
            parts.append("".join(current))
            current = []
        current.append(line)
    if current:
        parts.append("".join(current))
    return parts


def _heading_of(section: str) -> re.Match[str] | None:
    lines = section.splitlines()
    return _HEADING.match(lines[0]) if lines else None


def _has_body(section: str) -> bool:
    return bool(section.strip()) and len([line for line in section.splitlines() if line.strip()]) > 1


def shared_sections(texts: list[str]) -> tuple[str, ...]:
    """The sections (a heading and its own body) that recur byte for byte in at least half of ``texts`` (a
    workflow's step files, after :func:`lean_step_text`), and in at least two; in order of first appearance."""
    counts: dict[str, int] = {}
    for text in texts:
        for section in dict.fromkeys(_split_sections(text)):
            if _heading_of(section) and _has_body(section):
                counts[section] = counts.get(section, 0) + 1
    least = max(2, (len(texts) + 1) // 2)
    return tuple(section for section, count in counts.items() if count >= least)


def lean_step_text(text: str, shared: tuple[str, ...] = ()) -> LeanText:
    """``text`` without the control prose the runtime owns (see the module docstring), and without the
    ``shared`` sections (see :func:`shared_sections`), which the run sends once for every step."""
    lines, frontmatter = _without_frontmatter(text.splitlines(keepends=True))
    kept: list[str] = []
    sections: list[str] = []
    dropped_lines = 0
    skipping_level = 0  # > 0: inside a left-out section of that heading level
    in_fence = False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _HEADING.match(line)
        if heading is not None:
            level = len(heading[1])
            if skipping_level and level > skipping_level:
                continue  # a subsection of a left-out section
            skipping_level = 0
            if _CONTROL_SECTION.search(heading[2]):
                skipping_level = level
                sections.append(heading[2])
                continue
        elif skipping_level:
            continue
        elif not in_fence and _is_control_line(line):
            dropped_lines += 1
            continue
        kept.append(line)
    lean = re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip("\n")
    moved: list[str] = []
    if shared and lean:
        own = []
        for section in _split_sections(lean + "\n"):
            if section in shared:
                moved.append(section.splitlines()[0].lstrip("#").strip())
            else:
                own.append(section)
        lean = re.sub(r"\n{3,}", "\n\n", "".join(own)).strip("\n")
    return LeanText(text=lean + "\n" if lean else "", sections=tuple(sections), lines=dropped_lines,
                    frontmatter=frontmatter, shared=tuple(moved))


#: Sections of a workflow entry file (``workflow.md``) about the step-file machinery and the initialisation (config
#: loading, the first step's file) — the runtime's.
_RUNTIME_SECTION = re.compile(r"(?i)workflow\s+architecture|initiali[sz]ation|^\W*execution\W*$|first\s+step")


def workflow_standing(text: str) -> str:
    """A workflow entry file's standing instructions: its text (goal, role, rules about the work) without the
    frontmatter, the control prose :func:`lean_step_text` leaves out, and the sections about the step-file
    architecture, the initialisation and loading the first step."""
    kept: list[str] = []
    skipping_level = 0
    for section in _split_sections(lean_step_text(text).text):
        heading = _heading_of(section)
        if heading is not None:
            level = len(heading[1])
            if skipping_level and level > skipping_level:
                continue
            skipping_level = level if _RUNTIME_SECTION.search(heading[2]) else 0
            if skipping_level:
                continue
        elif skipping_level:
            continue
        kept.append(section)
    standing = re.sub(r"\n(\s*---\s*\n)+", "\n", "".join(kept))  # rules between the dropped sections
    return re.sub(r"\n{3,}", "\n\n", standing).strip("\n")


#: Work the executor does (a report to save, content to write): a line asking for it stays, even when it also
#: says when (before the next step); a menu's ``IF C:`` line does not (the runtime acts on the answer).
_WORK = re.compile(r"(?i)\b(save|write|append|create|generate|produce|document)\b")
_MENU_BRANCH = re.compile(r"(?i)^\s*(?:[-*+]\s*)?\**\s*IF\b")


def _is_control_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped or not _CONTROL_LINE.search(stripped):
        return False
    if _WORK.search(stripped) and not _MENU_BRANCH.match(stripped) and "frontmatter" not in stripped.lower():
        return False
    # A list item, or a short bold/critical one-liner; never a sentence inside a longer paragraph of guidance.
    return bool(_ITEM.match(line)) or stripped.startswith(("**", "ONLY", "CRITICAL", "🚨", "⚠️")) or len(stripped) < 160
