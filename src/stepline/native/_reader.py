"""Native workflow files: StepSpec YAML/JSON written for stepline directly, checked against the shipped schema."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from stepline._limits import read_limits
from stepline._yaml import find_yaml_line, load_yaml_lines
from stepline.errors import ReaderError
from stepline.formats import Diagnostic, parse_json, read_text
from stepline.model import NativeWorkflowFile, SourceRef, WorkflowSpec

__all__ = ["is_native_workflow", "lint_native", "load_native"]


_TOP_LEVEL_STEPS = re.compile(rb'^(steps:|\s*"steps"\s*:)', re.MULTILINE)
#: A JSON string (a key when a colon follows it) or a bracket: enough to follow a JSON file's nesting.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"\s*:?|[{}\[\]]')


def is_native_workflow(path: Path) -> bool:
    """A YAML/JSON file with a top-level ``steps`` key (BMAD's ``workflow.yaml`` has none).

    Read as bytes: a native file that is not UTF-8 is still one (and :func:`load_native` says where it breaks).
    """
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        return False
    try:
        with path.open("rb") as file:  # no further than the size limit: load_native refuses a bigger file
            data = file.read(read_limits().max_file_bytes + 1)
    except OSError:
        return False
    if _TOP_LEVEL_STEPS.search(data):
        return True
    return path.suffix.lower() == ".json" and _json_top_level_steps(data)


def _json_top_level_steps(data: bytes) -> bool:
    """Whether the JSON ``data`` has a ``steps`` key in its top-level object, wherever its lines break (a file
    written on one line: ``{"id": "x", "steps": [...]}``); a file that is not JSON is followed as far as it goes."""
    depth = 0
    for token in _JSON_TOKEN.finditer(data):
        text = token[0]
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and text.endswith(b":") and text[:-1].rstrip() == b'"steps"':
            return True
    return False


def _parse(path: Path) -> tuple[Any, str, dict[tuple[Any, ...], int] | None]:
    """The file's values, its text and (for YAML) the lines of its values near the top, parsed once."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise ReaderError("file not found", path=str(path)) from None
    except OSError as exc:
        raise ReaderError(f"cannot read the file ({exc.strerror or exc})", path=str(path)) from None
    if path.suffix.lower() == ".json":
        return parse_json(text, path), text, None
    data, lines = load_yaml_lines(text, path=str(path))
    return data, text, lines


def _step_lines(lines: dict[tuple[Any, ...], int] | None, text: str) -> dict[int, int]:
    """Line of each ``steps`` item, for diagnostics and sources that point at a step.

    ``lines`` are the YAML file's value lines; a JSON file's (None) are read now, as YAML (its lines are the same).
    """
    if lines is None:
        try:
            lines = load_yaml_lines(text, path="")[1]
        except ReaderError:
            return {}
    return {key[1]: line for key, line in lines.items() if len(key) == 2 and key[0] == "steps"}


def load_native(path: Path) -> WorkflowSpec:
    """Read a native workflow file; schema problems are :class:`ReaderError` naming file:line and the field."""
    data, text, lines = _parse(path)
    if not isinstance(data, dict):
        raise ReaderError("a workflow file is a mapping with id and steps", path=str(path), line=1)
    try:
        native = NativeWorkflowFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        line = find_yaml_line(text, tuple(loc))  # composed only now, for the line
        if line is None and len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
            line = _step_lines(lines, text).get(loc[1])
        where = ".".join(str(p) for p in loc)
        raise ReaderError(f"{where}: {first['msg']}", path=str(path), line=line,
                          hint="see the schema in stepline/model/workflow.schema.json") from None
    step_lines = _step_lines(lines, text)
    seen: set[str] = set()
    for i, step in enumerate(native.steps):
        if step.id in seen:
            raise ReaderError(f"duplicate step id {step.id!r}", path=str(path), line=step_lines.get(i))
        seen.add(step.id)
        step.source = SourceRef(path=str(path), line=step_lines.get(i))
    known = seen
    for i, step in enumerate(native.steps):
        for dep in step.depends_on:
            if dep not in known:
                raise ReaderError(f"step {step.id!r} depends on unknown step {dep!r}", path=str(path),
                                  line=step_lines.get(i))
    _check_cycles(native, path, step_lines)
    return WorkflowSpec(id=native.id, name=native.name or native.id, description=native.description,
                        format="native", source=SourceRef(path=str(path), line=1), root=str(path.parent),
                        variables=native.variables, steps=native.steps,
                        meta={"scheduling": "dag"} if any(s.depends_on for s in native.steps) else {})


def _check_cycles(native: NativeWorkflowFile, path: Path, lines: dict[int, int]) -> None:
    """Refuse a dependency cycle, naming it; depth first without recursion (a chain of 20,000 steps is fine)."""
    deps = {s.id: s.depends_on for s in native.steps}
    index = {s.id: i for i, s in enumerate(native.steps)}
    state: dict[str, int] = {}
    for start in deps:
        if start in state:
            continue
        state[start] = 1
        trail = [start]
        pending = [iter(deps[start])]
        while pending:
            dep = next(pending[-1], None)
            if dep is None:
                state[trail.pop()] = 2
                pending.pop()
            elif state.get(dep) == 1:
                cycle = [*trail[trail.index(dep):], dep]
                raise ReaderError("dependency cycle: " + " -> ".join(cycle), path=str(path),
                                  line=lines.get(index[trail[-1]]))
            elif state.get(dep) is None:
                state[dep] = 1
                trail.append(dep)
                pending.append(iter(deps[dep]))


def lint_native(path: Path) -> list[Diagnostic]:
    """Problems in a native workflow file, as diagnostics (empty when it loads cleanly)."""
    try:
        load_native(path)
    except ReaderError as exc:
        code = "yaml-syntax" if exc.detail.startswith(("YAML error", "JSON error")) else "native-schema"
        return [Diagnostic("error", code, exc.detail, str(path), exc.line)]
    return []
