"""The BMAD legacy reader: ``workflow.yaml`` + ``instructions.xml|md`` -> :class:`WorkflowSpec` (R-F1, R-F4).

One :class:`StepSpec` per top-level ``<step>`` of the instructions (its instruction tree serialised in
``meta["nodes"]``). Instructions written as plain markdown with ``## Step N: title`` headings get one step per
heading, and a file with neither is a single step. A ``workflow.yaml`` whose ``instructions`` names a
``workflow*.md`` is a hybrid workflow: it is returned with format ``bmad-hybrid`` and no steps, its config
resolved and ``meta["workflow_md"]`` pointing at the micro-file workflow that runs it.

:func:`lint_bmad_legacy` reports every problem of one workflow for ``stepline validate``. The reader never
executes or writes anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepline._paths import link_out
from stepline._placeholders import PROJECT_ROOT, Kind, find, substitute_value
from stepline.bmad._config import (
    WorkflowConfig,
    YamlDocument,
    load_workflow_config,
    parse_yaml,
    resolve_path,
)
from stepline.bmad._instructions import (
    Anchor,
    Goto,
    InvokeTask,
    InvokeWorkflow,
    Node,
    Step,
    TemplateOutput,
    parse_instructions,
    walk,
)
from stepline.bmad._microfile import LINK_LEAVES_PROJECT
from stepline.bmad._points import legacy_points
from stepline.errors import NotFoundError, ReaderError
from stepline.formats import Diagnostic, read_text
from stepline.model import SourceRef, StepSpec, WorkflowFormat, WorkflowSpec
from stepline.stepchain import prose_lines

__all__ = ["is_bmad_legacy", "lint_bmad_legacy", "load_bmad_legacy"]

_HEADING_STEP = re.compile(
    r"^#{1,6}[ \t]+Step[ \t]+(?P<n>\d+(?:\.\d+)?[a-z]?)\b[ \t]*[:.\-–—]?[ \t]*(?P<title>.*)$",
    re.MULTILINE | re.IGNORECASE,
)
_STEP_TAG = re.compile(r"<step\b", re.IGNORECASE)
_PHASE_DIR = re.compile(r"^(?P<n>\d+)-(?P<name>[a-z][\w-]*)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_META_KEYS = (
    "installed_path",
    "default_output_file",
    "config_source",
    "standalone",
    "required_tools",
    "tags",
    "execution_hints",
    "input_file_patterns",
    "web_bundle",
    "author",
    "version",
    "parent_workflow",
)


#: A markdown workflow whose body is the runner's XML: ``<workflow>`` holding ``<step n=…>``.
_XML_STEPS = re.compile(r"<workflow\b[^>]*>.*?<step\s+n=", re.DOTALL)
_FRONTMATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)
_LOAD_CONFIG = re.compile(r"Load config from `(?P<path>[^`]+)`")
#: prose handing the run over to a file of the same folder: "Read fully and follow: `./instructions.md`"
_HAND_OVER = re.compile(r"(?i)\b(?:follow|execute)\b:?\s+`(?:\./|\{skill-root\}/|\{installed_path\}/)?"
                        r"(?P<name>[\w.-]+\.md)`")
#: A ``### Paths`` item: ``- `name` = `value` `` (a note in parentheses may follow).
_PATH_ITEM = re.compile(r"^\s*-\s+`(?P<key>[\w-]+)`\s*=\s*(?:`(?P<code>[^`]*)`|\"(?P<quoted>[^\"]*)\")",
                        re.MULTILINE)
#: An ``### Input Files`` row: ``| name | description | whole: `…`, sharded: `…` | SELECTIVE_LOAD |``.
_INPUT_ROW = re.compile(r"^\|\s*(?P<name>[\w-]+)\s*\|(?P<description>[^|]*)\|(?P<patterns>[^|]*`[^|]*)\|"
                        r"\s*(?P<strategy>[A-Z_]+)\s*\|", re.MULTILINE)
_PATTERN = re.compile(r"(?P<kind>\w+):\s*`(?P<glob>[^`]+)`")


def holds_xml_steps(path: Path) -> bool:
    """Whether ``path`` is a ``workflow*.md`` or ``SKILL.md`` whose body is ``<workflow>`` XML steps (v6.1-v6.10
    moved create-story, dev-story, code-review … from workflow.yaml + instructions.xml into one such file; a
    skill's SKILL.md may point at it, and v6.5 and newer hold the steps in SKILL.md itself), or that hands the
    run over to a file of its folder holding them ("Read fully and follow: `./instructions.md`", v6.2-v6.9
    document-project): run by the legacy interpreter, step by step, its config read from the prose. A folder
    holds them when one of its files does."""
    if path.is_dir():
        return any(_has_xml_steps(md) for md in _markdown_candidates(path))
    if path.suffix != ".md" or not (path.name.startswith("workflow") or path.name == "SKILL.md"):
        return False
    return any(_has_xml_steps(md) for md in [path, *_handed_over(path)])


def _has_xml_steps(path: Path) -> bool:
    """Whether ``path`` holds ``<workflow>`` XML steps outside code fences (a guide's examples are no steps)."""
    return path.is_file() and _XML_STEPS.search("\n".join(line for _, line in prose_lines(read_text(path), 1))) \
        is not None


def _prose(text: str) -> str:
    """A markdown workflow's text before its ``<workflow>`` steps (all of it when it has none)."""
    end = text.find("<workflow")
    return text if end < 0 else text[:end]


def _handed_over(path: Path) -> list[Path]:
    """The files of ``path``'s folder its prose hands the run over to (``follow`` / ``execute`` `./x.md`)."""
    if not path.is_file():
        return []
    names = dict.fromkeys(m["name"] for m in _HAND_OVER.finditer(_prose(read_text(path))))
    return [path.parent / name for name in names if (path.parent / name) != path]


def _markdown_candidates(folder: Path) -> list[Path]:
    """The files of ``folder`` that may hold XML steps: its SKILL.md first (a skill's own body wins over the
    workflow.md it may also ship), then its ``workflow*.md``, then the files those hand the run over to."""
    leading = [folder / "SKILL.md", *sorted(folder.glob("workflow*.md"))]
    handed = [md for lead in leading for md in _handed_over(lead) if md not in leading]
    return [*leading, *dict.fromkeys(handed)]


def markdown_workflow(path: Path) -> Path:
    """The file with XML steps at ``path`` (the file or the one it hands over to, or the one in the folder)."""
    candidates = [path, *_handed_over(path)] if path.is_file() else _markdown_candidates(path)
    return next(md for md in candidates if _has_xml_steps(md))


def _markdown_document(path: Path) -> YamlDocument:
    """What a workflow.yaml would hold, read from a markdown workflow's prose: ``name``/``description`` from
    its frontmatter, ``config_source`` from "Load config from `…`", each ``- `key` = `value` `` item, the
    ``Input Files`` table as ``input_file_patterns``; ``instructions`` is the file itself. The prose of the
    SKILL.md or workflow.md that hands the run over to it is read first (its own prose wins)."""
    text = read_text(path)
    data: dict[str, Any] = {"installed_path": str(path.parent), "date": "system-generated"}
    lines: dict[str, int] = {}

    # a skill's workflow.md may have no frontmatter: the skill's SKILL.md names it then
    for named in (path, path.parent / "SKILL.md"):
        front = _FRONTMATTER.match(text if named == path else read_text(named) if named.is_file() else "")
        parsed = parse_yaml(front.group(1), path=str(named), first_line=2) if front is not None else None
        if parsed is not None and isinstance(parsed.data, dict):
            # the workflow's own frontmatter may define variables its prose uses (CIS: `main_config: '{project-
            # root}/…/config.yaml'` for "Load config from `{main_config}`"); a SKILL.md lends only its name
            own = [k for k, v in parsed.data.items() if isinstance(v, str | int | float | bool)] if named == path \
                else []
            for key in dict.fromkeys(["name", "description", *own]):
                if key in parsed.data and key not in data:
                    data[key] = parsed.data[key]
                    if named == path and key in parsed.lines:
                        lines[key] = parsed.lines[key]
    leading = [md for md in _markdown_candidates(path.parent) if md != path and path in _handed_over(md)]
    for doc in [*leading, path]:
        _read_prose(_prose(read_text(doc)), data, lines if doc == path else {})
    data["instructions"] = str(path)
    return YamlDocument(data=data, lines=lines)


def _read_prose(prose: str, data: dict[str, Any], lines: dict[str, int]) -> None:
    """Put the config source, path items and Input Files table of ``prose`` into ``data`` (their lines into
    ``lines``)."""
    def line_of(offset: int) -> int:
        return prose.count("\n", 0, offset) + 1

    source = _LOAD_CONFIG.search(prose)
    if source is not None:
        data["config_source"], lines["config_source"] = source.group("path"), line_of(source.start())
    for item in _PATH_ITEM.finditer(prose):
        value = item.group("code") if item.group("code") is not None else item.group("quoted")
        data[item.group("key")], lines[item.group("key")] = value, line_of(item.start())
    patterns: dict[str, Any] = {}
    for row in _INPUT_ROW.finditer(prose):
        group: dict[str, Any] = {"description": row.group("description").strip(),
                                 "load_strategy": row.group("strategy")}
        group.update({p.group("kind"): p.group("glob") for p in _PATTERN.finditer(row.group("patterns"))})
        patterns[row.group("name")] = group
    if patterns:
        data["input_file_patterns"] = patterns


def is_bmad_legacy(path: Path) -> bool:
    """Whether ``path`` is a ``workflow.yaml`` (or a folder holding one) with an ``instructions`` key."""
    target = path / "workflow.yaml" if path.is_dir() else path
    if target.suffix not in (".yaml", ".yml") or not target.is_file():
        return False
    try:
        head = target.read_bytes()  # as bytes: a workflow.yaml that is not UTF-8 is still one (its reader says where)
    except OSError:
        return False
    return re.search(rb"^instructions\s*:", head, re.MULTILINE) is not None


def load_bmad_legacy(path: Path, *, project_root: Path, variables: dict[str, Any] | None = None) -> WorkflowSpec:
    """Read a BMAD legacy (or hybrid) workflow into the canonical model.

    Args:
        path: the ``workflow.yaml`` file, or the folder holding it.
        project_root: the folder ``{project-root}`` stands for (holding ``_bmad/``).
        variables: caller overrides (``--var k=v``), applied after the workflow's own values.

    Raises:
        NotFoundError: ``path`` does not exist.
        ReaderError: the YAML does not parse, the config file is missing, variables form a cycle, or the
            instructions file cannot be found; the message names file:line and the fix.
    """
    read = _read(path, project_root, variables)
    errors = [d for d in read.diagnostics if d.severity == "error" and d.code in _FATAL]
    if errors or read.spec is None:
        first = next(iter(errors or [d for d in read.diagnostics if d.severity == "error"]), None)
        if first is None:
            raise ReaderError("the workflow could not be read", path=str(path))
        raise ReaderError(first.message, path=first.path, line=first.line)
    read.spec.meta["structure_problems"] = [{"path": d.path, "line": d.line, "message": d.message}
                                            for d in structure_repairs(read.diagnostics)]
    return read.spec


#: Control-flow tags whose repaired nesting makes the step structure a guess, and the repairs that mean so.
_CONTROL_TAGS = ("step", "substep", "check", "if")
_REPAIRS = ("unclosed-tag", "misnested-tag", "stray-close-tag")


def structure_repairs(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The parse repairs of control-flow tags (``<check>`` closed by ``</step>``, …): the reader closed the open
    element at its parent's end, as an HTML parser does; the run says so at its start (``validate`` warns)."""
    found = []
    for diag in diagnostics:
        tag = re.match(r"</?([\w-]+)>", diag.message)
        if diag.code in _REPAIRS and tag and tag.group(1) in _CONTROL_TAGS:
            found.append(diag)
    return found


def lint_bmad_legacy(path: Path, project_root: Path) -> list[Diagnostic]:
    """Report every problem of one legacy workflow: parse errors, missing files, unknown variables, bad gotos.

    Never raises for a problem in the workflow: a YAML syntax error becomes an ``error`` diagnostic.
    """
    try:
        read = _read(path, project_root, None)
    except ReaderError as exc:
        where = f"{exc.path}:{exc.line}: " if exc.line else f"{exc.path}: "
        code = "yaml-syntax" if "YAML" in exc.message else "unreadable"
        return [Diagnostic("error", code, exc.message.removeprefix(where), exc.path or str(path), exc.line)]
    except NotFoundError as exc:
        return [Diagnostic("error", "missing-file", exc.message, str(path))]
    return read.diagnostics


# Problems that make the workflow impossible to load (the rest are reported by lint only).
_FATAL = {"yaml-syntax", "missing-config", "config-source", "variable-cycle", "missing-instructions", "not-utf8",
          LINK_LEAVES_PROJECT}


@dataclass(slots=True)
class _Read:
    spec: WorkflowSpec | None
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _read(path: Path, project_root: Path, variables: dict[str, Any] | None) -> _Read:
    markdown = holds_xml_steps(path) and not (path / "workflow.yaml").is_file()
    target = markdown_workflow(path) if markdown else path / "workflow.yaml" if path.is_dir() else path
    if not target.is_file():
        raise NotFoundError(f"{target}: no such workflow file", hint="pass a workflow.yaml or its folder")
    project_root = project_root.resolve()
    cfg = load_workflow_config(target, project_root=project_root, variables=variables,
                               parsed=_markdown_document(target) if markdown else None)
    where = str(target)
    read = _Read(spec=None, diagnostics=list(cfg.diagnostics))
    _confined(target, project_root, "", where, 1, read.diagnostics)
    if cfg.config_path is not None:
        _confined(cfg.config_path, project_root, "config_source is ", where, cfg.line("config_source"),
                  read.diagnostics)
    instructions_value = cfg.document.get("instructions")
    if instructions_value is None:
        read.diagnostics.append(
            Diagnostic(
                "error",
                "missing-instructions",
                "workflow.yaml has no 'instructions' key; add instructions: \"{installed_path}/instructions.md\"",
                where,
                1,
            )
        )
        return read
    text, instructions_path = _instructions_text(cfg, instructions_value, read.diagnostics)
    if text is None:
        return read
    _check_component_files(cfg, read.diagnostics)
    meta = _workflow_meta(cfg, instructions_path)
    if (
        instructions_path is not None
        and not markdown
        and instructions_path.name.startswith("workflow")
        and instructions_path.suffix == ".md"
    ):
        meta["workflow_md"] = str(instructions_path)
        read.spec = _workflow_spec(cfg, target, "bmad-hybrid", [], meta)
        return read
    source = str(instructions_path) if instructions_path else where
    steps, preamble = _steps(text, source, read.diagnostics)
    meta["preamble"] = [node.to_dict() for node in preamble]
    meta["step_source"] = steps[0].found_by
    specs = _step_specs(steps, text, source, cfg, target)
    _check_instruction_refs(steps, preamble, cfg, source, read.diagnostics)
    read.spec = _workflow_spec(cfg, target, "bmad-legacy", specs, meta)
    return read


def _workflow_spec(
    cfg: WorkflowConfig, target: Path, fmt: WorkflowFormat, steps: list[StepSpec], meta: dict[str, Any]
) -> WorkflowSpec:
    name = cfg.document.get("name")
    return WorkflowSpec(
        id=str(name or target.parent.name),
        name=str(name or ""),
        description=str(cfg.document.get("description") or ""),
        format=fmt,
        source=SourceRef(path=str(target)),
        root=str(target.parent),
        variables=cfg.values,
        steps=steps,
        meta=meta,
    )


def _instructions_text(
    cfg: WorkflowConfig, value: Any, diagnostics: list[Diagnostic]
) -> tuple[str | None, Path | None]:
    """Return the instructions text and file; embedded instructions (a list or tagged text) have no file."""
    where, line = str(cfg.path), cfg.line("instructions")
    if isinstance(value, list):
        return "\n".join(str(item) for item in value), None
    if isinstance(value, str) and ("\n" in value.strip() or "<step" in value):
        return value, None
    located = _locate(cfg, value, "instructions", diagnostics)
    if located is None or not located.is_file():
        shown = located if located is not None else value
        diagnostics.append(
            Diagnostic(
                "error",
                "missing-instructions",
                f"instructions file {shown} does not exist; fix "
                "'instructions' or install the module (stepline bmad install SRC)",
                where,
                line,
            )
        )
        return None, None
    if _confined(located, cfg.project_root, "instructions is ", where, line, diagnostics):
        return None, None
    try:
        return read_text(located), located
    except OSError as exc:
        diagnostics.append(Diagnostic("error", "missing-instructions",
                                      f"cannot read instructions {located}: {exc.strerror or exc}", where, line))
    except ReaderError as exc:  # not UTF-8: the diagnostic points into the instructions file
        diagnostics.append(Diagnostic("error", "not-utf8", f"{exc.detail}; {exc.hint}",
                                      str(located), exc.line))
    return None, None


def _locate(cfg: WorkflowConfig, value: Any, key: str, diagnostics: list[Diagnostic]) -> Path | None:
    """Resolve a component path; if ``{installed_path}`` is not installed, use the workflow's folder."""
    resolved = resolve_path(value, cfg.project_root)
    if resolved is None or _exists(resolved):
        return resolved
    installed = resolve_path(cfg.document.get("installed_path"), cfg.project_root)
    if installed is not None and not _exists(installed):
        try:
            relative = resolved.relative_to(installed)
        except ValueError:
            return resolved
        local = cfg.path.parent / relative
        if _exists(local):
            diagnostics.append(
                Diagnostic(
                    "info",
                    "not-installed",
                    f"{key}: installed_path {installed} does not exist; using {local} "
                    "(install the module with `stepline bmad install SRC` to run from _bmad/)",
                    str(cfg.path),
                    cfg.line(key),
                )
            )
            return local
    return resolved


def _check_component_files(cfg: WorkflowConfig, diagnostics: list[Diagnostic]) -> None:
    """Template, validation/checklist and every installed data file named by the workflow must exist."""
    where = str(cfg.path)
    bmad_root = cfg.project_root / "_bmad"
    for key, value in cfg.document.items():
        if key in ("instructions", "installed_path", "config_source") or not isinstance(value, str) or not value:
            continue
        if key not in ("template", "validation", "checklist") and not _looks_like_path(value):
            continue
        if find(value, {Kind.VAR}):
            continue
        located = _locate(cfg, value, key, diagnostics)
        if located is None:
            continue
        component = key in ("template", "validation", "checklist")
        inside_install = _is_within(located, bmad_root) or _is_within(located, cfg.path.parent)
        if not (component or inside_install):
            continue
        if _exists(located):
            _confined(located, cfg.project_root, f"'{key}' names ", where, cfg.line(key), diagnostics)
        else:
            diagnostics.append(
                Diagnostic(
                    "error" if component else "warning",
                    "missing-file",
                    f"'{key}' names {located}, which does not exist; fix the path or add the file",
                    where,
                    cfg.line(key),
                )
            )


def _confined(path: Path, root: Path, named: str, where: str, line: int | None, diagnostics: list[Diagnostic]) -> bool:
    """Report ``path`` when symlinks lead it out of the project ``root`` (an error: the run would read the file
    out there and send it to the model), at ``where``:``line``, which names it as ``named`` says; True if so."""
    real = link_out(path, root)
    if real is None:
        return False
    what = f"{named}{path}, a symlink" if named else f"{path} is a symlink"
    diagnostics.append(Diagnostic("error", LINK_LEAVES_PROJECT, f"{what} to {real}, outside the project; copy the "
                                  "file into the project", where, line))
    return True


def _looks_like_path(value: str) -> bool:
    """A single-line value with a folder separator and no glob or runtime variable: a file reference."""
    return (
        "/" in value
        and "\n" not in value
        and len(value) < 400
        and not any(mark in value for mark in ("*", "{{", "://"))
    )


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def _is_within(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


def _workflow_meta(cfg: WorkflowConfig, instructions_path: Path | None) -> dict[str, Any]:
    doc = cfg.document
    meta: dict[str, Any] = {key: doc[key] for key in _META_KEYS if key in doc}
    meta["instructions"] = str(instructions_path) if instructions_path else None
    for key in ("template", "validation", "checklist"):
        value = doc.get(key)
        if value is False or value is None:
            meta[key] = value if key == "template" else None
        else:
            located = _locate(cfg, value, key, [])
            meta[key] = str(located) if located is not None else value
    meta["template_workflow"] = bool(meta.get("template"))
    meta["config_path"] = str(cfg.config_path) if cfg.config_path else None
    meta["unresolved_variables"] = sorted({name for names in cfg.unresolved.values() for name in names})
    meta["runtime_variables"] = sorted(
        {p.name for value in _strings(doc) for p in find(value, {Kind.RUNTIME})}
    )
    return meta


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@dataclass(slots=True)
class _Part:
    """One step of the instructions: its ``<step>`` node (None for heading steps) and where it lies."""

    step: Step | None
    nodes: list[Node]
    found_by: str  # "tags", "headings" or "document"
    first: int
    last: int
    label: str | None
    title: str | None = None


def _steps(text: str, source: str, diagnostics: list[Diagnostic]) -> tuple[list[_Part], list[Node]]:
    """Split instructions into steps: ``<step>`` tags, else ``## Step N`` headings, else one whole step."""
    headings = list(_HEADING_STEP.finditer(text))
    if not headings or _STEP_TAG.search(text):
        parsed = parse_instructions(text, path=source)
        diagnostics.extend(parsed.diagnostics)
        tagged = parsed.steps()
        if tagged:
            preamble = [node for node in parsed.nodes if not isinstance(node, Step)]
            return [
                _Part(step, step.children, "tags", step.line, step.end_line or step.line, step.n) for step in tagged
            ], preamble
        if not headings:
            return [_Part(None, parsed.nodes, "document", 1, text.count("\n") + 1, "1")], []
    preamble_result = parse_instructions(text[: headings[0].start()], path=source)
    diagnostics.extend(preamble_result.diagnostics)
    preamble = preamble_result.nodes
    parts: list[_Part] = []
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        first = text.count("\n", 0, heading.start()) + 1
        body = text[heading.end() : end]
        section = parse_instructions(body, path=source, first_line=first)
        diagnostics.extend(section.diagnostics)
        nodes = section.nodes
        last = first + text.count("\n", heading.start(), end)
        parts.append(_Part(None, nodes, "headings", first, last, heading.group("n"), heading.group("title").strip()))
    return parts, preamble


def _step_specs(parts: list[_Part], text: str, source: str, cfg: WorkflowConfig, target: Path) -> list[StepSpec]:
    lines = text.splitlines()
    phase = _phase(target)
    template = cfg.document.get("template")
    used: set[str] = set()
    specs: list[StepSpec] = []
    for index, part in enumerate(parts, start=1):
        step = part.step
        step_id = _unique(_safe_id(part.label, index), used)
        goal = (step.goal or step.title) if step is not None else part.title
        outputs = [name for node in walk(part.nodes) if isinstance(node, TemplateOutput) for name in node.variables]
        nodes = [node.to_dict() for node in part.nodes]
        meta: dict[str, Any] = {
            "n": part.label,
            "found_by": part.found_by,
            "nodes": nodes,
            "points": legacy_points(nodes, file=Path(source), base=target.parent,
                                    condition=step.if_ if step is not None else None),
        }
        if step is not None:
            meta.update(
                {
                    key: value
                    for key, value in (
                        ("optional", step.optional),
                        ("if", step.if_),
                        ("repeat", step.repeat),
                        ("for-each", step.for_each),
                        ("tag", step.tag),
                        ("id", step.id),
                        ("attrs", step.attrs),
                    )
                    if value
                }
            )
            parsed_if = step.to_dict().get("parsed")
            if parsed_if is not None:
                meta["parsed_if"] = parsed_if
        specs.append(
            StepSpec(
                id=step_id,
                name=goal or f"Step {part.label}",
                description=goal or "",
                phase=phase,
                outputs=outputs,
                templates=[str(template)] if outputs and isinstance(template, str) else [],
                body="\n".join(lines[part.first - 1 : part.last]),
                source=SourceRef(path=source, line=part.first),
                meta=meta,
            )
        )
    return specs


def _safe_id(label: str | None, index: int) -> str:
    cleaned = _UNSAFE.sub("-", label or "").strip("-.")
    return f"step-{cleaned or index}"


def _unique(candidate: str, used: set[str]) -> str:
    name, counter = candidate, 2
    while name in used:
        name = f"{candidate}-{counter}"
        counter += 1
    used.add(name)
    return name


def _phase(target: Path) -> str:
    """The BMAD phase of a workflow, from a ``<n>-<name>`` folder in its path ("Phase 4 Implementation")."""
    for part in target.parts:
        match = _PHASE_DIR.match(part)
        if match:
            return f"Phase {match.group('n')} {match.group('name').replace('-', ' ').title()}"
    return ""


def _check_instruction_refs(
    parts: list[_Part], preamble: list[Node], cfg: WorkflowConfig, source: str, diagnostics: list[Diagnostic]
) -> None:
    """Gotos must land on a step or anchor; invoked workflows and tasks must exist."""
    labels: set[str] = set()
    anchors: set[str] = set()
    every: list[Node] = list(walk(preamble))
    for part in parts:
        if part.label:
            labels.add(part.label)
        every.extend(walk([part.step] if part.step is not None else part.nodes))
    for node in every:
        if isinstance(node, Step) and node.n:
            labels.add(node.n)
        elif isinstance(node, Anchor):
            anchors.add(node.id)
    known = {**cfg.values, PROJECT_ROOT: str(cfg.project_root)}
    for node in every:
        if isinstance(node, Goto):
            _check_goto(node, labels, anchors, source, diagnostics)
        elif isinstance(node, InvokeWorkflow) and node.path:
            _check_target(node.path, "invoke-workflow", node.line, known, cfg, source, diagnostics)
        elif isinstance(node, InvokeTask) and node.path:
            _check_target(node.path, "invoke-task", node.line, known, cfg, source, diagnostics)


def _check_goto(node: Goto, labels: set[str], anchors: set[str], source: str, diagnostics: list[Diagnostic]) -> None:
    if node.anchor is not None and node.anchor not in anchors:
        diagnostics.append(
            Diagnostic(
                "error",
                "goto-target",
                f"goto anchor {node.anchor!r}: no <anchor id="
                f'"{node.anchor}"/> in this file; add the anchor or fix the name',
                source,
                node.line,
            )
        )
    if node.step is None or node.step in labels:
        return
    number = re.match(r"\d+(?:\.\d+)?", node.step)
    fallback = number.group(0) if number and number.group(0) in labels else None
    if fallback is not None:
        diagnostics.append(
            Diagnostic(
                "warning",
                "goto-target",
                f"goto step {node.step!r}: there is no step "
                f'{node.step}; the runtime jumps to step {fallback} (write step="{fallback}")',
                source,
                node.line,
            )
        )
    elif node.onward:
        diagnostics.append(
            Diagnostic(
                "warning",
                "goto-target",
                f"{node.text!r}: there is no step {node.step}; the runtime goes on to the step after this one "
                f"(steps are {', '.join(sorted(labels)) or 'none'}; name one of them)",
                source,
                node.line,
            )
        )
    else:
        diagnostics.append(
            Diagnostic(
                "error",
                "goto-target",
                f"goto step {node.step!r}: there is no such step (steps are {', '.join(sorted(labels)) or 'none'})",
                source,
                node.line,
            )
        )


def _check_target(
    raw: str,
    tag: str,
    line: int,
    known: dict[str, Any],
    cfg: WorkflowConfig,
    source: str,
    diagnostics: list[Diagnostic],
) -> None:
    value = substitute_value(raw, known, kinds={Kind.VAR})
    if not isinstance(value, str):
        return
    unknown = sorted({p.name for p in find(value, {Kind.VAR})})
    if unknown:
        diagnostics.append(
            Diagnostic(
                "warning",
                "unknown-variable",
                f"<{tag}> path {raw!r} uses {', '.join('{' + n + '}' for n in unknown)}, which no variable defines",
                source,
                line,
            )
        )
        return
    if find(value, {Kind.RUNTIME}):
        return
    target = resolve_path(value, cfg.project_root)
    if target is None:
        return
    if target.is_dir():
        inner = next((target / name for name in ("workflow.yaml", "workflow.md") if (target / name).is_file()), None)
        if inner is None:
            diagnostics.append(
                Diagnostic(
                    "error",
                    "missing-file",
                    f"<{tag}> path {raw!r} is a folder without a workflow.yaml or workflow.md",
                    source,
                    line,
                )
            )
        else:
            diagnostics.append(
                Diagnostic(
                    "warning",
                    "folder-reference",
                    f"<{tag}> path {raw!r} names a folder; the runtime runs {inner.name} in it (name the file)",
                    source,
                    line,
                )
            )
        return
    if _exists(target):
        _confined(target, cfg.project_root, f"<{tag}> path {raw!r} is ", source, line, diagnostics)
    else:
        diagnostics.append(
            Diagnostic(
                "error",
                "missing-file",
                f"<{tag}> path {raw!r} resolves to {target}, which does not exist",
                source,
                line,
            )
        )
