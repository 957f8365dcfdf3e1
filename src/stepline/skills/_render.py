"""Rendering a skill's Markdown the way BMAD's ``render_skill.py`` does, plus the names its prose uses.

Tokens, in the order they are resolved (one pass each, inserted text is never scanned again for the tokens
of an earlier kind):

* ``{{.key}}`` — the one value named ``key`` anywhere in the central config (``[core]``, ``[modules.*]``);
  ``{{config.a.b}}`` — the value at that dotted path. ``{project-root}`` inside a value becomes the project.
* ``{workflow.name}`` (or ``{agent.name}``: the skill's customization table) — a string as written, a list of
  strings as a Markdown list (``_None._`` when empty), a list of tables (review layers) as one section each.
* ``[[bmad-snapshot:file.md]]`` — the absolute path of that file of the skill.
* ``{project-root}``, ``{skill-root}``, ``{skill-name}`` and the config values by their plain name
  (``{user_name}``), which the older prose of SKILL.md uses; ``{{user_name}}``, ``{{date}}`` the same way (a
  step file's runtime variables), as the value itself: the outer braces are the token's.

A token that names nothing known is left as written and reported by :func:`unknown_tokens`, so the linter
and the runtime tell the same story.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIG_TOKEN",
    "CUSTOM_TOKEN",
    "SHORT_CONFIG_TOKEN",
    "SNAPSHOT_TOKEN",
    "RenderEnv",
    "config_lookup",
    "format_custom_value",
    "render_skill_text",
    "unknown_tokens",
]

SHORT_CONFIG_TOKEN = re.compile(r"\{\{\.([A-Za-z0-9_]+)\}\}")
CONFIG_TOKEN = re.compile(r"\{\{config\.([A-Za-z0-9_.-]+)\}\}")
CUSTOM_TOKEN = re.compile(r"\{(workflow|agent)\.([A-Za-z0-9_.-]+)\}")
SNAPSHOT_TOKEN = re.compile(r"\[\[bmad-snapshot:([A-Za-z0-9_./-]+\.md)\]\]")
_PLAIN_TOKEN = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_-]*)\}(?!\})")
#: ``{{name}}``: a run variable (``{{date}}``) or config value by its plain name, in the micro-file way of writing
_DOUBLE_TOKEN = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")


@dataclass(slots=True)
class RenderEnv:
    """What a skill's text is rendered with."""

    project_root: Path
    skill_root: Path
    central: dict[str, Any] = field(default_factory=dict)
    customization: dict[str, Any] = field(default_factory=dict)
    #: Plain names (config values, run variables) for ``{name}`` in the prose.
    names: dict[str, Any] = field(default_factory=dict)


def _with_root(value: Any, project_root: Path) -> Any:
    return value.replace("{project-root}", str(project_root)) if isinstance(value, str) else value


def _find(data: Any, key: str, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if not isinstance(data, dict):
        return
    for name, value in data.items():
        path = f"{prefix}.{name}" if prefix else str(name)
        if name == key and not isinstance(value, dict | list):
            yield path, value
        yield from _find(value, key, path)


def config_lookup(central: dict[str, Any], key: str, module: str | None = None) -> tuple[str, Any] | None:
    """The ``(dotted path, value)`` of ``{{.key}}``: the one match, or the skill's module's when several."""
    matches = list(_find(central, key))
    if len(matches) > 1 and module:
        own = [m for m in matches if m[0] in (f"modules.{module}.{key}", f"core.{key}")]
        matches = own or matches
    return matches[0] if matches else None


def _dotted(data: dict[str, Any], path: str) -> Any:
    current: Any = data
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def format_custom_value(value: Any) -> str | None:
    """A customization value as render_skill.py inserts it into prose (None: a value it cannot insert)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    if not isinstance(value, list):
        return None
    if value and all(isinstance(item, dict) for item in value):
        sections = []
        for item in value:
            instruction = str(item.get("instruction", "")).strip()
            if not instruction and "instruction" in item:
                continue  # an empty instruction disables the layer
            ident = str(item.get("id") or item.get("code") or "")
            head = f"#### {item.get('name', ident)} (`{ident}`)"
            when = f"\n\nRun only when: {item['when']}" if item.get("when") else ""
            body = instruction or "\n".join(f"- {k}: {v}" for k, v in item.items() if k not in ("id", "name"))
            sections.append(f"{head}{when}\n\n{body}")
        return "\n\n".join(sections) or "_None._"
    if not value:
        return "_None._"
    lines = []
    for item in value:
        text = str(item).splitlines() or [""]
        lines.append("- " + text[0])
        lines.extend("  " + line for line in text[1:])
    return "\n".join(lines)


def render_skill_text(text: str, env: RenderEnv, module: str | None = None, *, plain: bool = True) -> str:
    """Render ``text`` of the skill (see the module doc); unknown tokens stay as written.

    ``plain`` False leaves ``{project-root}`` and the other plain names as written: the output is then what
    ``render_skill.py`` publishes (the model resolves those itself).
    """
    root = env.project_root

    def short(match: re.Match[str]) -> str:
        found = config_lookup(env.central, match[1], module)
        if found is None:
            value = env.names.get(match[1])
            return match[0] if value is None or isinstance(value, dict | list) else str(_with_root(value, root))
        return str(_with_root(found[1], root))

    def dotted(match: re.Match[str]) -> str:
        value = _dotted(env.central, match[1])
        return match[0] if value is None or isinstance(value, dict | list) else str(_with_root(value, root))

    def custom(match: re.Match[str]) -> str:
        value = _dotted(env.customization, f"{match[1]}.{match[2]}")
        formatted = format_custom_value(value) if value is not None else None
        return match[0] if formatted is None else formatted.replace("{skill-root}", str(env.skill_root))

    def snapshot(match: re.Match[str]) -> str:
        return str(env.skill_root / match[1])

    def plain_name(match: re.Match[str]) -> str:
        name = match[1]
        if name == "project-root":
            return str(root)
        if name == "skill-root":
            return str(env.skill_root)
        if name == "skill-name":
            return env.skill_root.name
        value = env.names.get(name)
        return match[0] if value is None or isinstance(value, dict | list) else str(_with_root(value, root))

    text = SHORT_CONFIG_TOKEN.sub(short, text)
    text = CONFIG_TOKEN.sub(dotted, text)
    text = CUSTOM_TOKEN.sub(custom, text)
    text = SNAPSHOT_TOKEN.sub(snapshot, text)
    return _PLAIN_TOKEN.sub(plain_name, _DOUBLE_TOKEN.sub(plain_name, text)) if plain else text


def unknown_tokens(text: str, env: RenderEnv, module: str | None = None) -> list[tuple[int, str, str]]:
    """``(line, token, why)`` for every ``{{.key}}``, ``{{config.…}}`` or ``{workflow.…}`` that names nothing."""
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in SHORT_CONFIG_TOKEN.finditer(line):
            if config_lookup(env.central, match[1], module) is None and match[1] not in env.names:
                found.append((number, match[0], f"no config value {match[1]!r}"))
        for match in CONFIG_TOKEN.finditer(line):
            if _dotted(env.central, match[1]) is None:
                found.append((number, match[0], f"no config value at {match[1]!r}"))
        for match in CUSTOM_TOKEN.finditer(line):
            block = env.customization.get(match[1])
            if not isinstance(block, dict):
                continue  # a skill without that table: its prose means another skill's (a shim's text)
            if _dotted(env.customization, f"{match[1]}.{match[2]}") is None:
                found.append((number, match[0], f"customize.toml has no [{match[1]}] field {match[2]!r}"))
    return found
