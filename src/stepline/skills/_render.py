"""Rendering a skill's Markdown the way BMAD's ``render_skill.py`` does, plus the names its prose uses.

Tokens (the language of :mod:`stepline._placeholders`; a value's own tokens are filled too):

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

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepline._placeholders import PROJECT_ROOT, VARIABLES, Kind, Placeholder, find, substitute

__all__ = [
    "RenderEnv",
    "config_lookup",
    "format_custom_value",
    "render_skill_text",
    "unknown_tokens",
]

#: The tokens render_skill.py fills (the plain names are the model's there).
_PUBLISHED = frozenset({Kind.CONFIG_KEY, Kind.CONFIG_PATH, Kind.CUSTOM, Kind.SNAPSHOT})


@dataclass(slots=True)
class RenderEnv:
    """What a skill's text is rendered with."""

    project_root: Path
    skill_root: Path
    central: dict[str, Any] = field(default_factory=dict)
    customization: dict[str, Any] = field(default_factory=dict)
    #: Plain names (config values, run variables) for ``{name}`` in the prose.
    names: dict[str, Any] = field(default_factory=dict)


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
    project = {PROJECT_ROOT: str(env.project_root)}
    plain_names = {**project, "skill-root": str(env.skill_root), "skill-name": env.skill_root.name}

    def rooted(value: Any) -> Any:
        """A config value as render_skill.py inserts it: ``{project-root}`` in it is the project."""
        return substitute(value, project, kinds={Kind.VAR}) if isinstance(value, str) else value

    def lookup(token: Placeholder) -> Any:
        if token.kind == Kind.CONFIG_KEY:
            found = config_lookup(env.central, token.name, module)
            return rooted(found[1] if found is not None else env.names.get(token.name))
        if token.kind == Kind.CONFIG_PATH:
            return rooted(_dotted(env.central, token.name))
        if token.kind == Kind.CUSTOM:
            value = _dotted(env.customization, token.name)
            formatted = format_custom_value(value) if value is not None else None
            return None if formatted is None else substitute(formatted, {"skill-root": str(env.skill_root)},
                                                             kinds={Kind.VAR})
        if token.kind == Kind.SNAPSHOT:
            return str(env.skill_root / token.name)
        return plain_names[token.name] if token.name in plain_names else rooted(env.names.get(token.name))

    return substitute(text, lookup, kinds=_PUBLISHED | VARIABLES if plain else _PUBLISHED, nested=True)


def unknown_tokens(text: str, env: RenderEnv, module: str | None = None) -> list[tuple[int, str, str]]:
    """``(line, token, why)`` for every ``{{.key}}``, ``{{config.…}}`` or ``{workflow.…}`` that names nothing
    (on a line, config tokens before customization ones)."""
    found: list[tuple[int, str, str]] = []
    rank = {Kind.CONFIG_KEY: 0, Kind.CONFIG_PATH: 1, Kind.CUSTOM: 2}
    for token in sorted(find(text, rank), key=lambda t: (t.line, rank[t.kind])):
        if token.kind == Kind.CONFIG_KEY:
            if config_lookup(env.central, token.name, module) is None and token.name not in env.names:
                found.append((token.line, token.text, f"no config value {token.name!r}"))
        elif token.kind == Kind.CONFIG_PATH:
            if _dotted(env.central, token.name) is None:
                found.append((token.line, token.text, f"no config value at {token.name!r}"))
        else:
            table, _, name = token.name.partition(".")
            if not isinstance(env.customization.get(table), dict):
                continue  # a skill without that table: its prose means another skill's (a shim's text)
            if _dotted(env.customization, token.name) is None:
                found.append((token.line, token.text, f"customize.toml has no [{table}] field {name!r}"))
    return found
