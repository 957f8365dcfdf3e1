"""The notation the hand-checked plan table (plan_expectations.yaml) writes a point in, one line each:
``kind [target] [[K] label | [K] label] [if]`` — ``if`` when the point is under a condition."""

from __future__ import annotations

from stepline.stepchain._plan import Point


def notation(point: Point) -> str:
    parts = [point.kind.value]
    if point.target is not None:
        parts.append(point.target)
    if point.options:
        parts.append(" | ".join(f"[{o.key}] {o.label}" for o in point.options))
    if point.condition:
        parts.append("if")
    return " ".join(parts)
