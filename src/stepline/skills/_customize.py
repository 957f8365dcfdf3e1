"""A skill's customization and the project's central config, merged by BMAD's structural rules.

``customize.toml`` beside ``SKILL.md`` holds the defaults (a ``[workflow]`` or ``[agent]`` table); the team
overrides them in ``_bmad/custom/<skill>.toml`` and each person in ``_bmad/custom/<skill>.user.toml``. The
layers merge as the files' headers state: strings (any scalar) replace, lists append, tables merge key by
key, and arrays of tables whose items all carry a ``code`` (else an ``id``) merge by it — a matching item is
replaced, a new one appended.

The central config is ``_bmad/config.toml`` (``[core]``, ``[modules.<code>]``, ``[agents.<code>]``) with
``config.user.toml`` and ``custom/config.toml`` / ``custom/config.user.toml`` over it. A project installed
before config.toml existed has only ``_bmad/<module>/config.yaml`` (+ ``config.user.yaml``); those are read
into the same shape. Pure: reads files, writes none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepline._yaml import load_yaml_text
from stepline.errors import ReaderError
from stepline.formats import load_toml, read_text

__all__ = [
    "Customization",
    "load_central_config",
    "load_module_config",
    "resolve_customization",
    "structural_merge",
]

_KEYED_FIELDS = ("code", "id")


def _keyed_field(items: list[Any]) -> str | None:
    """The field an array of tables merges by: ``code`` or ``id`` when every item has it, else None."""
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    for name in _KEYED_FIELDS:
        if all(isinstance(item.get(name), str) and item[name] for item in items):
            return name
    return None


def _merge_arrays(base: list[Any], override: list[Any]) -> list[Any]:
    keyed = _keyed_field(base + override)
    if keyed is None:
        return [*base, *override]
    result = [dict(item) for item in base]
    index = {item[keyed]: i for i, item in enumerate(result)}
    for item in override:
        if item[keyed] in index:
            result[index[item[keyed]]] = dict(item)
        else:
            index[item[keyed]] = len(result)
            result.append(dict(item))
    return result


def structural_merge(base: Any, override: Any) -> Any:
    """Merge ``override`` over ``base``: tables key by key, keyed table arrays by identity, lists append."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = structural_merge(merged[key], value) if key in merged else value
        return merged
    if isinstance(base, list) and isinstance(override, list):
        return _merge_arrays(base, override)
    return override


@dataclass(frozen=True, slots=True)
class Customization:
    """A skill's resolved customization: the merged tables and the files they came from, in order."""

    values: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    layers: tuple[str, ...] = ()

    def block(self) -> str | None:
        """The name of the skill's customization table (``workflow``, ``agent``), if it has one."""
        return next((k for k, v in self.defaults.items() if isinstance(v, dict)), None)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array of tables" if value and all(isinstance(v, dict) for v in value) else "a list"
    if isinstance(value, bool):
        return "true or false"
    return "a number" if isinstance(value, int | float) else "a string" if isinstance(value, str) else "a date"


def _check_override(defaults: dict[str, Any], override: dict[str, Any], path: Path, prefix: str = "") -> None:
    """An override keeps each default's type: BMAD's renderer refuses a string where the default is a list (or the
    reverse), so the runtime would otherwise run with a value the skill's text cannot take."""
    for key, value in override.items():
        if key not in defaults:
            continue
        default, name = defaults[key], f"{prefix}{key}"
        if isinstance(default, dict) and isinstance(value, dict):
            _check_override(default, value, path, f"{name}.")
            continue
        want, got = _kind(default), _kind(value)
        if want != got and not (want == "a list" and not default) and not (got == "a list" and not value):
            lines = read_text(path).splitlines()
            line = next((n for n, text in enumerate(lines, start=1) if re.match(rf"\s*{re.escape(key)}\s*=", text)), 1)
            raise ReaderError(f"{name} is {got} here, but {want} in the skill's customize.toml", path=str(path),
                              line=line, hint=f"give {name} as {want}, as customize.toml does")


def _check_blocks(values: dict[str, Any], path: Path) -> None:
    """``workflow`` and ``agent`` (what ``{workflow.<x>}`` and ``{agent.<x>}`` read) are tables when given."""
    for block in ("workflow", "agent"):
        if block in values and not isinstance(values[block], dict):
            lines = read_text(path).splitlines()
            line = next((n for n, text in enumerate(lines, start=1) if re.match(rf"\s*{block}\s*=", text)), 1)
            raise ReaderError(f"{block} is {_kind(values[block])}, not a table", path=str(path), line=line,
                              hint=f"declare it as [{block}] with its fields below")


def resolve_customization(skill_dir: Path, project_root: Path | None, *, name: str | None = None) -> Customization:
    """Merge ``customize.toml`` with the team and personal overrides of skill ``name`` (default: the folder's)."""
    defaults_path = skill_dir / "customize.toml"
    if not defaults_path.is_file():
        return Customization()
    defaults = load_toml(defaults_path)
    _check_blocks(defaults, defaults_path)
    merged: dict[str, Any] = dict(defaults)
    layers = [str(defaults_path)]
    skill = name or skill_dir.name
    if project_root is not None:
        custom = project_root / "_bmad" / "custom"
        for layer in (custom / f"{skill}.toml", custom / f"{skill}.user.toml"):
            if layer.is_file():
                override = load_toml(layer)
                _check_blocks(override, layer)
                _check_override(defaults, override, layer)
                merged = structural_merge(merged, override)
                layers.append(str(layer))
    return Customization(values=merged, defaults=defaults, layers=tuple(layers))


def load_module_config(project_root: Path, module: str) -> dict[str, Any]:
    """``_bmad/<module>/config.yaml`` with ``config.user.yaml`` over it (empty when neither exists)."""
    merged: dict[str, Any] = {}
    for name in ("config.yaml", "config.user.yaml"):
        path = project_root / "_bmad" / module / name
        if path.is_file():
            data = load_yaml_text(read_text(path), path=str(path))
            if isinstance(data, dict):
                merged.update({str(k): v for k, v in data.items()})
    return merged


def load_central_config(project_root: Path, module: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The project's central config and the files read, in merge order.

    With no ``_bmad/config.toml`` the module's ``config.yaml`` (+ ``config.user.yaml``) stands in: its keys
    go under ``[modules.<module>]``, except the core ones, found in ``_bmad/core/config.yaml``.
    """
    bmad = project_root / "_bmad"
    layers = [bmad / "config.toml", bmad / "config.user.toml", bmad / "custom" / "config.toml",
              bmad / "custom" / "config.user.toml"]
    if layers[0].is_file():
        merged: dict[str, Any] = {}
        read: list[str] = []
        for layer in layers:
            if layer.is_file():
                merged = structural_merge(merged, load_toml(layer))
                read.append(str(layer))
        return merged, read
    core = load_module_config(project_root, "core")
    central: dict[str, Any] = {"core": core}
    read = [str(bmad / "core" / "config.yaml")] if core else []
    if module and module != "core":
        own = {k: v for k, v in load_module_config(project_root, module).items() if k not in core}
        if own:
            central["modules"] = {module: own}
            read.append(str(bmad / module / "config.yaml"))
    return central, read
