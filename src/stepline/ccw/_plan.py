"""A CCW session's execution strategy: IMPL_PLAN.md Section 4 and ``plan.json``.

IMPL_PLAN.md Section 4 ("Implementation Strategy") names an **Execution Model** (Sequential | Parallel |
Phased | TDD Cycles), lists **Parallelization Opportunities** and **Serialization Requirements**, and names
a **Critical Path**; a phased plan lists its phases as ``Phase N`` blocks with a ``Tasks:`` line. The 2026
``plan.json`` carries ``recommended_execution`` (a strategy, or a tool name such as ``Agent``).

Both sources may only make a run more sequential, so when they disagree the stricter model wins.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from stepline.errors import ReaderError
from stepline.formats import parse_json, read_text

ExecutionModel = Literal["sequential", "parallel", "phased", "tdd"]

#: How sequential each model is; the stricter of IMPL_PLAN.md and plan.json wins.
STRICTNESS: dict[ExecutionModel, int] = {"parallel": 0, "phased": 1, "tdd": 2, "sequential": 3}

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_LABEL = re.compile(r"^\s*\*\*(?P<label>[^*]+?)\s*:?\s*\*\*\s*:?\s*(?P<value>.*)$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?P<text>.+)$")
_MODEL_WORD = re.compile(r"\b(sequential|parallel|phased|tdd)\b", re.IGNORECASE)
_PHASE = re.compile(r"^\s*(?:#{1,6}\s*)?(?:[-*+]\s+)?(?:\*\*)?\s*Phase\s+(?P<n>\d+)\b", re.IGNORECASE)
_TASKS_LABEL = re.compile(r"\bTasks?\b[^:]*:", re.IGNORECASE)
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*(?:\.[0-9]+)*")


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One list item of a Section 4 block, with its line and the task ids it names (in order)."""

    text: str
    line: int
    task_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExecutionStrategy:
    """What the plan documents say about how to run the tasks (all fields empty when they say nothing)."""

    model: ExecutionModel | None = None
    impl_plan_model: ExecutionModel | None = None
    impl_plan_model_line: int | None = None
    plan_json_model: ExecutionModel | None = None
    parallelization: tuple[PlanItem, ...] = ()
    serialization: tuple[PlanItem, ...] = ()
    critical_path: tuple[str, ...] = ()
    phases: dict[str, int] = field(default_factory=dict)
    plan_json: dict[str, Any] = field(default_factory=dict)

    @property
    def serialization_groups(self) -> list[list[str]]:
        """Task-id groups that must not run at the same time (items naming at least two tasks)."""
        return [list(item.task_ids) for item in self.serialization if len(item.task_ids) > 1]


def task_ids_in(text: str, known: Collection[str]) -> tuple[str, ...]:
    """Return the known task ids ``text`` mentions, in order of first mention."""
    return tuple(dict.fromkeys(token for token in _TOKEN.findall(text) if token in known))


def model_from_text(value: str) -> ExecutionModel | None:
    """Return the model a value names (``"Phased (parallel inside)"`` → phased); None for a template."""
    if "|" in value:
        return None
    match = _MODEL_WORD.search(value)
    return match[1].lower() if match else None  # type: ignore[return-value]


def _section_four(lines: list[str]) -> tuple[int, int] | None:
    for start, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading and (re.match(r"4\b[.)]?", heading[2]) or "implementation strategy" in heading[2].lower()):
            level = len(heading[1])
            for end in range(start + 1, len(lines)):
                other = _HEADING.match(lines[end])
                if other and len(other[1]) <= level:
                    return start, end
            return start, len(lines)
    return None


def _labelled_blocks(lines: list[str], start: int, end: int) -> dict[str, list[tuple[str, int]]]:
    """Map each bold label (lower case) to its value and following list items as ``(text, line)``."""
    blocks: dict[str, list[tuple[str, int]]] = {}
    current: list[tuple[str, int]] | None = None
    for index in range(start, end):
        line = lines[index]
        if _HEADING.match(line):
            current = None
            continue
        label = _LABEL.match(line)
        if label:
            current = blocks.setdefault(label["label"].strip().lower(), [])
            if label["value"].strip():
                current.append((label["value"].strip(), index + 1))
            continue
        item = _ITEM.match(line)
        if item and current is not None:
            current.append((item["text"].strip(), index + 1))
    return blocks


def _phases(lines: list[str], known: Collection[str]) -> dict[str, int]:
    """Map task ids to the ``Phase N`` block naming them on a ``Tasks:`` line (else anywhere in the block)."""
    phases: dict[str, int] = {}
    blocks: list[tuple[int, list[str], list[str]]] = []  # (phase, ids on Tasks lines, other ids)
    for line in lines:
        phase = _PHASE.match(line)
        heading = _HEADING.match(line)
        if phase:
            blocks.append((int(phase["n"]), [], []))
            line = line[phase.end():]
        elif heading and len(heading[1]) <= 2:
            blocks.append((0, [], []))
            continue
        if blocks and blocks[-1][0]:
            target = blocks[-1][1] if _TASKS_LABEL.search(line) else blocks[-1][2]
            target.extend(task_ids_in(line, known))
    for number, explicit, mentioned in blocks:
        for task_id in explicit or mentioned:
            if number:
                phases.setdefault(task_id, number)
    return phases


def parse_impl_plan(text: str, known: Collection[str]) -> ExecutionStrategy:
    """Read Section 4 of an IMPL_PLAN.md (the whole file when it has no such section) and its phases."""
    lines = text.splitlines()
    span = _section_four(lines) or (0, len(lines))
    blocks = _labelled_blocks(lines, *span)
    if "execution model" not in blocks:
        blocks = {**_labelled_blocks(lines, 0, len(lines)), **blocks}

    def items(label: str) -> tuple[PlanItem, ...]:
        return tuple(PlanItem(text, line, task_ids_in(text, known)) for text, line in blocks.get(label, []))

    model = model_line = None
    for value, line in blocks.get("execution model", [])[:1]:
        model, model_line = model_from_text(value), line
    critical = tuple(dict.fromkeys(task_id for item in items("critical path") for task_id in item.task_ids))
    return ExecutionStrategy(
        model=model,
        impl_plan_model=model,
        impl_plan_model_line=model_line if model else None,
        parallelization=items("parallelization opportunities"),
        serialization=items("serialization requirements"),
        critical_path=critical,
        phases=_phases(lines, known),
    )


def read_plan_json(path: Path) -> dict[str, Any]:
    """Read ``plan.json``; a syntax error or a non-object is a ReaderError at the offending line."""
    data = parse_json(read_text(path), path, what="plan.json does not parse")
    if not isinstance(data, dict):
        raise ReaderError("plan.json must be an object", path=str(path), line=1)
    return data


def plan_json_model(plan: dict[str, Any]) -> ExecutionModel | None:
    """Return the strategy ``recommended_execution`` names (tool names such as ``Agent`` name none)."""
    value = plan.get("recommended_execution")
    model = model_from_text(value) if isinstance(value, str) else None
    metadata = plan.get("_metadata")
    if model is None and isinstance(metadata, dict) and metadata.get("plan_type") == "tdd":
        return "tdd"
    return model


def combine(impl_plan: ExecutionStrategy, plan: dict[str, Any] | None) -> ExecutionStrategy:
    """Merge plan.json into the IMPL_PLAN.md strategy; the stricter execution model wins."""
    if plan is None:
        return impl_plan
    from_json = plan_json_model(plan)
    model = impl_plan.impl_plan_model
    if from_json is not None and (model is None or STRICTNESS[from_json] > STRICTNESS[model]):
        model = from_json
    keys = ("recommended_execution", "complexity", "task_ids", "task_count", "estimated_time")
    summary: dict[str, Any] = {key: plan[key] for key in keys if key in plan}
    return ExecutionStrategy(
        model=model,
        impl_plan_model=impl_plan.impl_plan_model,
        impl_plan_model_line=impl_plan.impl_plan_model_line,
        plan_json_model=from_json,
        parallelization=impl_plan.parallelization,
        serialization=impl_plan.serialization,
        critical_path=impl_plan.critical_path,
        phases=impl_plan.phases,
        plan_json=summary,
    )
