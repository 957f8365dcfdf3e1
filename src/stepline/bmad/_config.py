"""BMAD configuration: ``workflow.yaml`` loading and variable resolution (SPEC R-F1).

A BMAD workflow's variables come from four places, in rising priority: the module ``config.yaml`` named by
``config_source`` (its values keep a literal ``{project-root}``), the keys of ``workflow.yaml`` (any of which
may be used as ``{key}`` inside another value), the flattened ``variables:`` mapping, and the caller's
overrides (``--var k=v``). ``"{config_source}:key"`` pulls one value from the module config and
``date: system-generated`` is today's date from :mod:`stepline.time`.

``{name}`` references are resolved here (:func:`stepline._placeholders.resolve`: dependency order, cycles
reported); ``{{name}}`` references are *runtime* variables the engine fills while the workflow runs, so they are
left in place. :func:`reference_diagnostics` words what resolving found; the micro-file reader uses it for
frontmatter variables too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stepline import time
from stepline._placeholders import (
    PROJECT_ROOT,
    Kind,
    Resolution,
    as_text,
    find,
    resolve,
    substitute,
    substitute_value,
    whole,
)
from stepline._yaml import YamlLoader, describe_yaml_error, yaml_errors
from stepline.errors import ReaderError
from stepline.formats import Diagnostic, read_text

__all__ = [
    "WorkflowConfig",
    "YamlDocument",
    "load_workflow_config",
    "load_yaml",
    "parse_yaml",
    "reference_diagnostics",
]

_SYSTEM_DATE = ("system-generated", "system-date", "system_generated")


def reference_diagnostics(resolution: Resolution, *, path: str, lines: Mapping[str, int] | None = None,
                          report_unknown: bool = True) -> list[Diagnostic]:
    """The problems :func:`~stepline._placeholders.resolve` found, as diagnostics with file:line.

    Args:
        resolution: what resolving a workflow's (or a frontmatter's) values gave.
        path: the file the values came from.
        lines: line of each key in that file.
        report_unknown: an ``unknown-variable`` warning per unknown name (else only cycles are errors).
    """
    lines = lines or {}
    found = [Diagnostic("error", "variable-cycle",
                        f"variables refer to each other in a cycle: {' -> '.join(cycle)}; break the cycle by giving "
                        "one of them a literal value", path, lines.get(cycle[-1]))
             for cycle in resolution.cycles]
    if report_unknown:
        found.extend(
            Diagnostic("warning", "unknown-variable",
                       f"{{{name}}} in '{key}' names no variable of the workflow or its config; it will be asked for "
                       f"at run time (define it in workflow.yaml or pass --var {name}=VALUE)", path, lines.get(key))
            for key, names in resolution.unresolved.items() for name in names)
    return found


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
    if not isinstance(value, str) or not value.strip() or find(value, {Kind.VAR}):
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
        pre = resolve({**raw, **overrides}, root_known)
        resolved_source = pre.values.get("config_source", source_value)
        config_path = resolve_path(resolved_source, project_root)
        if config_path is None:
            diagnostics.append(
                Diagnostic(
                    "error",
                    "config-source",
                    f"config_source {source_value!r} is not a file path"
                    + "".join(f"; nothing defines {p.text}: give it with --var {p.name}=PATH"
                              for p in find(str(resolved_source), {Kind.VAR})[:1]),
                    where,
                    doc.lines.get("config_source"),
                )
            )
        else:
            config, problem = _load_config(config_path)
            if problem is not None:
                code = "yaml-syntax" if config_path.is_file() else "missing-config"
                diagnostics.append(Diagnostic("error", code, problem, where, doc.lines.get("config_source")))
    config = {k: substitute_value(v, root_known, kinds={Kind.VAR}) for k, v in config.items()}

    # 2. "{config_source}:key" and system dates.
    def from_config(value: Any, key: str) -> Any:
        if isinstance(value, str):
            reference = whole(value.strip(), {Kind.CONFIG_SOURCE})
            if reference is not None:
                name = reference.name
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
            # inside a longer value too, a key the config lacks is a variable to ask for
            return substitute(value, lambda t: as_text(config[t.name]) if t.name in config else "{" + t.name + "}",
                              kinds={Kind.CONFIG_SOURCE})
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
    resolution = resolve(namespace, known)
    diagnostics.extend(reference_diagnostics(resolution, path=where, lines=_flat_lines(doc.lines, namespace)))

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
