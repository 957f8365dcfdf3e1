"""BMAD configuration: ``workflow.yaml`` loading and variable resolution (SPEC R-F1).

A BMAD workflow's variables come from four places, in rising priority: the module ``config.yaml`` named by
``config_source`` (its values keep a literal ``{project-root}``), the keys of ``workflow.yaml`` (any of which
may be used as ``{key}`` inside another value), the flattened ``variables:`` mapping, and the caller's
overrides (``--var k=v``). ``"{config_source}:key"`` pulls one value from the module config and
``date: system-generated`` is today's date from :mod:`stepline.time`.

``{name}`` references are resolved here, in dependency order, with cycles reported; ``{{name}}``
references are *runtime* variables the engine fills while the workflow runs, so they are listed
(:func:`find_placeholders`) but left in place. The helpers :func:`find_placeholders`, :func:`substitute`
and :func:`resolve_references` are format-neutral: the micro-file reader uses them for frontmatter
variables too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stepline import time
from stepline._yaml import YamlLoader, describe_yaml_error, yaml_errors
from stepline.errors import ReaderError
from stepline.formats._diagnostics import Diagnostic
from stepline.formats._files import read_text

__all__ = [
    "Placeholder",
    "Resolution",
    "WorkflowConfig",
    "YamlDocument",
    "find_placeholders",
    "load_workflow_config",
    "load_yaml",
    "parse_yaml",
    "resolve_references",
    "substitute",
    "unresolved_names",
]

_PLACEHOLDER = re.compile(r"\{\{\s*(?P<runtime>[A-Za-z_][\w.-]*)\s*\}\}|(?<!\{)\{(?P<static>[A-Za-z_][\w-]*)\}(?!\})")
_CONFIG_REF = re.compile(r"\{config_source\}:(?P<key>[A-Za-z_][\w-]*)")
_SYSTEM_DATE = ("system-generated", "system-date", "system_generated")

#: Name of the variable that holds the project root in every BMAD path.
PROJECT_ROOT = "project-root"


@dataclass(frozen=True, slots=True)
class Placeholder:
    """One ``{name}`` or ``{{name}}`` reference inside a string.

    ``runtime`` is true for ``{{name}}`` (filled by the engine while the workflow runs).
    """

    name: str
    runtime: bool
    start: int
    end: int


def find_placeholders(text: str) -> list[Placeholder]:
    """Return every ``{name}`` / ``{{name}}`` reference in ``text``, in order."""
    found: list[Placeholder] = []
    for match in _PLACEHOLDER.finditer(text):
        runtime = match.group("runtime")
        name = runtime if runtime is not None else match.group("static")
        found.append(Placeholder(name=name, runtime=runtime is not None, start=match.start(), end=match.end()))
    return found


def unresolved_names(text: str, known: Iterable[str] = (), *, runtime: bool = True) -> set[str]:
    """Return the names referenced in ``text`` that are not in ``known``.

    Args:
        text: any string.
        known: names that have a value.
        runtime: include ``{{name}}`` references too (else only ``{name}``).
    """
    names = set(known)
    return {p.name for p in find_placeholders(text) if (runtime or not p.runtime) and p.name not in names}


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def substitute(text: str, values: Mapping[str, Any], *, runtime: bool = False) -> Any:
    """Replace the ``{name}`` references of ``text`` whose names are in ``values``; leave the rest in place.

    A string that is exactly one reference (``"{flag}"``) becomes the referenced value with its type kept.

    Args:
        text: the string to fill.
        values: known values; mappings and lists are never spliced into text.
        runtime: also replace ``{{name}}`` references (the engine does this while running).
    """

    def fill(match: re.Match[str]) -> str:
        name = match.group("runtime") if match.group("runtime") is not None else match.group("static")
        if match.group("runtime") is not None and not runtime:
            return match.group(0)
        if name not in values or isinstance(values[name], (dict, list)):
            return match.group(0)
        return _as_text(values[name])

    whole = _PLACEHOLDER.fullmatch(text)
    if whole is not None:
        name = whole.group("runtime") if whole.group("runtime") is not None else whole.group("static")
        if (
            (whole.group("runtime") is None or runtime)
            and name in values
            and not isinstance(values[name], (dict, list))
        ):
            return values[name]
    return _PLACEHOLDER.sub(fill, text)


def _references(value: Any) -> set[str]:
    """Names of the ``{name}`` references anywhere inside a (nested) value."""
    if isinstance(value, str):
        return {p.name for p in find_placeholders(value) if not p.runtime}
    if isinstance(value, dict):
        return set().union(*(_references(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_references(v) for v in value)) if value else set()
    return set()


def _fill(value: Any, known: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        return substitute(value, known)
    if isinstance(value, dict):
        return {k: _fill(v, known) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, known) for v in value]
    return value


@dataclass(slots=True)
class Resolution:
    """The result of :func:`resolve_references`.

    Attributes:
        values: every input value with its resolvable references filled in.
        unresolved: for each key, the ``{name}`` references no value was found for (left in place).
        cycles: each reference cycle found, as the list of keys around it.
        diagnostics: one per cycle and per unknown name, with file:line when a path was given.
    """

    values: dict[str, Any]
    unresolved: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cycles: list[list[str]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def resolve_references(
    values: Mapping[str, Any],
    known: Mapping[str, Any] | None = None,
    *,
    path: str = "<values>",
    lines: Mapping[str, int] | None = None,
    report_unknown: bool = True,
) -> Resolution:
    """Fill the ``{key}`` references between ``values`` in dependency order.

    A value may refer to any other key of ``values`` or of ``known`` (``values`` wins); referring to a key
    that itself refers back is a cycle, reported once, its values left unresolved. Unknown names stay in
    place and are listed (the engine asks a person for them). ``{{name}}`` runtime references are untouched.

    Args:
        values: the mapping to resolve (nested dicts and lists are resolved inside).
        known: values available to references but not resolved themselves (``project-root``, a config).
        path: the file the values came from, for diagnostics.
        lines: line of each key in that file, for diagnostics.
        report_unknown: emit an ``unknown-variable`` warning per unknown name.
    """
    known = known or {}
    lines = lines or {}
    result = Resolution(values={})
    done: dict[str, Any] = {}
    state: dict[str, int] = {}  # 1 = in progress, 2 = done
    in_cycle: set[str] = set()

    def visit(key: str, stack: list[str]) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            cycle = [*stack[stack.index(key) :], key]
            result.cycles.append(cycle)
            in_cycle.update(cycle)
            result.diagnostics.append(
                Diagnostic(
                    "error",
                    "variable-cycle",
                    f"variables refer to each other in a cycle: {' -> '.join(cycle)}; "
                    "break the cycle by giving one "
                    "of them a literal value",
                    path,
                    lines.get(key),
                )
            )
            return
        state[key] = 1
        stack.append(key)
        for name in sorted(_references(values[key])):
            if name in values and not _asks_for_itself(key, values[key]):
                visit(name, stack)
        stack.pop()
        state[key] = 2
        scope = {**known, **{k: v for k, v in done.items() if k not in in_cycle}}
        done[key] = values[key] if key in in_cycle else _fill(values[key], scope)

    for key in values:
        visit(key, [])
    for key in values:
        result.values[key] = done[key]
        missing = sorted(
            n
            for n in _references(done[key])
            if (n not in values and n not in known) or _asks_for_itself(key, done[key])
        )
        if missing:
            result.unresolved[key] = tuple(missing)
            if report_unknown:
                for name in missing:
                    result.diagnostics.append(
                        Diagnostic(
                            "warning",
                            "unknown-variable",
                            f"{{{name}}} in '{key}' names no variable of the workflow or its config; "
                            "it will be "
                            "asked for at run time (define it in workflow.yaml or pass --var "
                            f"{name}=VALUE)",
                            path,
                            lines.get(key),
                        )
                    )
    return result


def _asks_for_itself(key: str, value: Any) -> bool:
    """``key: "{key}"`` is not a cycle: it is a value to ask for (a config key that was not found)."""
    return isinstance(value, str) and value.strip() == "{" + key + "}"


@dataclass(slots=True)
class YamlDocument:
    """A parsed YAML document with the line of each mapping key (dotted paths: ``variables.story_dir``)."""

    data: Any
    lines: dict[str, int]


def parse_yaml(text: str, *, path: str, first_line: int = 1) -> YamlDocument:
    """Parse YAML text, recording key lines; a syntax error is a :class:`ReaderError` naming file:line.

    Args:
        text: the YAML source.
        path: the file it came from, for messages.
        first_line: the file line of ``text``'s first line (frontmatter starts below ``---``).
    """
    loader = YamlLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml_errors as exc:
        detail, at = describe_yaml_error(exc, text)
        line = at + first_line - 1 if at is not None else None
        raise ReaderError(
            f"YAML syntax error: {detail}",
            path=path,
            line=line,
            hint="quote values that contain ':', '{', '#' or an apostrophe",
        ) from None
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    if node is not None:
        _key_lines(node, "", lines, first_line, depth=0)
    return YamlDocument(data=data, lines=lines)


def _key_lines(node: yaml.Node, prefix: str, lines: dict[str, int], first_line: int, depth: int) -> None:
    if not isinstance(node, yaml.MappingNode) or depth > 3:
        return
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            dotted = f"{prefix}{key_node.value}"
            lines.setdefault(dotted, key_node.start_mark.line + first_line)
            _key_lines(value_node, dotted + ".", lines, first_line, depth + 1)


def load_yaml(path: Path) -> YamlDocument:
    """Read and parse a YAML file; a missing, unreadable or not UTF-8 file is a :class:`ReaderError`."""
    try:
        text = read_text(path)
    except OSError as exc:
        raise ReaderError(
            f"cannot read {path.name}: {exc.strerror or exc}", path=str(path), hint="check the path"
        ) from exc
    return parse_yaml(text, path=str(path))


@dataclass(slots=True)
class WorkflowConfig:
    """A ``workflow.yaml`` with every reference resolved that can be resolved at load time.

    Attributes:
        path: the ``workflow.yaml`` file.
        project_root: the folder ``{project-root}`` stands for.
        document: the whole file, resolved, keeping its shape (``input_file_patterns``, ``web_bundle``…).
        values: the flat variables: module config keys, then workflow keys, then ``variables:`` entries,
            then the caller's overrides, all resolved.
        lines: the line of each key in ``workflow.yaml``.
        config_path: the resolved ``config_source`` file, if the workflow names one.
        config: the module config as loaded (``{project-root}`` resolved).
        unresolved: per key, the ``{name}`` references left (asked for at run time).
        diagnostics: problems found (cycles, unknown names, a missing config file…).
    """

    path: Path
    project_root: Path
    document: dict[str, Any]
    values: dict[str, Any]
    lines: dict[str, int]
    config_path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    unresolved: dict[str, tuple[str, ...]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def line(self, key: str) -> int | None:
        """Return the line of ``key`` (a dotted path) in ``workflow.yaml``, if known."""
        return self.lines.get(key)

    def path_of(self, key: str) -> Path | None:
        """Return the resolved value of ``key`` as a path (relative paths start at the project root).

        None when the key is absent, not a string, ``false``, or still holds an unresolved ``{name}``.
        """
        return resolve_path(self.document.get(key), self.project_root)


def resolve_path(value: Any, project_root: Path) -> Path | None:
    """Turn a resolved path value into a Path; None if it is not a usable path string."""
    if not isinstance(value, str) or not value.strip() or any(not p.runtime for p in find_placeholders(value)):
        return None
    candidate = Path(value.strip())
    return candidate if candidate.is_absolute() else project_root / candidate


def load_workflow_config(
    path: Path, *, project_root: Path, variables: Mapping[str, Any] | None = None,
    parsed: YamlDocument | None = None,
) -> WorkflowConfig:
    """Load ``workflow.yaml`` and resolve its variables.

    Only a file that cannot be read or parsed raises (:class:`ReaderError` with file:line); every other
    problem (missing ``config_source`` file, cycle, unknown name) is a diagnostic on the result, so
    ``stepline validate`` can report them all. Callers that need a usable config check for errors.

    Args:
        path: the ``workflow.yaml`` file.
        project_root: the folder ``{project-root}`` stands for.
        variables: caller overrides (``--var k=v``), applied last.
        parsed: the keys, when they come from elsewhere than ``path`` read as YAML (a markdown workflow's).
    """
    doc = parsed or load_yaml(path)
    where = str(path)
    if not isinstance(doc.data, dict):
        raise ReaderError(
            "workflow.yaml must be a mapping of keys to values",
            path=where,
            line=1,
            hint="start the file with 'name: …'",
        )
    raw: dict[str, Any] = {str(k): v for k, v in doc.data.items()}
    diagnostics: list[Diagnostic] = []
    root_known: dict[str, Any] = {PROJECT_ROOT: str(project_root)}
    overrides = dict(variables or {})

    # 1. config_source, resolved on its own (it may only refer to {project-root} and plain keys).
    config_path: Path | None = None
    config: dict[str, Any] = {}
    if "config_source" in raw or "config_source" in overrides:
        source_value = overrides.get("config_source", raw.get("config_source"))
        pre = resolve_references({**raw, **overrides}, root_known, path=where, lines=doc.lines, report_unknown=False)
        resolved_source = pre.values.get("config_source", source_value)
        config_path = resolve_path(resolved_source, project_root)
        if config_path is None:
            diagnostics.append(
                Diagnostic(
                    "error",
                    "config-source",
                    f"config_source {source_value!r} is not a file path"
                    + "".join(f"; nothing defines {{{name}}}: give it with --var {name}=PATH"
                              for name in re.findall(r"\{([A-Za-z_][\w-]*)\}", str(resolved_source))[:1]),
                    where,
                    doc.lines.get("config_source"),
                )
            )
        else:
            config, problem = _load_config(config_path)
            if problem is not None:
                code = "yaml-syntax" if config_path.is_file() else "missing-config"
                diagnostics.append(Diagnostic("error", code, problem, where, doc.lines.get("config_source")))
    config = {k: _fill(v, root_known) for k, v in config.items()}

    # 2. "{config_source}:key" and system dates.
    def from_config(value: Any, key: str) -> Any:
        if isinstance(value, str):
            whole = _CONFIG_REF.fullmatch(value.strip())
            if whole is not None:
                name = whole.group("key")
                if name in config:
                    return config[name]
                if config_path is not None and config:
                    diagnostics.append(
                        Diagnostic(
                            "warning",
                            "config-key",
                            f"'{key}' reads {name!r} from {config_path.name}, which has no "
                            f"such key; it will be asked for at run time (add {name} to the module config)",
                            where,
                            doc.lines.get(key),
                        )
                    )
                return "{" + name + "}"
            return _CONFIG_REF.sub(lambda m: _as_text(config.get(m.group("key"), m.group(0))), value)
        if isinstance(value, dict):
            return {k: from_config(v, f"{key}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [from_config(v, key) for v in value]
        return value

    prepared: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "date" and _is_system_date(value):
            if isinstance(value, dict):
                diagnostics.append(
                    Diagnostic(
                        "warning",
                        "yaml-mapping",
                        "date is written '{ system-date }', which YAML reads as a "
                        "mapping; treated as 'system-generated' (write date: system-generated)",
                        where,
                        doc.lines.get("date"),
                    )
                )
            prepared[key] = time.now().date().isoformat()
        else:
            prepared[key] = from_config(value, key)

    # 3. One namespace: workflow keys, flattened `variables:` entries, caller overrides.
    namespace = dict(prepared)
    nested = prepared.get("variables")
    if isinstance(nested, dict):
        for key, value in nested.items():
            namespace.setdefault(str(key), value)
    namespace.update(overrides)
    known = {**config, **root_known}
    resolution = resolve_references(namespace, known, path=where, lines=_flat_lines(doc.lines, namespace))
    diagnostics.extend(resolution.diagnostics)

    values = {**config, **resolution.values}
    document = {key: resolution.values.get(key, value) for key, value in prepared.items()}
    if isinstance(nested, dict):
        document["variables"] = {str(k): resolution.values.get(str(k), v) for k, v in nested.items()}
        values["variables"] = document["variables"]
    return WorkflowConfig(
        path=path,
        project_root=project_root,
        document=document,
        values=values,
        lines=doc.lines,
        config_path=config_path,
        config=config,
        unresolved=resolution.unresolved,
        diagnostics=diagnostics,
    )


def _flat_lines(lines: Mapping[str, int], namespace: Mapping[str, Any]) -> dict[str, int]:
    flat = dict(lines)
    for key in namespace:
        if key not in flat and f"variables.{key}" in lines:
            flat[key] = lines[f"variables.{key}"]
    return flat


def _is_system_date(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip() in _SYSTEM_DATE
    if isinstance(value, dict) and len(value) == 1:
        return str(next(iter(value))).strip() in _SYSTEM_DATE
    return False


def _load_config(path: Path) -> tuple[dict[str, Any], str | None]:
    """Load a module config file; return its mapping and a problem message (or None)."""
    if not path.is_file():
        return {}, (f"config_source {path} does not exist; install the module first (stepline install) or fix the path")
    try:
        doc = load_yaml(path)
    except ReaderError as exc:
        return {}, f"config_source {exc.message}"
    if doc.data is None:
        return {}, None
    if not isinstance(doc.data, dict):
        return {}, f"config_source {path} is not a mapping of keys to values"
    return {str(k): v for k, v in doc.data.items()}, None
