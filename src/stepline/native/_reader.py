"""Native workflow files: StepSpec YAML/JSON written for stepline directly, checked against the shipped schema."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from stepline._yaml import YamlLoader, compose_yaml_text, find_yaml_line, yaml_errors
from stepline.errors import ReaderError
from stepline.formats._diagnostics import Diagnostic
from stepline.formats._files import read_text
from stepline.model import NativeWorkflowFile, SourceRef, WorkflowSpec

__all__ = ["is_native_workflow", "lint_native", "load_native"]


_TOP_LEVEL_STEPS = re.compile(rb'^(steps:|\s*"steps"\s*:)', re.MULTILINE)


def is_native_workflow(path: Path) -> bool:
    """A YAML/JSON file with a top-level ``steps`` key (BMAD's ``workflow.yaml`` has none).

    Read as bytes: a native file that is not UTF-8 is still one (and :func:`load_native` says where it breaks).
    """
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        return False
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return bool(_TOP_LEVEL_STEPS.search(data))


def _parse(path: Path) -> tuple[Any, str, yaml.Node | None]:
    """The file's values, its text and (for YAML) the node tree the values were built from, parsed once."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise ReaderError("file not found", path=str(path)) from None
    except OSError as exc:
        raise ReaderError(f"cannot read the file ({exc.strerror or exc})", path=str(path)) from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text), text, None
        except json.JSONDecodeError as exc:
            raise ReaderError(f"JSON error: {exc.msg}", path=str(path), line=exc.lineno) from None
        except RecursionError:
            raise ReaderError("JSON error: nested too deeply", path=str(path)) from None
    data, node = compose_yaml_text(text, path=str(path))
    return data, text, node


def _step_lines(root: yaml.Node | None, text: str) -> dict[int, int]:
    """Line of each ``steps`` item, for diagnostics and sources that point at a step.

    ``root`` is the YAML file's node tree; a JSON file (None) is composed now, as YAML (its lines are the same).
    """
    node: Any = root
    if node is None:
        try:
            node = yaml.compose(text, Loader=YamlLoader)
        except yaml_errors:
            return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    for key, value in node.value:
        if key.value == "steps" and isinstance(value, yaml.SequenceNode):
            return {i: item.start_mark.line + 1 for i, item in enumerate(value.value)}
    return {}


def load_native(path: Path) -> WorkflowSpec:
    """Read a native workflow file; schema problems are :class:`ReaderError` naming file:line and the field."""
    data, text, root = _parse(path)
    if not isinstance(data, dict):
        raise ReaderError("a workflow file is a mapping with id and steps", path=str(path), line=1)
    try:
        native = NativeWorkflowFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        source = root if root is not None else text  # a JSON file is composed only now, for the line
        line = find_yaml_line(source, tuple(loc))
        if line is None and len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
            line = _step_lines(root, text).get(loc[1])
        where = ".".join(str(p) for p in loc)
        raise ReaderError(f"{where}: {first['msg']}", path=str(path), line=line,
                          hint="see the schema in stepline/model/workflow.schema.json") from None
    lines = _step_lines(root, text)
    seen: set[str] = set()
    for i, step in enumerate(native.steps):
        if step.id in seen:
            raise ReaderError(f"duplicate step id {step.id!r}", path=str(path), line=lines.get(i))
        seen.add(step.id)
        step.source = SourceRef(path=str(path), line=lines.get(i))
    known = seen
    for i, step in enumerate(native.steps):
        for dep in step.depends_on:
            if dep not in known:
                raise ReaderError(f"step {step.id!r} depends on unknown step {dep!r}", path=str(path),
                                  line=lines.get(i))
    _check_cycles(native, path, lines)
    return WorkflowSpec(id=native.id, name=native.name or native.id, description=native.description,
                        format="native", source=SourceRef(path=str(path), line=1), root=str(path.parent),
                        variables=native.variables, steps=native.steps,
                        meta={"scheduling": "dag"} if any(s.depends_on for s in native.steps) else {})


def _check_cycles(native: NativeWorkflowFile, path: Path, lines: dict[int, int]) -> None:
    deps = {s.id: s.depends_on for s in native.steps}
    state: dict[str, int] = {}

    def visit(sid: str, trail: list[str]) -> None:
        state[sid] = 1
        for dep in deps[sid]:
            if state.get(dep) == 1:
                cycle = [*trail[trail.index(dep):], dep] if dep in trail else [sid, dep]
                index = next(i for i, s in enumerate(native.steps) if s.id == sid)
                raise ReaderError("dependency cycle: " + " -> ".join(cycle), path=str(path), line=lines.get(index))
            if state.get(dep) is None:
                visit(dep, [*trail, dep])
        state[sid] = 2

    for sid in deps:
        if sid not in state:
            visit(sid, [sid])


def lint_native(path: Path) -> list[Diagnostic]:
    """Problems in a native workflow file, as diagnostics (empty when it loads cleanly)."""
    try:
        load_native(path)
    except ReaderError as exc:
        code = "yaml-syntax" if exc.detail.startswith(("YAML error", "JSON error")) else "native-schema"
        return [Diagnostic("error", code, exc.detail, str(path), exc.line)]
    return []
