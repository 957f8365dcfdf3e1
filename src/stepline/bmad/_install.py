"""Install BMAD modules from a source tree into a project: ``{project}/_bmad/<module>/…`` plus ``config.yaml``.

A module's ``module.yaml`` lists its config variables, each with a ``prompt``, a ``default`` and a ``result``
template. The installed ``config.yaml`` holds, for every variable, the result template filled with the chosen
value (``settings`` first, else the default): ``{value}`` is the value, ``{other_key}`` another variable's
value (without its ``{project-root}/`` prefix), ``{directory_name}`` the project folder's name, and
``{project-root}`` stays literal so the project can move. Every module's config also carries the core keys.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stepline.bmad._config import load_yaml
from stepline.errors import NotFoundError, ReaderError, UsageError

__all__ = ["InstallReport", "InstalledModule", "install_bmad"]

_IGNORED = shutil.ignore_patterns("_module-installer", ".git", "__pycache__", ".DS_Store", "node_modules")
_META_KEYS = {"code", "name", "header", "subheader", "default_selected", "type", "description"}
_PROJECT_ROOT = "{project-root}"


@dataclass(frozen=True, slots=True)
class InstalledModule:
    """One module written into the project."""

    name: str
    source: Path
    target: Path
    config_path: Path
    files: int


@dataclass(frozen=True, slots=True)
class InstallReport:
    """What :func:`install_bmad` did.

    Attributes:
        project: the project root.
        modules: the installed modules, core first.
        config: each module's config as written to its ``config.yaml``.
        unused_settings: settings no module declares (a typo, most likely).
    """

    project: Path
    modules: tuple[InstalledModule, ...]
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    unused_settings: tuple[str, ...] = ()


@dataclass(slots=True)
class _Source:
    name: str
    folder: Path
    schema: dict[str, Any]


def install_bmad(src: Path, project: Path, settings: Mapping[str, str] | None = None) -> InstallReport:
    """Install the BMAD modules found under ``src`` into ``project``.

    Args:
        src: a BMAD repository root (holding ``src/``), its ``src/`` folder, ``src/modules/<m>``,
            ``src/core`` or ``src/<m>`` (any folder with a ``module.yaml``).
        project: the project root; ``_bmad/`` is created inside it.
        settings: values for module variables, overriding their defaults (``user_name=Ada``); a key may be
            qualified by module (``bmm.project_name=Shop``).

    Raises:
        NotFoundError: ``src`` does not exist.
        ReaderError: no module found, or a ``module.yaml`` that does not parse (file:line).
        UsageError: a setting whose value does not fit the variable (``yes``/``no`` for a boolean).
    """
    if not src.exists():
        raise NotFoundError(f"{src}: no such folder", hint="pass a BMAD repository or its src/ folder")
    settings = dict(settings or {})
    sources = _find_modules(src)
    if not sources:
        raise ReaderError(
            "no BMAD module found",
            path=str(src),
            hint="expected src/core, src/modules/<m> or a folder with module.yaml",
        )
    project = project.resolve()
    bmad = project / "_bmad"
    existing_core = _existing_config(bmad / "core" / "config.yaml")
    core_source = next((s for s in sources if s.name == "core"), None)
    if core_source is None:
        core_source = _sibling_core(src)
        if core_source is not None:
            sources.append(core_source)
    answers: dict[str, Any] = {}
    collected: dict[str, dict[str, Any]] = {}
    used: set[str] = set()
    core_config = _module_config(core_source, project, settings, answers, collected, used) if core_source else {}
    core_config = {**existing_core, **core_config}
    for key in ("user_name", "communication_language", "document_output_language", "output_folder"):
        if key in settings and key not in core_config:
            core_config[key] = settings[key]
            used.add(key)
    collected["core"] = core_config
    answers.update({k: v for k, v in core_config.items() if k not in answers})

    installed: list[InstalledModule] = []
    written: dict[str, dict[str, Any]] = {}
    ordered = sorted(sources, key=lambda s: (s.name != "core", s.name))
    for source in ordered:
        own = (
            core_config
            if source.name == "core"
            else _module_config(source, project, settings, answers, collected, used)
        )
        collected[source.name] = own
        config = (
            dict(own) if source.name == "core" else {**own, **{k: v for k, v in core_config.items() if k not in own}}
        )
        target = bmad / source.name
        files = _copy_tree(source.folder, target)
        config_path = target / "config.yaml"
        _write_config(config_path, source, config)
        written[source.name] = config
        installed.append(InstalledModule(source.name, source.folder, target, config_path, files))
    unused = tuple(sorted(key for key in settings if key not in used))
    return InstallReport(project=project, modules=tuple(installed), config=written, unused_settings=unused)


def _find_modules(src: Path) -> list[_Source]:
    """Find the module folders under any accepted kind of ``src``."""
    src = src.resolve()
    if (src / "module.yaml").is_file():
        return [_source(src)]
    roots = [src / "src", src] if (src / "src").is_dir() else [src]
    found: list[_Source] = []
    for root in roots:
        candidates = [root / "core", *sorted((root / "modules").glob("*/"))] if (root / "modules").is_dir() else []
        candidates += sorted(p for p in root.glob("*/") if p.name not in ("modules",))
        for folder in candidates:
            if (folder / "module.yaml").is_file() and all(s.folder != folder for s in found):
                found.append(_source(folder))
        if found:
            break
    return found


def _sibling_core(src: Path) -> _Source | None:
    """The core module next to an installed-alone module (``src/modules/bmm`` -> ``src/core``)."""
    for parent in src.resolve().parents:
        candidate = parent / "core" / "module.yaml"
        if candidate.is_file():
            return _source(candidate.parent)
    return None


def _source(folder: Path) -> _Source:
    schema_path = folder / "module.yaml"
    data = load_yaml(schema_path).data
    if not isinstance(data, dict):
        raise ReaderError("module.yaml must be a mapping", path=str(schema_path), line=1)
    name = str(data.get("code") or folder.name)
    return _Source(name=name, folder=folder, schema=data)


def _existing_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = load_yaml(path).data
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}


def _module_config(
    source: _Source,
    project: Path,
    settings: Mapping[str, str],
    answers: dict[str, Any],
    collected: Mapping[str, Mapping[str, Any]],
    used: set[str],
) -> dict[str, Any]:
    """Compute one module's config values from its schema, the settings and the answers so far."""
    config: dict[str, Any] = {}
    for key, item in source.schema.items():
        if key in _META_KEYS or not isinstance(item, dict) or not ("prompt" in item or "result" in item):
            continue
        qualified = f"{source.name}.{key}"
        if qualified in settings or key in settings:
            setting_key = qualified if qualified in settings else key
            used.add(setting_key)
            value: Any = _coerce(settings[setting_key], item.get("default"), setting_key)
        else:
            value = item.get("default")
            if isinstance(value, str):
                value = _fill(value.replace("{directory_name}", project.name), answers, collected)
        answers[key] = value
        result = item.get("result")
        config[key] = _result(result, value, answers, collected) if result is not None else value
    return config


def _coerce(raw: str, default: Any, key: str) -> Any:
    if isinstance(default, bool):
        lowered = raw.strip().lower()
        if lowered in ("true", "yes", "y", "1", "on"):
            return True
        if lowered in ("false", "no", "n", "0", "off"):
            return False
        raise UsageError(f"setting {key}={raw!r}: expected true or false")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError as exc:
            raise UsageError(f"setting {key}={raw!r}: expected a whole number") from exc
    return raw


def _result(template: Any, value: Any, answers: Mapping[str, Any], collected: Mapping[str, Mapping[str, Any]]) -> Any:
    """Fill a ``result`` template: ``{value}`` first, then other keys; ``{project-root}`` stays literal."""
    if not isinstance(template, str) or value is None:
        return value if template == "{value}" else template
    if template.strip() == "{value}":
        return value
    text = template.replace("{value}", _text(value))
    return _fill(text, answers, collected)


def _fill(text: str, answers: Mapping[str, Any], collected: Mapping[str, Mapping[str, Any]]) -> str:
    out: list[str] = []
    pos = 0
    while True:
        start = text.find("{", pos)
        end = text.find("}", start + 1) if start >= 0 else -1
        if start < 0 or end < 0:
            out.append(text[pos:])
            return "".join(out)
        name = text[start + 1 : end]
        out.append(text[pos:start])
        replacement = _lookup(name, answers, collected)
        out.append(text[start : end + 1] if replacement is None else replacement)
        pos = end + 1


def _lookup(name: str, answers: Mapping[str, Any], collected: Mapping[str, Mapping[str, Any]]) -> str | None:
    if name in ("project-root", "value") or "{" in name:
        return None
    if answers.get(name) not in (None, ""):
        return _text(answers[name])
    for config in collected.values():
        if config.get(name) not in (None, ""):
            return _text(config[name]).replace(_PROJECT_ROOT + "/", "")
    return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _copy_tree(source: Path, target: Path) -> int:
    shutil.copytree(source, target, ignore=_IGNORED, dirs_exist_ok=True)
    return sum(1 for path in target.rglob("*") if path.is_file())


def _write_config(path: Path, source: _Source, config: Mapping[str, Any]) -> None:
    header = (
        f"# {source.name} module configuration, written by stepline install from {source.folder / 'module.yaml'}\n"
        "# {project-root} is kept literal: the runtime replaces it with the project folder.\n"
    )
    body = yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True, default_flow_style=False)
    path.write_text(header + body, encoding="utf-8")
