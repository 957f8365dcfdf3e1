"""Install BMAD modules from a source tree into a project: ``{project}/_bmad/<module>/…`` plus ``config.yaml``.

A module's ``module.yaml`` lists its config variables, each with a ``prompt``, a ``default`` and a ``result``
template. The installed ``config.yaml`` holds, for every variable, the result template filled with the chosen
value (``settings`` first, else the default): ``{value}`` is the value, ``{other_key}`` another variable's
value (without its ``{project-root}/`` prefix), ``{directory_name}`` the project folder's name, and
``{project-root}`` stays literal so the project can move (a setting given as ``{project-root}/docs`` is the
answer ``docs`` where the result adds the placeholder itself). Every module's config also carries the core keys.

A skill-era tree (BMAD v6.5+: modules of ``SKILL.md`` folders such as ``src/core-skills`` and
``src/bmm-skills``, with the shared helpers in ``src/scripts``) is laid out as BMAD's own installer does:
``_bmad/<module>/…`` as above, ``_bmad/scripts/`` (the helpers, without their tests), the central config
``_bmad/config.toml`` (``[core]``, ``[modules.<code>]``, ``[agents.<code>]``; the variables a module declares
with ``scope: user`` go to ``_bmad/config.user.toml`` instead) and ``_bmad/custom/`` for the team's and each
person's overrides (``*.user.toml`` git-ignored); existing files there are never touched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stepline._paths import inside
from stepline._placeholders import PROJECT_ROOT, Kind, Placeholder, find, substitute
from stepline.bmad._config import load_yaml
from stepline.errors import NotFoundError, ReaderError, UsageError
from stepline.formats import load_toml, parse_json, read_text

__all__ = ["InstallReport", "InstalledModule", "install_bmad"]

_IGNORED = shutil.ignore_patterns("_module-installer", ".git", "__pycache__", ".DS_Store", "node_modules")
_META_KEYS = {"code", "name", "header", "subheader", "default_selected", "type", "description"}
_PROJECT_ROOT = "{" + PROJECT_ROOT + "}"


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
        warnings: config values that still name a variable no installed module defines (one line each).
    """

    project: Path
    modules: tuple[InstalledModule, ...]
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    unused_settings: tuple[str, ...] = ()
    #: config values left naming a variable no installed module defines (``qa: test_artifacts needs {output_folder}``)
    warnings: tuple[str, ...] = ()
    #: Skill-era trees only: the shared scripts folder and the central config files written.
    scripts: Path | None = None
    central_config: tuple[Path, ...] = ()


@dataclass(slots=True)
class _Source:
    name: str
    folder: Path
    schema: dict[str, Any]
    #: a plugin's listed skill folders: only these are installed (into ``_bmad/<module>/<skill>``)
    skills: tuple[Path, ...] = ()


#: The install folder as a module's text file names it — ``{project-root}/.bmad`` (alpha.1x), ``{project-root}/
#: bmad`` (alpha.0-alpha.4) or the ``{bmad_folder}`` placeholder (alpha.5-alpha.14, which BMAD's installer
#: replaced with the folder chosen): rewritten to ``_bmad``, the folder stepline installs into.
_DOT_BMAD = re.compile(rb"(\{project-root\}/)\.?bmad(?=[/\"'`\s]|$)|\{bmad_folder\}", re.MULTILINE)
#: Where a module's schema is: ``module.yaml``; before alpha.15 ``_module-installer/install-config.yaml``
#: (alpha.0-alpha.4: ``install-menu-config.yaml``).
_SCHEMAS = ("module.yaml", "_module-installer/install-config.yaml", "_module-installer/install-menu-config.yaml")
_INSTALL_FOLDER = "_bmad"
_TEXT_SUFFIXES = frozenset({".md", ".yaml", ".yml", ".xml", ".csv", ".json", ".toml", ".txt"})


def install_bmad(src: Path, project: Path, settings: Mapping[str, str] | None = None) -> InstallReport:
    """Install the BMAD modules found under ``src`` into ``project``.

    Args:
        src: a BMAD repository root (holding ``src/``), its ``src/`` folder, ``src/modules/<m>``,
            ``src/core`` or ``src/<m>`` (any folder with a ``module.yaml``, or before alpha.15 a
            ``_module-installer/install-config.yaml``).
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
            hint="expected src/core, src/modules/<m>, a folder with module.yaml, or a .claude-plugin/marketplace.json "
                 "listing skills",
        )
    project = project.resolve()
    bmad = project / _INSTALL_FOLDER
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
    # answers are what the person answered (a default names them): an earlier install's config holds results
    answers.update({k: _answer(v) for k, v in core_config.items() if k not in answers})

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
        files = sum(_copy_tree(skill, target / skill.name) for skill in source.skills) if source.skills else \
            _copy_tree(source.folder, target)
        config_path = target / "config.yaml"
        _write_config(config_path, source, config)
        written[source.name] = config
        installed.append(InstalledModule(source.name, source.folder, target, config_path, files))
    unused = tuple(sorted(key for key in settings if key not in used))
    warnings = tuple(f"{name}: {key} needs {{{missing}}}, which no installed module defines (install core with it, "
                     f"or give --set {missing}=…)" for name, config in written.items()
                     for key, value in config.items() for missing in _unfilled(value))
    scripts: Path | None = None
    central: tuple[Path, ...] = ()
    if any(next(s.folder.rglob("SKILL.md"), None) is not None for s in ordered):
        scripts = _install_scripts(src, ordered, bmad)
        central = _write_central_config(bmad, ordered, collected)
    return InstallReport(project=project, modules=tuple(installed), config=written, unused_settings=unused,
                         warnings=warnings, scripts=scripts, central_config=central)


def _find_modules(src: Path) -> list[_Source]:
    """Find the module folders under any accepted kind of ``src``."""
    src = src.resolve()
    if _schema(src) is not None:
        return [_source(src)]
    roots = [src / "src", src] if (src / "src").is_dir() else [src]
    found: list[_Source] = []
    for root in roots:
        candidates = [root / "core", *sorted((root / "modules").glob("*/"))] if (root / "modules").is_dir() else []
        candidates += sorted(p for p in root.glob("*/") if p.name not in ("modules",))
        for folder in candidates:
            if _schema(folder) is not None and all(s.folder != folder for s in found):
                found.append(_source(folder))
        if found:
            break
    return found or _plugin_modules(src)


def _plugin_modules(src: Path) -> list[_Source]:
    """The modules a ``.claude-plugin/marketplace.json`` lists (v6.6+ modules shipped as plugins), found as
    BMAD's installer finds them: each plugin's listed skills; its schema the ``module.yaml`` at their common
    folder, else in a ``-setup`` skill's ``assets/``, else in the one skill's ``assets/``, else only the
    plugin's name as its code."""
    market = src / ".claude-plugin" / "marketplace.json"
    if not market.is_file():
        return []
    data = parse_json(read_text(market), market, what="marketplace.json is not JSON")
    found: list[_Source] = []
    plugins = data.get("plugins") if isinstance(data, dict) else None
    for plugin in [p for p in plugins or [] if isinstance(p, dict)]:
        found_skills = [inside(src, rel) for rel in plugin.get("skills") or [] if isinstance(rel, str)]
        skills = [s for s in found_skills if s is not None and (s / "SKILL.md").is_file()]
        if not skills:
            continue
        common = Path(os.path.commonpath(skills)) if len(skills) > 1 else skills[0].parent
        candidates = [common / "module.yaml", *(s / "assets/module.yaml" for s in skills if s.name.endswith("-setup")),
                      *([skills[0] / "assets/module.yaml"] if len(skills) == 1 else [])]
        schema = next((c for c in candidates if c.is_file()), None)
        source = _source(schema.parent, schema) if schema else _Source(str(plugin.get("name")), common, {})
        found.append(_Source(source.name, common, source.schema, tuple(skills)))
    return found


def _sibling_core(src: Path) -> _Source | None:
    """The core module next to an installed-alone module (``src/modules/bmm`` -> ``src/core``,
    ``src/bmm-skills`` -> ``src/core-skills``)."""
    for parent in src.resolve().parents:
        for name in ("core", "core-skills"):
            if _schema(parent / name) is not None:
                return _source(parent / name)
    return None


def _install_scripts(src: Path, sources: list[_Source], bmad: Path) -> Path | None:
    """Copy the shared helpers (``src/scripts``, beside the modules) to ``_bmad/scripts/`` (replacing it), and
    make ``_bmad/custom/`` for overrides. None when the tree ships no scripts folder.

    Installing core replaces the folder (as BMAD's installer does); a module installed alone only adds to it.
    """
    candidates = [src / "src" / "scripts", src / "scripts", *(s.folder.parent / "scripts" for s in sources)]
    found = next((c for c in candidates if c.is_dir() and any(c.glob("*.py"))), None)
    custom = bmad / "custom"
    custom.mkdir(parents=True, exist_ok=True)
    if not (custom / ".gitignore").exists():
        (custom / ".gitignore").write_text("*.user.toml\n", encoding="utf-8")
    if found is None:
        return None
    target = bmad / "scripts"
    if target.exists() and any(s.name == "core" for s in sources):
        shutil.rmtree(target)  # BMAD's own scripts: replaced whole, so a file removed upstream does not linger
    shutil.copytree(found, target, ignore=shutil.ignore_patterns("tests", "__pycache__", ".pytest_cache", "*.pyc"),
                    dirs_exist_ok=True)  # a module installed alone adds its scripts to the shared ones
    return target


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps("" if value is None else str(value), ensure_ascii=False)


def _toml_table(name: str, values: Mapping[str, Any]) -> list[str]:
    return [f"[{name}]", *(f"{json.dumps(str(k)) if not str(k).replace('_', '').replace('-', '').isalnum() else k}"
                           f" = {_toml_value(v)}" for k, v in values.items() if not isinstance(v, dict)), ""]


def _toml_document(data: Mapping[str, Any]) -> list[str]:
    """``[core]``, then ``[modules.<code>]`` and ``[agents."<code>"]`` tables (any other table as written)."""
    lines: list[str] = []
    order = {"core": 0, "modules": 1, "agents": 2}
    for top, value in sorted(data.items(), key=lambda item: order.get(item[0], 3)):
        if not isinstance(value, dict):
            continue
        if top in ("modules", "agents"):
            for name, table in value.items():
                if isinstance(table, dict):
                    lines += _toml_table(f"{top}.{json.dumps(str(name)) if top == 'agents' else name}", table)
        else:
            lines += _toml_table(str(top), value)
    return lines


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return load_toml(path)
    except ReaderError as exc:
        raise ReaderError(f"cannot update it: {exc.detail}", path=str(path), line=exc.line,
                          hint="fix or delete it, then install again") from None


def _write_central_config(bmad: Path, sources: list[_Source], collected: Mapping[str, Mapping[str, Any]]
                          ) -> tuple[Path, ...]:
    """``_bmad/config.toml`` (team) and ``config.user.toml`` (the ``scope: user`` answers), as BMAD writes them.

    The tables of the modules installed now are replaced; those of modules installed earlier are kept.
    """
    header = ["# Written by stepline bmad install; regenerated on every install. Pin values in",
              "# _bmad/custom/config.toml (team) or _bmad/custom/config.user.toml (personal) instead.", ""]
    team, user = _read_toml(bmad / "config.toml"), _read_toml(bmad / "config.user.toml")
    core_keys = set(collected.get("core", {}))
    for source in sources:
        values = collected.get(source.name, {})
        scopes = {k: v.get("scope") for k, v in source.schema.items() if isinstance(v, dict)}
        own = {k: v for k, v in values.items() if source.name == "core" or k not in core_keys}
        for data, wanted in ((team, False), (user, True)):
            chosen = {k: v for k, v in own.items() if (scopes.get(k) == "user") == wanted}
            holder = data if source.name == "core" else data.setdefault("modules", {})
            holder.pop(source.name if source.name != "core" else "core", None)
            if chosen:
                holder["core" if source.name == "core" else source.name] = chosen
        agents = team.setdefault("agents", {})
        for code in [c for c, a in agents.items() if isinstance(a, dict) and a.get("module") == source.name]:
            del agents[code]
        for agent in source.schema.get("agents") or []:
            if isinstance(agent, dict) and agent.get("code"):
                agents[str(agent["code"])] = {"module": source.name,
                                              **{k: v for k, v in agent.items() if k != "code"}}
    written = [bmad / "config.toml"]
    (bmad / "config.toml").write_text("\n".join(header + _toml_document(team)), encoding="utf-8")
    if _toml_document(user):
        (bmad / "config.user.toml").write_text("\n".join(header + _toml_document(user)), encoding="utf-8")
        written.append(bmad / "config.user.toml")
    return tuple(written)


def _schema(folder: Path) -> Path | None:
    """The file holding the module schema of ``folder``, if it is a module."""
    return next((folder / name for name in _SCHEMAS if (folder / name).is_file()), None)


def _source(folder: Path, schema_path: Path | None = None) -> _Source:
    schema_path = schema_path or _schema(folder) or folder / "module.yaml"
    data = load_yaml(schema_path).data
    if not isinstance(data, dict):
        raise ReaderError(f"{schema_path.name} must be a mapping", path=str(schema_path), line=1)
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
        if key == "bmad_folder":  # its files were rewritten to name the folder stepline installs into
            answers[key] = config[key] = _INSTALL_FOLDER
            continue
        if qualified in settings or key in settings:
            setting_key = qualified if qualified in settings else key
            used.add(setting_key)
            value: Any = _coerce(settings[setting_key], item.get("default"), setting_key)
            if _adds_project_root(item.get("result")):
                # BMAD asks for a path inside the project and its result puts {project-root}/ before it: a value
                # given with the placeholder already (as a config file shows it) is the same answer, not a
                # path under a folder named "{project-root}".
                value = _answer(value)
        else:
            value = item.get("default")
            if isinstance(value, str):
                value = _fill(value, {**answers, "directory_name": project.name}, collected)
        answers[key] = value
        result = item.get("result")
        # a result names other results (``{test_artifacts}/{value}``): this module's so far, then the others'
        results = {**answers, **{k: v for c in collected.values() for k, v in c.items()}, **config}
        config[key] = _result(result, value, results, {}) if result is not None else value
    return config


def _answer(value: Any) -> Any:
    """The answer behind a config result: ``{project-root}/_bmad-output`` was answered ``_bmad-output``."""
    return value.removeprefix(_PROJECT_ROOT + "/") if isinstance(value, str) else value


def _adds_project_root(template: Any) -> bool:
    """Whether a ``result`` template puts ``{project-root}`` before the answer (``{project-root}/{value}``)."""
    return isinstance(template, str) and any(p.name == PROJECT_ROOT for p in find(template, {Kind.VAR}))


def _unfilled(value: Any) -> list[str]:
    """The ``{name}`` variables a config value still names (``{project-root}`` is the runtime's)."""
    names = [p.name for p in find(value, {Kind.VAR})] if isinstance(value, str) else []
    return [n for n in dict.fromkeys(names) if n != PROJECT_ROOT]


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
    return _fill(substitute(template, {"value": value}, kinds={Kind.VAR}), answers, collected)


def _fill(text: str, answers: Mapping[str, Any], collected: Mapping[str, Mapping[str, Any]]) -> str:
    """Fill the other variables a default or result names: an answer, else another module's result (the answer
    behind it: without its ``{project-root}/``). ``{project-root}`` stays, for the runtime."""

    def lookup(token: Placeholder) -> Any:
        if answers.get(token.name) not in (None, ""):
            return answers[token.name]
        return next((_answer(config[token.name]) for config in collected.values()
                     if config.get(token.name) not in (None, "")), None)

    return substitute(text, lookup, kinds={Kind.VAR}, keep={PROJECT_ROOT, "value"})


def _copy_tree(source: Path, target: Path) -> int:
    shutil.copytree(source, target, ignore=_IGNORED, dirs_exist_ok=True, copy_function=_copy_file)
    return sum(1 for path in target.rglob("*") if path.is_file())


def _copy_file(source: str, target: str) -> str:
    """Copy one file; a text file naming the install folder as alpha.1x releases did (``{project-root}/.bmad/``)
    names the folder it is installed into, as BMAD's installer rewrites it."""
    if Path(source).suffix.lower() in _TEXT_SUFFIXES:
        data = Path(source).read_bytes()
        if _DOT_BMAD.search(data):
            Path(target).write_bytes(_DOT_BMAD.sub(lambda m: (m[1] or b"") + _INSTALL_FOLDER.encode(), data))
            shutil.copymode(source, target)
            return target
    return str(shutil.copy2(source, target))


def _write_config(path: Path, source: _Source, config: Mapping[str, Any]) -> None:
    origin = _schema(source.folder) or source.folder
    header = (
        f"# {source.name} module configuration, written by stepline install from {origin}\n"
        "# {project-root} is kept literal: the runtime replaces it with the project folder.\n"
    )
    body = yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True, default_flow_style=False)
    path.write_text(header + body, encoding="utf-8")
