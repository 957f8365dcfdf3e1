"""The ``{x}``/``{{x}}`` placeholder language of BMAD workflows and Agent Skills, in one place (R-F1, R-F8).

Tokens (:class:`Kind`): ``{name}`` a variable (a config or workflow key, ``{project-root}``, ``{installed_path}``);
``{{name}}`` a runtime variable, filled while the workflow runs; ``{{.key}}`` and ``{{config.a.b}}`` central-config
values (render_skill.py's); ``{workflow.name}``/``{agent.name}`` a skill's customization; ``[[bmad-snapshot:f.md]]``
a file of the skill; ``{config_source}:key`` a value of a BMAD module's config; ``{{ free text }}`` a template's
slot. Not tokens: ``${name}``/``${{ x }}`` (shell, JavaScript, CI expressions), braces around anything else (JSON,
code).

:func:`find` lists tokens with their lines (lint), :func:`resolve` fills references between values in dependency
order (cycles reported), and :func:`substitute` is the one function that fills text. Its policies: which kinds;
names to ``keep``; ``nested`` (a value's own tokens filled too — ``{project-root}/docs`` becomes a path once, a
cycle stays as written) or not (the value inserted as it is: a config file keeps ``{project-root}``); unknown
tokens kept, or ``strict`` (:class:`Unresolved` names what is left). A value that is None, a mapping or a list
is unknown: never spliced into text. Booleans are written ``true``/``false``, as BMAD's YAML has them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "DOUBLE_BRACED",
    "PROJECT_ROOT",
    "VARIABLES",
    "Kind",
    "Placeholder",
    "Resolution",
    "Unresolved",
    "as_text",
    "find",
    "resolve",
    "substitute",
    "substitute_value",
    "whole",
]

#: The variable that holds the project root in every BMAD path.
PROJECT_ROOT = "project-root"


class Kind(StrEnum):
    """What a token is."""

    VAR = "var"  # {name}
    RUNTIME = "runtime"  # {{name}}
    CONFIG_KEY = "config-key"  # {{.key}}
    CONFIG_PATH = "config-path"  # {{config.a.b}}
    CUSTOM = "custom"  # {workflow.name}, {agent.name}: name is "workflow.name"
    SNAPSHOT = "snapshot"  # [[bmad-snapshot:file.md]]: name is the file
    CONFIG_SOURCE = "config-source"  # {config_source}:key: name is the key
    SLOT = "slot"  # {{ anything else }}: a template's hole


#: The BMAD variables: ``{name}`` and ``{{name}}``.
VARIABLES: frozenset[Kind] = frozenset({Kind.VAR, Kind.RUNTIME})
#: Every ``{{…}}``: what a generated document must not still hold.
DOUBLE_BRACED: frozenset[Kind] = frozenset({Kind.RUNTIME, Kind.SLOT, Kind.CONFIG_KEY, Kind.CONFIG_PATH})

_NAME = r"[A-Za-z_][\w-]*"
_BRACED = (r"\{(?:(?<!\$\{)\{\s*(?:\.(?P<config_key>[A-Za-z0-9_]+)|config\.(?P<config_path>[A-Za-z0-9_.-]+)"
           rf"|(?P<runtime>[A-Za-z_][\w.-]*)|(?P<slot>[^{{}}]*?))\s*\}}\}}"
           rf"|(?<![{{$]\{{)config_source\}}:(?P<config_source>{_NAME})"
           rf"|(?<![{{$]\{{)(?:(?P<custom>(?:workflow|agent)\.[A-Za-z0-9_.-]+)|(?P<var>{_NAME}))\}}(?!\}}))")
#: One pattern for every token; text without ``[[`` is scanned for braces alone, ten times as fast.
_TOKEN = re.compile(r"\[\[bmad-snapshot:(?P<snapshot>[A-Za-z0-9_./-]+\.md)\]\]|" + _BRACED)
_BRACED_TOKEN = re.compile(_BRACED)
_GROUPS = {"snapshot": Kind.SNAPSHOT, "config_key": Kind.CONFIG_KEY, "config_path": Kind.CONFIG_PATH,
           "runtime": Kind.RUNTIME, "slot": Kind.SLOT, "custom": Kind.CUSTOM, "var": Kind.VAR,
           "config_source": Kind.CONFIG_SOURCE}
#: Nested values deeper than this are a cycle (``a: "{b}"``, ``b: "{a}"``): what is left stays as written.
_MAX_DEPTH = 8


@dataclass(frozen=True, slots=True)
class Placeholder:
    """One token in a text: its kind, the name it refers to, where it is (``line`` counts from 1)."""

    kind: Kind
    name: str
    start: int
    end: int
    text: str
    line: int = 1


def _token(match: re.Match[str], line: int = 1) -> Placeholder:
    group = match.lastgroup or "slot"  # every alternative of _TOKEN has its group
    return Placeholder(_GROUPS[group], (match[group] or "").strip(), match.start(), match.end(), match[0], line)


def find(text: str, kinds: Collection[Kind] = VARIABLES) -> list[Placeholder]:
    """Every token of ``kinds`` in ``text``, in order, each with its line."""
    found: list[Placeholder] = []
    line, counted = 1, 0
    for match in _scanner(text).finditer(text):
        if _GROUPS[match.lastgroup or "slot"] in kinds:
            line += text.count("\n", counted, match.start())
            counted = match.start()
            found.append(_token(match, line))
    return found


def _scanner(text: str) -> re.Pattern[str]:
    return _TOKEN if "[[" in text else _BRACED_TOKEN


def whole(text: str, kinds: Collection[Kind] = VARIABLES) -> Placeholder | None:
    """The token of ``kinds`` that is the whole of ``text`` (``"{flag}"``), else None."""
    match = _TOKEN.fullmatch(text)
    token = _token(match) if match is not None else None
    return token if token is not None and token.kind in kinds else None


class Unresolved(ValueError):
    """Tokens a strict :func:`substitute` could not fill (``tokens``: as written, in order)."""

    def __init__(self, tokens: list[Placeholder]) -> None:
        self.tokens = tokens
        super().__init__("no value for " + ", ".join(dict.fromkeys(t.text for t in tokens)))


def as_text(value: Any) -> str:
    """A scalar as it reads in text: ``true``/``false`` for booleans (YAML's), ``""`` for None."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


Values = Mapping[str, Any] | Callable[[Placeholder], Any]


def _lookup(values: Values, token: Placeholder) -> Any:
    value = values(token) if callable(values) else values.get(token.name)
    return None if isinstance(value, dict | list) else value


def substitute(text: str, values: Values, *, kinds: Collection[Kind] = VARIABLES, keep: Collection[str] = (),
               nested: bool = False, strict: bool = False) -> str:
    """Fill the tokens of ``kinds`` in ``text`` from ``values``; the others, and unknown ones, stay as written.

    Args:
        text: the text to fill.
        values: values by name, or a function giving a token's value (None: unknown).
        kinds: the kinds of token to fill.
        keep: names never filled (sections still to generate; ``{value}`` in an install template).
        nested: fill the tokens of an inserted value too (a cycle stops after 8 levels, left as written).
        strict: raise :class:`Unresolved` naming the tokens of ``kinds`` left in the result.
    """
    filled = _fill(text, values, kinds, keep, _MAX_DEPTH if nested else 0)
    if strict and (left := find(filled, kinds)):
        raise Unresolved(left)
    return filled


def _fill(text: str, values: Values, kinds: Collection[Kind], keep: Collection[str], depth: int) -> str:
    if "{" not in text and "[[" not in text:
        return text

    def fill(match: re.Match[str]) -> str:
        if _GROUPS[match.lastgroup or "slot"] not in kinds:
            return match[0]
        token = _token(match)
        if token.name in keep:
            return match[0]
        value = _lookup(values, token)
        if value is None:
            return match[0]
        inserted = as_text(value)
        return _fill(inserted, values, kinds, keep, depth - 1) if depth > 0 else inserted

    return _scanner(text).sub(fill, text)


def substitute_value(value: Any, values: Values, *, kinds: Collection[Kind] = VARIABLES,
                     keep: Collection[str] = ()) -> Any:
    """:func:`substitute` inside a value (mappings and lists filled item by item, other values unchanged).

    A string that is exactly one known token (``"{flag}"``) becomes the value itself, its type kept.
    """
    if isinstance(value, dict):
        return {k: substitute_value(v, values, kinds=kinds, keep=keep) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_value(v, values, kinds=kinds, keep=keep) for v in value]
    if not isinstance(value, str):
        return value
    token = whole(value, kinds)
    if token is not None and token.name not in keep and (typed := _lookup(values, token)) is not None:
        return typed
    return substitute(value, values, kinds=kinds, keep=keep)


def _references(value: Any, kinds: Collection[Kind]) -> set[str]:
    """The names a (nested) value refers to."""
    if isinstance(value, str):
        return {p.name for p in find(value, kinds)}
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return set().union(*(_references(v, kinds) for v in items))


def _asks_for_itself(key: str, value: Any) -> bool:
    """``key: "{key}"`` is not a cycle: it is a value to ask for (a config key that was not found)."""
    return isinstance(value, str) and value.strip() == "{" + key + "}"


@dataclass(slots=True)
class Resolution:
    """What :func:`resolve` made of a mapping.

    Attributes:
        values: every value with the references that could be filled, filled.
        unresolved: per key, the names no value was found for (left as written).
        cycles: each cycle of references, as the keys around it (its values left as written).
    """

    values: dict[str, Any]
    unresolved: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cycles: list[list[str]] = field(default_factory=list)


def resolve(values: Mapping[str, Any], known: Mapping[str, Any] | None = None, *,
            kinds: Collection[Kind] = frozenset({Kind.VAR})) -> Resolution:
    """Fill the references between ``values`` in dependency order.

    A value may refer to any key of ``values`` or of ``known`` (``values`` wins); values referring to each other
    in a circle are a cycle, reported once and left as written. ``{{name}}`` runtime references are untouched
    unless ``kinds`` says otherwise.

    Args:
        values: the mapping to resolve (inside nested mappings and lists too).
        known: values references may use that are not resolved themselves (``project-root``, a module config).
        kinds: the kinds of token that are references.
    """
    known = known or {}
    result = Resolution(values={})
    done: dict[str, Any] = {}
    state: dict[str, int] = {}  # 1 = in progress, 2 = done
    in_cycle: set[str] = set()

    def visit(key: str, stack: list[str]) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            cycle = [*stack[stack.index(key):], key]
            result.cycles.append(cycle)
            in_cycle.update(cycle)
            return
        state[key] = 1
        stack.append(key)
        for name in sorted(_references(values[key], kinds)):
            if name in values and not _asks_for_itself(key, values[key]):
                visit(name, stack)
        stack.pop()
        state[key] = 2
        scope = {**known, **{k: v for k, v in done.items() if k not in in_cycle}}
        done[key] = values[key] if key in in_cycle else substitute_value(values[key], scope, kinds=kinds)

    for key in values:
        visit(key, [])
    for key in values:
        result.values[key] = done[key]
        missing = sorted(n for n in _references(done[key], kinds)
                         if (n not in values and n not in known) or _asks_for_itself(key, done[key]))
        if missing:
            result.unresolved[key] = tuple(missing)
    return result
