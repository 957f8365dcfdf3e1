"""Where a step stops for the person besides the points the runtime follows before it: the menu (or halt) the chain
presents at the step's end, and its checkpoints, ``HALT and ask human: `[A] Approve` | `[E] Edit```.

Pure (never imports the engine): a family's reader and the step chain's runtime
(:mod:`stepline.stepchain._checkpoints`, :mod:`stepline.stepchain._follow`) both read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stepline.stepchain._plan import Point
from stepline.stepchain._read import halt_menu

__all__ = ["Checkpoint", "before_menu", "checkpoints_in"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A ``HALT and ask human: `[A] Approve` | `[E] Edit``` line of a step file, its options (key, label) and what
    the step says to do for each (``- **E**: Apply changes, then return to CHECKPOINT``, ``- On **S**: …``).

    ``condition`` is the text it is nested under (``6. Token count check. If spec exceeds 1600 tokens:``, or the
    same line's ``If …,`` before ``HALT``): the checkpoint stops for the person only when that holds. None: it
    always does.
    """

    line: int
    text: str
    options: tuple[tuple[str, str], ...]
    handlers: dict[str, str]
    condition: str | None = None


_CHECKPOINT = re.compile(r"^(?:(?P<cond>(?:if|when|unless)\b.*?)[,:—-]\s*)?"
                         r"HALT and ask (?:the )?(?:human|user)\s*:\s*(?P<options>.+)$", re.I)
_OPTION = re.compile(r"`\[(\w)\]\s*([^`]+?)`")
_HANDLER = re.compile(r"^(\s*)-\s*(?:On\s+)?\*\*(\w)\*\*\s*:\s*(.*)$")
_LIST_MARK = re.compile(r"^(?:[-*]|\d+\.)\s+")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _parent_condition(lines: list[str], index: int) -> str | None:
    """The line a nested line hangs from (the nearest line above it indented less), when it states a condition."""
    depth = _indent(lines[index])
    for above in reversed(lines[:index]):
        if above.strip() and _indent(above) < depth:
            text = _LIST_MARK.sub("", above.strip())
            return text if re.search(r"\b(?:if|when|unless)\b", text, re.I) else None
    return None


def checkpoints_in(text: str) -> list[Checkpoint]:
    """The checkpoints of a step file: a ``HALT and ask human:`` line offering two or more ```[K] Label``` options,
    with their handlers; one nested under a condition (or opening with one) carries it as its ``condition``."""
    lines = text.splitlines()
    found: list[Checkpoint] = []
    for index, line in enumerate(lines):
        match = _CHECKPOINT.match(_LIST_MARK.sub("", line.strip()))
        options = tuple((k.upper(), label.strip()) for k, label in _OPTION.findall(match["options"])) if match else ()
        if match is None or len(options) < 2:
            continue
        nested = _indent(line) > 0 or bool(_LIST_MARK.match(line))
        condition = match["cond"].strip() if match["cond"] else _parent_condition(lines, index) if nested else None
        if nested and condition is None:
            continue  # nested under a line that states no condition the runtime could see: the executor's
        depth = _indent(line)
        handlers: dict[str, str] = {}
        current: str | None = None
        for follow in lines[index + 1:]:
            if follow.startswith("#") or (follow.strip() and _indent(follow) < depth):
                break
            handler = _HANDLER.match(follow)
            if handler and len(handler[1]) == depth and handler[2].upper() in dict(options):
                current = handler[2].upper()
                handlers[current] = handler[3].strip()
            elif current is not None and _indent(follow) > depth and follow.strip():
                handlers[current] += "\n" + follow.strip()
            elif follow.strip() and _indent(follow) <= depth:
                current = None
        found.append(Checkpoint(index + 1, line.strip(), options, handlers, condition))
    return found


def before_menu(points: list[Point], meta: dict[str, Any]) -> list[Point]:
    """The points before the menu (or halt) the chain presents at the step's end (``meta``'s ``menu`` or
    ``halts``): the menu, its handlers and what follows them are the chain's (:func:`~._chain.settle`)."""
    written = meta.get("menu") or halt_menu(meta.get("halts") or [], meta.get("points") or [])
    stop = min((int(o["line"]) for o in written if o.get("line")), default=None)
    return [p for p in points if stop is None or p.line < stop]
