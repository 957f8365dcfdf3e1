"""Reader for BMAD micro-file workflows (SPEC R-F3): ``workflow.md`` + ``steps*/step-NN-*.md``.

The reader discovers the chain of step *files* (from ``nextStepFile``-style frontmatter, or from prose
such as "load ``./step-02-discovery.md``" in steps without frontmatter) so the workflow can be validated
and the engine can keep its position, but it never stores a step's body: the just-in-time rule says a step
file is read only when that step runs. So a step's ``body`` is empty; its ``meta`` says where the file is and
where it leads (:func:`load_bmad_microfile` lists the keys).

``{name}`` references are resolved with :func:`stepline._placeholders.resolve` (dependency order, cycles
reported), the same resolution the legacy ``workflow.yaml`` reader uses.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stepline._paths import link_out
from stepline._placeholders import Kind, find, resolve, substitute, whole
from stepline._yaml import load_yaml_text
from stepline.bmad._config import reference_diagnostics
from stepline.errors import NotFoundError, ReaderError, UsageError
from stepline.formats import Diagnostic, Frontmatter, Severity, decode_text, read_frontmatter_file, read_text
from stepline.model import SourceRef, StepSpec, WorkflowSpec
from stepline.stepchain import (
    folder_mode,
    halts_in,
    is_continuation,
    marks,
    parse_menu,
    prose_lines,
    read_points,
    step_number,
)

__all__ = [
    "LINK_LEAVES_PROJECT",
    "Progress",
    "completed_step_index",
    "lint_bmad_microfile",
    "load_bmad_microfile",
    "load_csv_data",
    "read_progress",
    "resume_step_id",
]

_TOKEN_RE = re.compile(r"[^\s`'\"()<>,|]+")
_FILE_WORD_RE = re.compile(r"\.(?:md|csv|ya?ml|xml|json)\b")
_PATHISH_RE = re.compile(r"\.(?:md|csv|yaml|yml|xml|json)$")
_MODE_EQ_RE = re.compile(r"mode\s*==\s*\**\s*([A-Za-z][\w\-]*)", re.IGNORECASE)
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*)$")
_CONFIG_REF_RE = re.compile(r"[^\s`'\"()]*config\.yaml")
_NEXT_KEYS = ("nextStepFile", "nextStep")
#: The diagnostic code of a file that symlinks lead out of the project: the loader refuses to run the workflow.
LINK_LEAVES_PROJECT = "link-leaves-project"
_NOT_BRANCH_KEYS = frozenset({"thisStepFile", "workflowFile", "altStepFile", *_NEXT_KEYS})


# ------------------------------------------------------------------------------------------------- variables


def _substitute(value: str, env: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Replace ``{name}`` by ``env[name]``; ``{{name}}`` runtime variables are left alone.

    Returns the new text and the names that were not in ``env`` (left in place).
    """
    text = substitute(value, env, kinds={Kind.VAR})
    return text, sorted({p.name for p in find(text, {Kind.VAR})})


def _resolve_mapping(
    raw: Mapping[str, Any], base: Mapping[str, Any], wf: _Workflow, source: Path, lines: Mapping[str, int]
) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """Resolve the values of ``raw`` against ``base`` and each other in dependency order.

    Cycles are reported on ``wf``; the returned mapping gives, per key, the names left unresolved. A key
    whose value is exactly itself (``targetWorkflowPath: '{targetWorkflowPath}'``) is the BMAD idiom for "the
    value an earlier step set at run time": it is kept as written and stays unknown to the others, not a cycle.
    """
    carried = {k for k, v in raw.items() if v == f"{{{k}}}"}
    own = {k: v for k, v in raw.items() if k not in carried}
    resolution = resolve(own, base)
    for diagnostic in reference_diagnostics(resolution, path=str(source), lines=lines, report_unknown=False):
        wf.report(diagnostic.severity, diagnostic.code, diagnostic.message, source, diagnostic.line)
    values = {k: (raw[k] if k in carried else resolution.values[k]) for k in raw}
    return values, resolution.unresolved


def _absolutise(value: Any, base_dir: Path) -> Any:
    """Make ``./x`` and ``../x`` strings absolute against ``base_dir``; other values are unchanged."""
    if isinstance(value, str) and value.startswith(("./", "../")):
        return os.path.normpath(base_dir / value)
    if isinstance(value, list):
        return [_absolutise(v, base_dir) for v in value]
    return value


# ----------------------------------------------------------------------------------------------------- model


@dataclass(frozen=True, slots=True)
class _Ref:
    """A reference to a file found in a frontmatter value or in prose."""

    raw: str
    path: Path | None  # None when a variable in it is unknown
    line: int | None
    label: str
    explicit: bool  # written as a path (./, ../, {var}, a folder) rather than a bare file name


@dataclass(slots=True)
class _Step:
    """What the reader learnt about one step file (never its body)."""

    path: Path
    frontmatter: dict[str, Any]
    next: Path | None = None
    alt: Path | None = None
    branches: dict[str, Path] = field(default_factory=dict)
    menu: list[dict[str, Any]] = field(default_factory=list)
    halts: list[dict[str, Any]] = field(default_factory=list)
    #: what its text hands the person, routes to, hands over to (:func:`stepline.stepchain._plan.read_points`)
    points: list[dict[str, Any]] = field(default_factory=list)
    name: str = ""
    description: str = ""
    mode: str | None = None


@dataclass(slots=True)
class _Workflow:
    """Everything the loader and the linter need about one micro-file workflow."""

    file: Path
    folder: Path
    project_root: Path
    name: str
    description: str
    variables: dict[str, Any]
    config_path: Path | None
    step_folders: list[Path]
    options: list[dict[str, Any]]  # router options (mode, entry path, …); one option when there is no router
    steps: dict[Path, _Step] = field(default_factory=dict)
    order: list[Path] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    escapes: set[Path] = field(default_factory=set)  # real paths of files reported as symlinks out

    def report(self, severity: Severity, code: str, message: str, path: Path, line: int | None) -> None:
        diagnostic = Diagnostic(severity, code, message, str(path), line)
        if diagnostic not in self.diagnostics:
            self.diagnostics.append(diagnostic)


# ----------------------------------------------------------------------------------------------------- files


def _workflow_file(path: Path) -> Path:
    if path.is_dir():
        candidates = sorted(path.glob("workflow*.md"))
        preferred = [c for c in candidates if c.name == "workflow.md"]
        if preferred or len(candidates) == 1:
            return (preferred or candidates)[0]
        if not candidates:
            raise NotFoundError(
                f"{path}: no workflow.md in this folder",
                hint="point at a micro-file workflow folder or its workflow.md",
            )
        raise ReaderError(
            f"several workflow*.md files here: {', '.join(c.name for c in candidates)}",
            path=str(path),
            hint="name the one to load",
        )
    if not path.is_file():
        raise NotFoundError(f"{path}: file not found")
    return path


def _step_folders(folder: Path) -> list[Path]:
    folders = [
        p
        for p in sorted(folder.iterdir())
        if p.is_dir() and (p.name == "steps" or p.name.startswith("steps-") or p.name.endswith("-steps"))
    ]
    return folders


def _in_folders(path: Path, folders: Iterable[Path]) -> bool:
    return any(path.parent == folder for folder in folders)


def _is_step_file(path: Path) -> bool:
    return path.suffix == ".md" and step_number(path.stem) is not None


def _confined(path: Path, wf: _Workflow, source: Path, line: int | None, named: str = "") -> None:
    """Report ``path`` when symlinks lead it out of the project (an error: the run would read the file out there
    and send it to the model), once, where it is first named (``named`` says how ``source`` names it)."""
    real = link_out(path, wf.project_root)
    if real is None or real in wf.escapes:
        return
    wf.escapes.add(real)
    what = f"{named}{path}, a symlink" if named else f"{path} is a symlink"
    wf.report("error", LINK_LEAVES_PROJECT, f"{what} to {real}, outside the project; copy the file into the project",
              source, line)


def _read(path: Path, wf: _Workflow) -> Frontmatter:
    _confined(path, wf, path, 1)
    fm = read_frontmatter_file(path)
    for diagnostic in fm.diagnostics:
        wf.report(diagnostic.severity, diagnostic.code, diagnostic.message, path, diagnostic.line)
    return fm


def _prose_lines(fm: Frontmatter, *, include_fenced: bool = False) -> list[tuple[int, str]]:
    return prose_lines(fm.body, fm.body_line, include_fenced=include_fenced)


# ------------------------------------------------------------------------------------------------ references


def _resolve_ref(
    raw: str,
    env: Mapping[str, Any],
    base_dir: Path,
    wf: _Workflow,
    line: int | None,
    source: Path,
    label: str,
) -> _Ref | None:
    """Turn a path-like string into a :class:`_Ref`, or None when it is not a file reference at all."""
    text, unknown = _substitute(raw.strip().rstrip(".:;*"), env)
    if "{{" in text or "[" in text or "/.../" in text:
        return None
    if unknown:
        return _Ref(raw, None, line, label, True)
    if not _PATHISH_RE.search(text) and not text.startswith(("/", "./", "../")):
        return None
    explicit = raw.startswith(("./", "../", "{", "/"))
    candidate = Path(text) if os.path.isabs(text) else base_dir / text
    path = Path(os.path.normpath(candidate))
    if not path.exists() and path.suffix == ".md":
        fallback = [f / path.name for f in wf.step_folders if (f / path.name).is_file()]
        if len(fallback) == 1:
            if explicit:
                wf.report(
                    "warning",
                    "path-fallback",
                    f"{raw!r} does not exist; using "
                    f"{fallback[0].relative_to(wf.folder)} (same file name in a step folder)",
                    source,
                    line,
                )
            path = fallback[0]
    return _Ref(raw, path, line, label, explicit)


def _prose_refs(
    prose: list[tuple[int, str]], source: Path, env: Mapping[str, Any], base_dir: Path, wf: _Workflow
) -> list[_Ref]:
    refs = []
    for line_no, line in prose:
        if "{" not in line and not _FILE_WORD_RE.search(line):
            continue
        for match in _TOKEN_RE.finditer(line):
            token = match[0].strip("*").rstrip(".:;*")
            bare_var = whole(token, {Kind.VAR})
            if not (_PATHISH_RE.search(token) or bare_var):
                continue
            if bare_var and not isinstance(env.get(bare_var.name), str):
                continue
            ref = _resolve_ref(token, env, base_dir, wf, line_no, source, "")
            if ref is not None and ref.path is not None:
                refs.append(_Ref(ref.raw, ref.path, line_no, ref.path.stem, ref.explicit))
    return refs


def _check_exists(ref: _Ref, wf: _Workflow, source: Path, key: str | None, *, declared: bool = True) -> None:
    """Report a reference into the installed tree or the workflow folder that names no file.

    ``key`` is the frontmatter key the reference came from (None for prose). Declared references (frontmatter
    values, the workflow's entry steps) that are missing are errors; other prose references, which are often
    examples, are warnings.
    """
    if ref.path is not None and ref.path.exists():
        _confined(ref.path, wf, source, ref.line, f"{key} {ref.raw!r} is " if key else f"{ref.raw!r} is ")
    if ref.path is None or ref.path.exists():
        return
    inside = [wf.folder, wf.project_root / "_bmad"]
    if any(ref.path.is_relative_to(root) for root in inside):
        is_step = _in_folders(ref.path, wf.step_folders) or key in _NEXT_KEYS or key == "altStepFile"
        code = "broken-chain" if is_step else "missing-file"
        severity: Severity = "error" if declared else "warning"
        what = f"{key} " if key else ""
        wf.report(
            severity,
            code,
            f"{what}{ref.raw!r} names a path that does not exist ({ref.path})",
            source,
            ref.line,
        )


# ---------------------------------------------------------------------------------------------------- config


def _load_config(wf_fm: Frontmatter, base: dict[str, Any], wf: _Workflow) -> tuple[Path | None, dict[str, Any]]:
    raw = wf_fm.data.get("main_config")
    line = wf_fm.line_of("main_config")
    if not isinstance(raw, str):
        raw = None
        for line_no, text in _prose_lines(wf_fm):
            match = _CONFIG_REF_RE.search(text)
            if match and "{project-root}" in match[0]:
                raw, line = match[0], line_no
                break
    if raw is None:
        module = _installed_module(wf)
        if module is None:
            return None, {}
        raw, line = f"{{project-root}}/_bmad/{module}/config.yaml", None
        wf.report(
            "info",
            "implicit-config",
            f"workflow.md names no config file; using its module's ({raw})",
            wf.file,
            None,
        )
    text, unknown = _substitute(raw, base)
    if unknown:
        wf.report(
            "error",
            "unknown-variable",
            f"config path {raw!r} uses unknown variable(s) {', '.join(sorted(set(unknown)))}",
            wf.file,
            line,
        )
        return None, {}
    path = Path(text)
    if not path.is_file():
        wf.report(
            "warning",
            "missing-config",
            f"module config {raw!r} not found ({path}); its variables are unknown",
            wf.file,
            line,
        )
        return path, {}
    _confined(path, wf, wf.file, line, f"module config {raw!r} is ")
    try:
        loaded = load_yaml_text(read_text(path), path=str(path))
    except OSError as exc:
        wf.report("error", "unreadable", f"cannot read the module config ({exc.strerror or exc})", path, None)
        return path, {}
    except ReaderError as exc:  # not UTF-8, or not YAML
        if exc.detail.startswith("YAML error: "):
            wf.report("error", "yaml-syntax", f"module config is not valid YAML ({exc.detail[12:]})", path, exc.line)
        else:
            wf.report("error", "not-utf8", f"module config is {exc.detail}; {exc.hint}", path, exc.line)
        return path, {}
    if not isinstance(loaded, dict):
        wf.report("error", "config-not-mapping", "module config is not a mapping of keys", path, 1)
        return path, {}
    values, unresolved = _resolve_mapping({str(k): v for k, v in loaded.items()}, base, wf, path, {})
    for key, names in unresolved.items():
        wf.report(
            "warning",
            "unknown-variable",
            f"config key {key!r} uses unknown variable(s) {', '.join(sorted(set(names)))}",
            path,
            None,
        )
    return path, values


def _installed_module(wf: _Workflow) -> str | None:
    """Return the module a workflow is installed in (``_bmad/<module>/…``), or None outside an install."""
    bmad = wf.project_root / "_bmad"
    if not wf.file.is_relative_to(bmad):
        return None
    module = wf.file.relative_to(bmad).parts[0]
    return module if (bmad / module / "config.yaml").is_file() else None


# ---------------------------------------------------------------------------------------------------- router


def _menu_slug(label: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", label.lower()))


def _router_options(wf_fm: Frontmatter, env: Mapping[str, Any], wf: _Workflow) -> list[dict[str, Any]]:
    """Find the workflow's entry steps: one per mode for a router, else the single first step."""
    prose = _prose_lines(wf_fm)
    lines = dict(prose)
    entries: list[tuple[_Ref, str | None]] = []
    seen: set[Path] = set()
    for ref in _prose_refs(prose, wf.file, env, wf.folder, wf):
        assert ref.path is not None
        if ref.explicit and not whole(ref.raw, {Kind.VAR}):
            _check_exists(ref, wf, wf.file, None, declared=_in_folders(ref.path, wf.step_folders))
        if not _in_folders(ref.path, wf.step_folders):
            continue
        named = whole(ref.raw, {Kind.VAR})
        if named and named.name in wf_fm.data:  # `{editWorkflow}`: a frontmatter entry step, missing is an error
            _check_exists(ref, wf, wf.file, named.name)
        mode = None
        for line_no in range((ref.line or 0), wf_fm.body_line - 1, -1):
            text = lines.get(line_no, "")
            heading = _HEADING_RE.match(text)
            found = _MODE_EQ_RE.search(text)
            if found:
                mode = found[1].lower()
                break
            if heading and len(heading[1]) <= 2:
                break
        if ref.path in seen:
            continue
        seen.add(ref.path)
        entries.append((ref, mode))
    menu = {_menu_slug(o["label"]): o for o in parse_menu(prose)}
    options: list[dict[str, Any]] = []
    for ref, mode in entries:
        assert ref.path is not None
        name = mode or folder_mode(ref.path.parent.name)
        existing = next((o for o in options if o["mode"] == name), None)
        if existing is not None:
            existing["alternates"].append(str(ref.path))
            continue
        item = menu.get(name) or next((o for s, o in menu.items() if s.split("-")[0] == name), None)
        options.append(
            {
                "mode": name,
                "key": item["key"] if item else None,
                "label": item["label"] if item else name.replace("-", " ").title(),
                "entry": str(ref.path),
                "line": ref.line,
                "alternates": [],
            }
        )
    return options


def _choose(options: list[dict[str, Any]], mode: str | None, wf: _Workflow) -> list[dict[str, Any]]:
    if mode is None:
        return options
    wanted = mode.strip().lstrip("-").lower()
    if len(options) < 2:
        raise UsageError(
            f"{wf.file}: this workflow has no modes to choose from (got mode {mode!r})",
            hint="load it without a mode",
        )
    for option in options:
        if wanted in (option["mode"], (option["key"] or "").lower()):
            return [option]
    prefixed = [o for o in options if o["mode"].startswith(wanted)]
    if len(prefixed) == 1:
        return prefixed
    names = ", ".join(o["mode"] for o in options)
    raise UsageError(f"{wf.file}: unknown mode {mode!r}", hint=f"choose one of: {names}")


# ----------------------------------------------------------------------------------------------------- steps


def _read_step(path: Path, base: Mapping[str, Any], wf: _Workflow) -> _Step:
    fm = _read(path, wf)
    raw = {k: v for k, v in fm.data.items() if isinstance(v, str | list | int | float | bool) or v is None}
    resolved, unknown = _resolve_mapping(raw, base, wf, path, fm.key_lines)
    for key, names in unknown.items():
        severity: Severity = "error" if key in _NEXT_KEYS or key == "altStepFile" else "warning"
        wf.report(
            severity,
            "unknown-variable",
            f"{key} uses unknown variable(s) {', '.join(sorted(set(names)))}",
            path,
            fm.line_of(key),
        )
    env = {**base, **resolved}
    step = _Step(
        path=path,
        frontmatter={k: _absolutise(v, path.parent) for k, v in resolved.items()},
        name=str(fm.data.get("name") or path.stem),
        description=str(fm.data.get("description") or ""),
    )
    for key, value in fm.data.items():
        values = value if isinstance(value, list) else [value]
        for index, item in enumerate(values):
            if not isinstance(item, str):
                continue
            label = f"{key}[{index}]" if isinstance(value, list) else key
            ref = _resolve_ref(item, env, path.parent, wf, fm.line_of(key), path, label)
            if ref is None or ref.path is None:
                continue
            _check_exists(ref, wf, path, key)
            if key in _NEXT_KEYS and step.next is None:
                step.next = ref.path
                if ref.path == path:
                    wf.report(
                        "warning",
                        "self-loop",
                        f"{key} {item!r} names this step itself (a loop); "
                        "steps after it are reached only through other links",
                        path,
                        ref.line,
                    )
            elif key == "altStepFile":
                step.alt = ref.path
            elif (
                key not in _NOT_BRANCH_KEYS
                and ref.path.suffix == ".md"
                and ref.path != path
                and _in_folders(ref.path, wf.step_folders)
            ):
                step.branches[label] = ref.path
    has_next_key = any(k in fm.data for k in _NEXT_KEYS)
    prose_targets: list[Path] = []
    prose = _prose_lines(fm)
    for ref in _prose_refs(prose, path, env, path.parent, wf):
        assert ref.path is not None
        if ref.explicit and not whole(ref.raw, {Kind.VAR}):
            _check_exists(ref, wf, path, None, declared=False)
        if ref.path == path or ref.path.suffix != ".md" or not ref.path.is_file():
            continue
        if not _in_folders(ref.path, wf.step_folders):
            continue
        if ref.path in (step.next, step.alt) or ref.path in step.branches.values():
            continue
        if ref.path not in prose_targets:
            prose_targets.append(ref.path)
    # A link back to an earlier file of the same folder is a "go back" branch, not the way forward.
    forward = [p for p in prose_targets
               if not is_continuation(p.stem) and (p.parent != path.parent or p.name > path.name)]
    if not has_next_key and not is_continuation(path.stem) and len(forward) == 1:
        step.next = forward[0]
        prose_targets.remove(forward[0])
    elif not has_next_key and not is_continuation(path.stem) and not forward:
        step.next = _next_inside_fences(fm, path, env, wf)
    for target in prose_targets:
        step.branches.setdefault(target.stem, target)
    step.menu = parse_menu(prose)
    step.halts = [h.as_meta() for h in halts_in(prose)]
    step.points = [p.to_json() for p in read_points(fm.body, file=path, first_line=fm.body_line, base=wf.folder)]
    return step


def _next_inside_fences(fm: Frontmatter, path: Path, env: Mapping[str, Any], wf: _Workflow) -> Path | None:
    """A step whose only "load the next step" line sits in a code block (an unbalanced fence upstream)."""
    refs = [r for r in _prose_refs(_prose_lines(fm, include_fenced=True), path, env, path.parent, wf)
            if r.path is not None and r.path.suffix == ".md" and r.path.is_file() and r.path != path
            and _in_folders(r.path, wf.step_folders) and not is_continuation(r.path.stem)
            and (r.path.parent != path.parent or r.path.name > path.name)]
    targets = list(dict.fromkeys(r.path for r in refs if r.path is not None))
    if len(targets) != 1:
        return None
    wf.report("warning", "fenced-next-step", f"the next step {targets[0].name!r} is named only inside a code "
              "block (is a ``` fence left open?); following it", path, refs[0].line)
    return targets[0]


def _walk(wf: _Workflow, entries: list[Path], base: Mapping[str, Any]) -> None:
    """Read every step file reachable from ``entries`` (frontmatter and links only) into ``wf.steps``."""
    queue = list(entries)
    while queue:
        path = queue.pop(0)
        if path in wf.steps or not path.is_file():
            continue
        step = _read_step(path, base, wf)
        wf.steps[path] = step
        wf.order.append(path)
        targets = [step.next, step.alt, *step.branches.values()]
        queue.extend(t for t in targets if t is not None and t not in wf.steps)


def _analyse(
    path: Path, project_root: Path, variables: Mapping[str, Any] | None, mode: str | None
) -> tuple[_Workflow, list[dict[str, Any]]]:
    file = _workflow_file(path)
    folder = file.parent
    wf = _Workflow(
        file=file,
        folder=folder,
        project_root=project_root,
        name=folder.name,
        description="",
        variables={},
        config_path=None,
        step_folders=_step_folders(folder),
        options=[],
    )
    wf_fm = _read(file, wf)
    base: dict[str, Any] = {"project-root": str(project_root)}
    wf.config_path, config = _load_config(wf_fm, base, wf)
    base.update(config)
    base.update(variables or {})
    own = {k: v for k, v in wf_fm.data.items() if isinstance(v, str | list | int | float | bool)}
    resolved, unknown = _resolve_mapping(own, base, wf, file, wf_fm.key_lines)
    for key, names in unknown.items():
        wf.report(
            "warning",
            "unknown-variable",
            f"{key} uses unknown variable(s) {', '.join(sorted(set(names)))}",
            file,
            wf_fm.line_of(key),
        )
    wf.variables = {**base, **{k: _absolutise(v, folder) for k, v in resolved.items()}}
    wf.name = str(wf_fm.data.get("name") or folder.name)
    wf.description = str(wf_fm.data.get("description") or "")
    wf.options = _router_options(wf_fm, wf.variables, wf)
    if not wf.options and wf.step_folders:
        candidates = sorted(p for p in wf.step_folders[0].glob("*.md") if _is_step_file(p))
        if candidates:
            wf.report(
                "warning",
                "no-entry-step",
                f"workflow.md names no first step; using {candidates[0].relative_to(folder)}",
                file,
                wf_fm.body_line,
            )
            wf.options = [
                {
                    "mode": folder_mode(candidates[0].parent.name),
                    "key": None,
                    "label": "",
                    "entry": str(candidates[0]),
                    "line": None,
                    "alternates": [],
                }
            ]
    for option in wf.options:
        option["entry"] = str(_chain_start(Path(option["entry"]), wf))
    chosen = _choose(wf.options, mode, wf)
    for option in chosen:
        entries = [Path(option["entry"]), *(Path(a) for a in option["alternates"])]
        known = set(wf.steps)
        _walk(wf, entries, wf.variables)
        for new in wf.steps.keys() - known:
            wf.steps[new].mode = option["mode"] if len(wf.options) > 1 else None
    return wf, chosen


def _chain_start(entry: Path, wf: _Workflow) -> Path:
    """The first step of the chain ``entry`` is in: a workflow.md may name only a later step file (``Load step:
    ./steps/step-02-discuss.md`` in a late section, v6.0.4's party-mode) while step-01 leads to it; the chain then
    starts at the folder's first step file, when following its next steps reaches ``entry``."""
    number = step_number(entry.stem)
    if number is None or not _in_folders(entry, wf.step_folders):
        return entry
    earlier = sorted(p for p in entry.parent.glob("*.md") if _is_step_file(p) and not is_continuation(p.stem)
                     and (step_number(p.stem) or number) < number)
    path: Path | None = earlier[0] if earlier else None
    seen: set[Path] = set()
    while path is not None and path not in seen and path.is_file():
        if path == entry:
            return earlier[0]
        seen.add(path)
        path = _read_step(path, wf.variables, wf).next
    return entry


# ---------------------------------------------------------------------------------------------------- public


def _step_ids(wf: _Workflow) -> dict[Path, str]:
    """Id of each step: its file stem, prefixed by its folder when another step folder has the same stem.

    Collisions are counted over every file of every step folder, so an id does not depend on the mode loaded.
    """
    every = {p for folder in wf.step_folders for p in folder.glob("*.md")} | set(wf.order)
    stems: dict[str, int] = {}
    for p in every:
        stems[p.stem] = stems.get(p.stem, 0) + 1
    return {p: (p.stem if stems[p.stem] == 1 else f"{p.parent.name}.{p.stem}") for p in wf.order}


def _template_of(frontmatter: Mapping[str, Any]) -> list[str]:
    return [
        str(v)
        for k, v in frontmatter.items()
        if isinstance(v, str) and (k.endswith("Template") or k == "templateFile") and "{" not in v
    ]


def load_bmad_microfile(
    path: Path, *, project_root: Path, variables: dict[str, Any] | None = None, mode: str | None = None
) -> WorkflowSpec:
    """Read a BMAD micro-file workflow (``workflow*.md`` or its folder) into a :class:`WorkflowSpec`.

    Only frontmatter and links of step files are read; step bodies are left for the engine to read when the
    step runs (just-in-time). Problems in the files do not raise: they are listed in ``meta["diagnostics"]``
    (see :func:`lint_bmad_microfile`).

    Each step's ``meta``:

    ``file``
        absolute path of the step file (the engine reads it when the step runs).
    ``frontmatter``
        the step's frontmatter variables, resolved in order against the module config, the workflow's own
        frontmatter and the caller's variables; ``./`` and ``../`` paths are made absolute. ``{{var}}`` runtime
        variables are left for the engine.
    ``next``
        path of the step that follows on ``[C]``/completion (``nextStepFile``, ``nextStep``, or the single later
        step the prose loads), or ``None`` at the end or where the prose offers several (see ``branches``). It may
        name a missing file; :func:`lint_bmad_microfile` reports that as ``broken-chain``.
    ``alt``
        path from ``altStepFile``, or ``None``.
    ``branches``
        other step files this step may load, label -> path: frontmatter keys (``nextStepFile_modeA``,
        ``skipToStepFile``, ``parallel-steps[3]`` …) and prose references (labelled by the target's file stem).
    ``menu``
        options the step presents, in order: ``{"key", "label", "kind", "handler", "line"}`` where ``kind`` is
        ``continue`` | ``advanced-elicitation`` | ``party-mode`` | ``exit`` | ``custom``
        (:func:`stepline.stepchain.parse_menu`).
    ``halts``
        the lines that stop for the person without a menu (:func:`stepline.stepchain.halts_in`).
    ``is_continuation``
        True for ``step-01b-continue``-style files, which the runtime replaces by its own resume logic.
    ``mode``
        the router mode whose entry reaches this step first (``None`` for single-mode workflows).

    The :class:`~stepline.model.WorkflowSpec`'s ``meta`` holds ``workflow_file``, ``output_file`` (pattern),
    ``template``, ``first_step``, ``continuation_step``, ``router`` (for tri-modal workflows: the options the
    engine presents when no mode was chosen), ``mode``, ``config`` and ``diagnostics`` (problems found while
    reading, as dicts; :func:`lint_bmad_microfile` returns them as :class:`Diagnostic` objects).

    Args:
        path: The ``workflow.md`` (or ``workflow-*.md``) file, or the folder holding it.
        project_root: The installed project; ``{project-root}`` and the module config are taken from it.
        variables: Extra variables (a hybrid ``workflow.yaml``'s keys, ``--var`` values); they override
            the module config.
        mode: For a multi-mode router workflow, the mode to load (``"create"``, ``"edit"``, ``"validate"``, a
            flag such as ``"-c"``, or the menu key); ``None`` loads every mode and leaves the choice to the
            engine, which presents ``meta["router"]["options"]``.

    Raises:
        NotFoundError: ``path`` does not exist or holds no workflow.
        UsageError: ``mode`` is unknown, or given for a workflow without modes.
    """
    wf, chosen = _analyse(path, project_root, variables, mode)
    ids = _step_ids(wf)
    steps: list[StepSpec] = []
    ordered = sorted(wf.order, key=lambda p: (_folder_rank(p, wf, chosen), p.name))
    for p in ordered:
        step = wf.steps[p]
        step_mode = step.mode
        output = step.frontmatter.get("outputFile")
        steps.append(
            StepSpec(
                id=ids[p],
                name=step.name,
                description=step.description,
                phase=step_mode or "",
                outputs=[str(output)] if isinstance(output, str) else [],
                templates=_template_of(step.frontmatter),
                source=SourceRef(path=str(p), line=1),
                meta={
                    "file": str(p),
                    "frontmatter": step.frontmatter,
                    "next": str(step.next) if step.next else None,
                    "alt": str(step.alt) if step.alt else None,
                    "branches": {k: str(v) for k, v in step.branches.items()},
                    "menu": step.menu,
                    "halts": step.halts,
                    "points": step.points,
                    "is_continuation": is_continuation(p.stem),
                    "mode": step_mode,
                },
            )
        )
    if not wf.step_folders and not steps:
        steps.append(
            StepSpec(
                id="workflow",
                name=wf.name,
                description=wf.description,
                source=SourceRef(path=str(wf.file), line=1),
                meta={
                    "file": str(wf.file),
                    "frontmatter": {},
                    "next": None,
                    "alt": None,
                    "branches": {},
                    "menu": [],
                    "halts": [],
                    "is_continuation": False,
                    "mode": None,
                },
            )
        )
    first = _first_step(wf, chosen, ids, steps)
    output_file = next((s.outputs[0] for s in steps if s.outputs), None)
    template = next((s.templates[0] for s in steps if s.templates), None)
    continuation = next((s.id for s in steps if s.meta["is_continuation"]), None)
    router = None
    if len(wf.options) > 1:
        options = [
            {
                **o,
                "entry": ids.get(Path(o["entry"])),
                "alternates": [ids.get(Path(a)) for a in o["alternates"]],
            }
            for o in wf.options
        ]
        router = {
            "file": str(wf.file),
            "selected": chosen[0]["mode"] if mode is not None else None,
            "options": options,
        }
    return WorkflowSpec(
        id=wf.name,
        name=wf.name,
        description=wf.description,
        format="bmad-microfile",
        source=SourceRef(path=str(wf.file), line=1),
        root=str(wf.folder),
        variables=wf.variables,
        steps=steps,
        meta={
            "workflow_file": str(wf.file),
            "output_file": output_file,
            "template": template,
            "first_step": first,
            "continuation_step": continuation,
            "router": router,
            "mode": chosen[0]["mode"] if mode is not None else None,
            "config": {"path": str(wf.config_path) if wf.config_path else None},
            "step_folders": [str(f) for f in wf.step_folders],
            "diagnostics": [asdict(d) for d in wf.diagnostics],
        },
    )


def _folder_rank(path: Path, wf: _Workflow, chosen: list[dict[str, Any]]) -> int:
    entry_folders = [Path(o["entry"]).parent for o in chosen]
    if path.parent in entry_folders:
        return entry_folders.index(path.parent)
    return len(entry_folders) + (wf.step_folders.index(path.parent) if path.parent in wf.step_folders else 0)


def _first_step(
    wf: _Workflow, chosen: list[dict[str, Any]], ids: Mapping[Path, str], steps: list[StepSpec]
) -> str | None:
    if len(chosen) == 1:
        return ids.get(Path(chosen[0]["entry"]))
    if not chosen and steps:
        return steps[0].id
    return None


def lint_bmad_microfile(path: Path, project_root: Path) -> list[Diagnostic]:
    """Check a micro-file workflow, every mode, and return its problems, each with file:line.

    Reports frontmatter YAML errors, broken next-step chains, missing referenced files (templates, CSV data,
    step files, ``{project-root}/_bmad/…`` files), unknown variables, a missing module config, and step files
    in the step folders that no entry reaches (whose frontmatter is still checked).
    """
    wf, _ = _analyse(path, project_root, None, None)
    reached = set(wf.steps)
    for folder in wf.step_folders:
        for candidate in sorted(folder.glob("*.md")):
            if candidate not in reached:
                _read(candidate, wf)
                wf.report(
                    "warning",
                    "unreachable-step",
                    f"{folder.name}/{candidate.name} is not reached "
                    "from the workflow's entry step(s) by any next/alt/branch link",
                    candidate,
                    1,
                )
    return list(wf.diagnostics)


# ----------------------------------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Progress:
    """Run state kept in an output document's frontmatter.

    Attributes:
        steps_completed: ``stepsCompleted`` as written: step numbers (``[1, 2]``) or names
            (``['step-01-init']``).
        last_step: ``lastStep`` when present.
        input_documents: ``inputDocuments`` when present.
        path: The document.
    """

    steps_completed: tuple[int | str, ...] = ()
    last_step: int | str | None = None
    input_documents: tuple[str, ...] = ()
    path: str = ""


def read_progress(output_doc: Path) -> Progress:
    """Read ``stepsCompleted``, ``lastStep`` and ``inputDocuments`` from an output document's frontmatter.

    Raises:
        NotFoundError: the document does not exist (a fresh run, not a continuation).
        ReaderError: a state key has the wrong shape; the message names file:line.
    """
    fm = read_frontmatter_file(output_doc)
    completed = fm.data.get("stepsCompleted") or []
    if not isinstance(completed, list) or not all(isinstance(s, int | str) for s in completed):
        raise ReaderError(
            "stepsCompleted must be a list of step numbers or names",
            path=str(output_doc),
            line=fm.line_of("stepsCompleted"),
        )
    last = fm.data.get("lastStep")
    if last is not None and not isinstance(last, int | str):
        raise ReaderError("lastStep must be a step number or name", path=str(output_doc), line=fm.line_of("lastStep"))
    documents = fm.data.get("inputDocuments") or []
    if not isinstance(documents, list):
        raise ReaderError("inputDocuments must be a list", path=str(output_doc), line=fm.line_of("inputDocuments"))
    return Progress(tuple(completed), last, tuple(str(d) for d in documents), str(output_doc))


def _matches(marker: int | str, step: StepSpec) -> bool:
    return marks(marker, step.id.rsplit(".", 1)[-1]) or (isinstance(marker, str) and Path(marker).stem == step.name)


def completed_step_index(progress: Progress, steps: list[StepSpec]) -> int:
    """Return the position in ``steps`` of the furthest completed step, or -1 when none is completed.

    ``stepsCompleted`` entries match a step by number (``2`` matches ``step-02-vision``, not ``step-02b-…``)
    or by name (``'step-01-init'``, with or without ``.md``); ``lastStep`` is used when the list is empty.
    Continuation steps (``step-01b-continue``) never count.
    """
    markers: list[int | str] = list(progress.steps_completed)
    if not markers and progress.last_step is not None:
        markers = [progress.last_step]
    best = -1
    for index, step in enumerate(steps):
        if step.meta.get("is_continuation"):
            continue
        if any(_matches(m, step) for m in markers):
            best = index
    return best


def resume_step_id(progress: Progress, spec: WorkflowSpec) -> str | None:
    """Return the id of the step a continuation resumes at, or None when the last completed step was final.

    Nothing completed means the first step. Otherwise it is the ``next`` of the furthest completed step.
    """
    index = completed_step_index(progress, spec.steps)
    if index < 0:
        first = spec.meta.get("first_step")
        return str(first) if first else (spec.steps[0].id if spec.steps else None)
    following = spec.steps[index].meta.get("next")
    if following is None:
        return None
    return next((s.id for s in spec.steps if s.meta.get("file") == following), None)


def load_csv_data(path: Path, *, referenced_from: str | None = None) -> list[dict[str, str]]:
    """Read a workflow CSV data file (``csvFile``, ``projectTypesCSV`` …) into one dict per row.

    Raises:
        NotFoundError: the file does not exist; the message names who referenced it.
        ReaderError: the file is not UTF-8 text or not CSV, with file:line.
    """
    if not path.is_file():
        who = f" (referenced from {referenced_from})" if referenced_from else ""
        raise NotFoundError(
            f"{path}: CSV data file not found{who}",
            hint="check the csvFile path in the step frontmatter and the installed module",
        )
    with path.open("rb") as handle:
        text = decode_text(handle.read(), path, strip_bom=True)
    reader = csv.DictReader(io.StringIO(text, newline=""))  # lines split as a file opened with newline=""
    try:
        return [{str(k): (v or "") for k, v in row.items() if k is not None} for row in reader]
    except csv.Error as exc:
        raise ReaderError(f"not valid CSV ({exc})", path=str(path), line=reader.line_num) from exc
