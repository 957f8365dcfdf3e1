"""The points of a legacy workflow's steps (``<step>`` XML, ``## Step N`` markdown): what each step asks of the
person, where it jumps, what it invokes, read from its instruction tree into ``meta["points"]`` at load.

* ``<ask>`` is the person's turn: a choice when it (or the ``<output>`` just before it) lists the options, a
  confirmation when it asks yes / no, else a question;
* ``<template-output>`` stops in normal mode for the runtime's ``[a]`` / ``[c]`` / ``[p]`` / ``[y]`` menu;
* ``<action>``, ``<critical>`` and plain text are prose (:func:`stepline.stepchain._plan.read_points`: a HALT that
  waits for the person, "ask the user …", a file to load and follow);
* ``<goto step>`` is a route to that step, ``<invoke-workflow>`` a hand-over, ``<invoke-task>`` a route to the task.

A point under ``<check if>`` (or an ``if`` attribute) carries that condition.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stepline.stepchain import Option, Point, PointKind, Route, bulleted_choices, read_points

__all__ = ["legacy_points"]

_YES_NO = re.compile(r"(?i)\b(?:y/n|yes/no|\[y\]|\(y\)|yes or no)\b|\?\s*\[?y(?:es)?\s*/\s*n(?:o)?\]?")
_KEYED = re.compile(r"\[([A-Za-z0-9]{1,3})\]\s*([^\[\]\n,;]*)")
_LABEL_KEY = re.compile(r"([A-Z][\w-]*(?:\s+[\w-]+){0,3}?)\s*\[([A-Za-z0-9])\]")
_PROSE = ("action", "text", "critical", "note", "checkpoint")


def _and(outer: str | None, inner: str | None) -> str | None:
    if outer and inner:
        return f"{outer}; {inner}"
    return outer or inner


def _options(text: str, before: str) -> tuple[Option, ...]:
    """The options an ``<ask>`` offers: its ``[K] Label`` keys, else the numbered list of the output before it."""
    keyed = [(k, label.strip(" .:`*")) for k, label in _KEYED.findall(text)]
    keyed = [(k, label) for k, label in keyed if label and not re.match(r"(?i)^or\b", label)]
    if len(keyed) < 2:  # ``Approve [a], Edit [e], Skip [s]``: the label before its key
        keyed = [(k, label.strip()) for label, k in _LABEL_KEY.findall(text)]
    if len(keyed) >= 2:
        return tuple(Option(k.upper() if k.isalpha() else k, label, Route("local")) for k, label in keyed)
    lines = list(enumerate(before.splitlines(), start=1))
    start = next((i for i, (_, line) in enumerate(lines) if re.match(r"^\s*(?:\d{1,2}[.)]|[-*])\s", line)), None)
    if start is None:
        return ()
    listed = bulleted_choices(lines[start:])
    return tuple(Option(k, label, Route("local")) for k, label in listed.options) if len(listed.options) >= 2 else ()


def _ask(node: dict[str, Any], before: str, file: Path, condition: str | None) -> Point:
    text = str(node.get("text") or "")
    options = _options(text, before)
    kind = PointKind.CHOICE if options else PointKind.CONFIRM if _YES_NO.search(text) else PointKind.QUESTION
    return Point(kind=kind, text=text, file=file, line=int(node["line"]), options=options,
                 condition=_and(condition, node.get("if")))


def _walk(nodes: list[dict[str, Any]], file: Path, base: Path, condition: str | None) -> list[Point]:
    points: list[Point] = []
    before = ""
    nodes = [dict(node) for node in nodes]
    for index, node in enumerate(nodes):
        kind = node.get("type")
        here = _and(condition, node.get("if"))
        if kind == "check":
            points.extend(_walk(node.get("children") or [], file, base, _and(condition, node.get("condition"))))
        elif kind in ("step", "substep"):
            points.extend(_walk(node.get("children") or [], file, base, here))
        elif kind == "ask":
            points.append(_ask(node, before, file, condition))
        elif kind == "template-output":
            names = ", ".join(node.get("variables") or []) or "the section"
            points.append(Point(kind=PointKind.CHOICE, text=f"template-output {names}", file=file,
                                line=int(node["line"]), condition=here, options=(
                                    Option("A", "Advanced Elicitation", Route("elicit")),
                                    Option("C", "Continue", Route("goto")),
                                    Option("P", "Party Mode", Route("party")),
                                    Option("Y", "YOLO the rest of this document", Route("local")))))
        elif kind == "goto":
            target = f"step {node.get('step')}" if node.get("step") else str(node.get("anchor") or "")
            points.append(Point(kind=PointKind.ROUTE, text=str(node.get("text") or target), file=file,
                                line=int(node["line"]), target=target, section=target, condition=here))
        elif kind in ("invoke-workflow", "invoke-task"):
            raw = str(node.get("path") or node.get("text") or "")
            points.append(Point(kind=PointKind.HANDOVER if kind == "invoke-workflow" else PointKind.ROUTE,
                                text=raw, file=file, line=int(node["line"]), target=raw, condition=here))
        elif kind in _PROSE and node.get("text") and not node.get("_joined"):
            text = str(node["text"])
            following = nodes[index + 1] if index + 1 < len(nodes) else None
            if text.rstrip().endswith(":") and following is not None and following.get("type") == "text":
                text = f"{text}\n{following.get('text') or ''}"  # the list an action leads into is its own
                following["_joined"] = True
            found = read_points(text, file=file, first_line=int(node["line"]), base=base)
            points.extend(p if not here else Point(**{**_fields(p), "condition": _and(here, p.condition)})
                          for p in found)
            points.extend(_walk(node.get("children") or [], file, base, here))
        before = str(node.get("text") or "") if kind == "output" else ""
    return points


def _fields(point: Point) -> dict[str, Any]:
    return {name: getattr(point, name) for name in point.__dataclass_fields__}


def legacy_points(nodes: list[dict[str, Any]], *, file: Path, base: Path,
                  condition: str | None = None) -> list[dict[str, Any]]:
    """The points of one legacy step's instruction tree (``meta["nodes"]``), as plain data (:meth:`Point.to_json`);
    ``condition`` is the step's own (``<step if>``)."""
    return [p.to_json() for p in _walk(nodes, file, base, condition)]
