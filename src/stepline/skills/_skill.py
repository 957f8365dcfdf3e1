"""Reading one Agent Skill folder: its files, its entry document, its step-file graph or its sections.

A skill is a folder with ``SKILL.md`` (frontmatter ``name``, ``description``). Its *entry document* is the
``workflow.md`` beside it when there is one (``SKILL.md`` then only tells the model to render it), else
``SKILL.md`` itself. When the entry document links to step files (``step-*.md``: by
``[[bmad-snapshot:step-02-plan.md]]``, ``./step-02-plan.md`` or ``steps/step-01-x.md``) the skill is a
*step-file* skill: the steps are those files, reached by following the links. Otherwise it is a *sections*
skill: its ``## `` sections after "On Activation" are the steps, and when it has intent modes (``**Create.**
… Run `## Discovery`, then `## Finalize`.``) each mode runs the sections it names. A *shim*
(``description: Deprecated — forwards to bmad-prd (create intent).``) forwards to another skill.

Pure: reads files, never imports the engine.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from stepline._paths import escape, inside
from stepline._placeholders import Kind, find
from stepline.errors import ReaderError
from stepline.formats import Diagnostic, read_frontmatter, read_text
from stepline.stepchain import Checkpoint, Point, PointKind, checkpoints_in, folder_mode, is_continuation

__all__ = [
    "Checkpoint",
    "Link",
    "Mode",
    "Section",
    "SkillDoc",
    "SkillFiles",
    "StepFile",
    "checkpoints_in",
    "find_skill",
    "is_skill",
    "missing_render_entry",
    "read_doc",
    "read_skill_files",
    "referenced_sections",
    "route_step_id",
    "routed_file",
    "scripts_in",
    "skill_folder",
    "skill_md_missing",
    "step_sections",
    "unrunnable",
]

SkillKind = Literal["step-files", "sections", "shim"]

_BACKTICK_PATH = re.compile(r"`((?:\{skill-root\}/|\./|\.\./)?(?:[\w.-]+/)*[\w.-]+"
                            r"\.(?:md|csv|html|yaml|yml|json|toml|py))`")
_BARE_PATH = re.compile(r"(?<![`\w/.(\"'])(\./(?:[\w.-]+/)*[\w.-]+\.md)(?![`\w])")
#: "(e.g. `agents/foo.md`)": an example of a convention, not a reference
_EXAMPLE = re.compile(r"\(e\.g\.[^)]*\)|\be\.g\.,?\s*`[^`]*`")
_HEADING = re.compile(r"^(#{2,3})\s+(.+?)\s*#*\s*$")
_SECTION_REF = re.compile(r"`##\s+([^`]+)`")
_MODE = re.compile(r"^\*\*([A-Z][\w -]*?)(?:\s*\(([^)]*)\))?\.?\*\*\.?\s*(.*)")
_FORWARD = re.compile(r"forwards to\s+`?([a-z0-9][a-z0-9-]*)`?(?:\s*\(([\w -]+?) intent\))?", re.I)
_STATUS_ROUTE = re.compile(r"((?:`[\w-]+`\s*/\s*)*`[\w-]+`)\s*(?:→|->)\s*(?:`?\[\[bmad-snapshot:([\w./-]+\.md)\]\]`?"
                           r"|`(\.{0,2}/?(?:[\w.-]+/)*step-[\w.-]+\.md)`)")
_HAND_OVER = re.compile(r"(?i)\b(?:execute|follow)\b")
_SCRIPT = re.compile(r"(?:uv run(?:\s+--[\w-]+)*|python3?)\s+\"?((?:\{project-root\}|\{skill-root\})?/?"
                     r"(?:[\w.-]+/)*[\w.-]+\.py)\"?")


@dataclass(frozen=True, slots=True)
class Link:
    """A reference from one document to a file of the skill, with the line it is on."""

    target: str  # the file's path relative to the skill root ("step-02-plan.md", "steps/step-01-x.md")
    line: int
    text: str  # the whole line, for conditions and diagnostics
    snapshot: bool  # written as [[bmad-snapshot:…]]
    section: str  # the heading it sits under ("NEXT", "INSTRUCTIONS", …)
    #: named by a next-step frontmatter key (``nextStepFile: 'compile.md'``): a step file, whatever its name
    chained: bool = False

    @property
    def to_step(self) -> bool:
        """Whether it leads to a step file: one named ``step-*.md``, or one a frontmatter key chains on to."""
        return self.chained or _is_step_name(self.target)

    @property
    def hands_over(self) -> bool:
        """Whether its line hands the run over to the file ("Load, read the full file, and then execute `…`",
        "Read fully and follow: `…`"), rather than mentioning it."""
        return _HAND_OVER.search(self.text) is not None


@dataclass(slots=True)
class SkillDoc:
    """One Markdown document of the skill, split into frontmatter, body and headed sections."""

    path: Path
    text: str
    frontmatter: dict[str, Any]
    body_line: int
    links: list[Link] = field(default_factory=list)
    scripts: list[tuple[int, str]] = field(default_factory=list)
    #: what is wrong with its frontmatter (not YAML, never closed): the raw text is used, the linter reports it
    problems: list[Diagnostic] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StepFile:
    """A step file and where it may go next.

    ``routes`` are the links to other step files other than the default; ``status_routes`` maps a frontmatter
    ``status`` value to the step file a line of the step sends it to (``draft`` → step-02-plan.md).
    """

    name: str  # relative to the skill root
    next: str | None
    routes: tuple[Link, ...]
    status_routes: tuple[tuple[str, str, int], ...]


@dataclass(frozen=True, slots=True)
class Section:
    """A ``## `` section of SKILL.md: its heading, its text (heading included) and where it starts."""

    title: str
    text: str
    line: int

    @property
    def slug(self) -> str:
        """The section's step id: ``section-`` and its title in lower-case words joined by dashes."""
        words = re.findall(r"[a-z0-9]+", self.title.lower())
        return "section-" + ("-".join(words) or "untitled")


@dataclass(frozen=True, slots=True)
class Mode:
    """An intent mode of a sections skill (Create, Update, Validate): the sections it runs, in order."""

    name: str
    text: str
    line: int
    sections: tuple[str, ...]


@dataclass(slots=True)
class SkillFiles:
    """Everything read from one skill folder."""

    root: Path
    name: str
    description: str
    skill: SkillDoc
    entry: SkillDoc
    kind: SkillKind
    steps: dict[str, StepFile] = field(default_factory=dict)
    docs: dict[str, SkillDoc] = field(default_factory=dict)
    first_step: str | None = None
    sections: list[Section] = field(default_factory=list)
    activation: str = ""
    modes: list[Mode] = field(default_factory=list)
    forward_to: str | None = None
    forward_intent: str | None = None
    #: a mode router's entry steps (its entry document names a first step in each ``steps-c/``, ``steps-v/`` …
    #: folder; a ``step-01b-resume`` it names is the mode ``resume``): mode -> step file, in the order it names
    #: them; empty for one chain
    mode_entries: dict[str, str] = field(default_factory=dict)


def is_skill(path: Path) -> bool:
    """Whether ``path`` is a skill folder or its ``SKILL.md``."""
    return (path.is_dir() and (path / "SKILL.md").is_file()) or (path.is_file() and path.name == "SKILL.md")


def find_skill(name: str, near: Path, project_root: Path | None) -> Path | None:
    """The folder of skill ``name``: in the project's ``_bmad`` tree, else in the source tree ``near`` is in."""
    roots: list[Path] = []
    if project_root is not None and (project_root / "_bmad").is_dir():
        roots.append(project_root / "_bmad")
    roots.extend(list(near.parents)[:4])
    for root in roots:
        for candidate in sorted(root.rglob(f"{name}/SKILL.md")):
            if "render" not in candidate.relative_to(root).parts[:1]:
                return candidate.parent
    return None


def route_step_id(skill_root: Path, file: Path) -> str:
    """The step id of a file a route loads: ``route-`` and its path in the skill (``route-references-validate``)."""
    rel = file.resolve().relative_to(skill_root.resolve()).with_suffix("")
    return "route-" + (re.sub(r"[\s/\\]+", "-", rel.as_posix()).strip("-") or "file")


def routed_file(files: SkillFiles, point: Point) -> Path | None:
    """The file a route point loads, when it is one the runtime runs as a step: a Markdown file of the skill that is
    not its SKILL.md, its entry document, one of its chain's step files or a template."""
    if point.kind is not PointKind.ROUTE or point.resolved is None or point.resolved.suffix != ".md" \
            or "template" in point.resolved.name.lower():  # a template is copied and filled, not followed
        return None
    path = point.resolved.resolve()
    root = files.root.resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    rel = path.relative_to(root).as_posix()
    if rel in files.steps or path in (files.skill.path.resolve(), files.entry.path.resolve()):
        return None
    return path


def skill_md_missing(folder: Path) -> str | None:
    """Why ``folder`` looks like a skill whose ``SKILL.md`` is missing (a ``skill.md`` spelled otherwise, or a
    ``customize.toml`` with no SKILL.md beside it), else None. Such a folder is no skill: its workflow.md would
    otherwise be taken for a micro-file workflow, or the folder skipped by ``stepline validate``."""
    if not folder.is_dir() or (folder / "SKILL.md").is_file():
        return None
    misnamed = next((p.name for p in sorted(folder.iterdir()) if p.name.lower() == "skill.md"), None)
    if misnamed is not None:
        return f"the skill's file is {misnamed}, not SKILL.md (rename it SKILL.md: the name is case-sensitive)"
    if (folder / "customize.toml").is_file():
        return "customize.toml but no SKILL.md: not a skill (restore the skill's SKILL.md)"
    return None


def skill_folder(path: Path) -> Path:
    """The skill folder of ``path`` (the folder itself, or the folder of its SKILL.md / workflow.md)."""
    return path if path.is_dir() else path.parent


def _is_step_name(name: str) -> bool:
    return Path(name).name.startswith("step-") and name.endswith(".md")


def _resolve(root: Path, doc_dir: Path, raw: str) -> str | None:
    """A path written in a document, relative to the skill root (None: outside the skill, or a placeholder)."""
    if raw.startswith("{skill-root}/"):
        candidate = root / raw[len("{skill-root}/"):]
    elif raw.startswith(("./", "../")):  # from the document; some releases mean the skill root (steps/ -> steps/)
        candidate = doc_dir / raw
        if not candidate.exists() and (root / raw).exists():
            candidate = root / raw
    else:  # bare paths resolve from the skill root; a sibling of the document is accepted too
        candidate = root / raw
        if not candidate.exists() and (doc_dir / raw).exists():
            candidate = doc_dir / raw
    if not candidate.exists() and _is_step_name(raw):  # `./step-01.md` from workflow.md, kept in steps/
        kept = [p for p in root.glob(f"steps*/{Path(raw).name}") if p.is_file()]
        candidate = kept[0] if len(kept) == 1 else candidate
    real = inside(root, candidate)
    return real.relative_to(root.resolve()).as_posix() if real is not None else None


def _module_file(root: Path, raw: str) -> str | None:
    """A file of the skill's module, outside the skill, that a step names as its next one (Skill Forge's
    ``nextStepFile: 'shared/health-check.md'``, from the module's root): its path from the skill root
    (``../shared/health-check.md``), else None. The module's root is the folder under ``_bmad`` (installed) or
    the nearest one holding ``module.yaml`` (a source tree); nothing above it is reached."""
    module = next((p for p in root.parents if p.parent.name == "_bmad" or (p / "module.yaml").is_file()), None)
    if module is None or raw.startswith(("/", "{")):
        return None
    candidate = inside(module, raw)
    if candidate is None or not candidate.is_file():
        return None
    return Path(os.path.relpath(candidate, root.resolve())).as_posix()


def read_doc(root: Path, path: Path) -> SkillDoc:
    """Read one Markdown document of the skill and find its links and script calls (line by line)."""
    text = read_text(path)
    fm = read_frontmatter(text, path=str(path))
    doc = SkillDoc(path=path, text=text, frontmatter=dict(fm.data), body_line=fm.body_line,
                   problems=list(fm.diagnostics))
    for key, value in fm.data.items():  # nextStepFile: './step-02.md' (the micro-file way some releases keep)
        if isinstance(value, str) and value.endswith(".md") and "{" not in value.removeprefix("{skill-root}/") and (
                key.endswith("StepFile") or Path(value).name.startswith("step-")):
            target = _resolve(root, path.parent, value if value.startswith(("./", "../", "{")) else "./" + value)
            if target is not None and not (root / target).is_file():
                target = _module_file(root, value) or target
            if target is not None:
                doc.links.append(Link(target, fm.line_of(key) or 1, f"{key}: {value}", False,
                                      "NEXT" if key == "nextStepFile" else "frontmatter",
                                      chained=key.endswith("StepFile")))
    section = ""
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        heading = _HEADING.match(line) if not in_fence else None
        if heading:
            section = heading[2].strip()
        for link in find(line, {Kind.SNAPSHOT}):
            doc.links.append(Link(link.name, number, line.strip(), True, section))
        if section.lower() == "conventions":
            continue  # its paths are examples of the conventions ("Bare paths (e.g. `steps/step-01.md`)")
        for match in [*_BACKTICK_PATH.finditer(_EXAMPLE.sub("", line)), *_BARE_PATH.finditer(line)]:
            raw = match[1]
            target = _resolve(root, path.parent, raw)
            if target is not None and target not in ("SKILL.md",):
                doc.links.append(Link(target, number, line.strip(), False, section))
    doc.scripts = scripts_in(text)
    return doc


#: a menu's handler line: "- IF V (Validate): read fully and follow: ./steps-v/step-v-01.md"
_MENU_BRANCH = re.compile(r"^[\s\-*]*\**\s*(?i:if)\s+['\"]?(?:[A-Z]{1,3}|\d{1,2})\b['\"]?\s*[(:]")


def scripts_in(text: str) -> list[tuple[int, str]]:
    """``(line, script path as written)`` of every ``uv run …/X.py`` or ``python3 X.py`` call in ``text``."""
    return [(number, match[1]) for number, line in enumerate(text.splitlines(), start=1)
            for match in _SCRIPT.finditer(line)]


def _sections(doc: SkillDoc) -> list[Section]:
    """The ``## `` sections of a document, outside code fences."""
    lines = doc.text.splitlines()
    starts: list[tuple[int, str]] = []
    in_fence = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if not in_fence and index + 1 >= doc.body_line and line.startswith("## "):
            starts.append((index, line[3:].strip().strip("#").strip()))
    sections = []
    for i, (start, title) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(lines)
        sections.append(Section(title, "\n".join(lines[start:end]).strip("\n"), start + 1))
    return sections


def _step_file(files: SkillFiles, name: str, doc: SkillDoc) -> StepFile:
    """Where a step file goes: its NEXT link (else its last forward link), and its other step links."""
    links = [link for link in doc.links if link.to_step and link.target != name]
    nexts = [link for link in links if link.section.upper().startswith("NEXT")]
    default: Link | None = nexts[0] if nexts else None
    if default is None:
        forward = [link for link in links if _order(link.target) > _order(name)
                   and "EARLY EXIT" not in link.text.upper()]
        default = forward[-1] if forward else None
    routes = tuple(link for link in links if default is None or link.target != default.target)
    status: list[tuple[str, str, int]] = []
    for link in links:
        for match in _STATUS_ROUTE.finditer(link.text):
            target = match[2] or _resolve(files.root, doc.path.parent, match[3])
            if target is None:
                continue
            for value in re.findall(r"`([\w-]+)`", match[1]):
                if all(value != s[0] for s in status):
                    status.append((value, target, link.line))
    return StepFile(name, default.target if default else None, routes, tuple(status))


def _order(name: str) -> tuple[int, str]:
    number = re.search(r"step-(\d+)", Path(name).name)
    return (int(number[1]) if number else 10_000, Path(name).name)


def _modes(sections: list[Section]) -> list[Mode]:
    """The intent modes of a sections skill: bold-labelled paragraphs of a section named like "Intent …"."""
    holder = next((s for s in sections if "intent" in s.title.lower() and "mode" in s.title.lower()), None)
    if holder is None:
        return []
    names = {s.title.lower(): s.title for s in sections}
    modes: list[Mode] = []
    for offset, line in enumerate(holder.text.splitlines()):
        match = _MODE.match(line.strip())
        if not match:
            continue
        refs = tuple(names[r.strip().lower()] for r in _SECTION_REF.findall(line) if r.strip().lower() in names)
        modes.append(Mode(match[1].strip(), line.strip(), holder.line + offset, refs))
    return modes


def _find_shim_target(files: SkillFiles) -> None:
    match = _FORWARD.search(files.description)
    if match and match[1] != files.name:
        files.kind = "shim"
        files.forward_to = match[1]
        files.forward_intent = match[2].strip().lower() if match[2] else None


def read_skill_files(path: Path) -> SkillFiles:
    """Read the skill at ``path`` (its folder or SKILL.md); a missing SKILL.md or frontmatter is a ReaderError."""
    root = skill_folder(path).resolve()
    skill_path = root / "SKILL.md"
    if not skill_path.is_file():
        raise ReaderError("not a skill: no SKILL.md here", path=str(root), hint="pass a skill folder or its SKILL.md")
    skill = read_doc(root, skill_path)
    skill.problems.extend(_symlinks_out(skill_folder(path), root))
    name = str(skill.frontmatter.get("name") or root.name)
    description = str(skill.frontmatter.get("description") or "")
    entry = read_doc(root, root / "workflow.md") if (root / "workflow.md").is_file() else skill
    files = SkillFiles(root=root, name=name, description=description, skill=skill, entry=entry, kind="sections")
    files.docs[entry.path.relative_to(root).as_posix()] = entry
    first = _first_step(root, entry)
    if first is not None:
        files.kind = "step-files"
        files.first_step = first.target
        for link in entry.links:
            folder = Path(link.target).parent.name
            if _is_step_name(link.target) and folder.startswith("steps-"):
                resumes = is_continuation(Path(link.target).stem)  # [R] Resume: a mode of its own
                files.mode_entries.setdefault("resume" if resumes else folder_mode(folder), link.target)
        if len(files.mode_entries) < 2:
            files.mode_entries = {}
        for target in [first.target, *files.mode_entries.values()]:
            _walk_steps(files, target)
    files.sections = _sections(entry)
    activation = next((s for s in files.sections if "activation" in s.title.lower()), None)
    files.activation = activation.text if activation else ""
    if files.kind == "sections":
        files.modes = _modes(files.sections)
    _find_shim_target(files)
    return files


def _first_step(root: Path, entry: SkillDoc) -> Link | None:
    """The link to the step file a run starts at: the first the entry document hands the run over to that is a
    step file (named ``step-*``, or chaining on through its frontmatter: ``nextStepFile: 'review.md'``, the
    chain some modules keep in ``references/``), else the first ``step-*`` file it names."""
    for link in entry.links:
        if link.hands_over and (link.to_step or _chains_on(root, link.target)):
            return link
    return next((link for link in entry.links if link.to_step), None)


def _chains_on(root: Path, name: str) -> bool:
    """Whether the Markdown file ``name`` of the skill names its next step in its frontmatter."""
    path = root / name
    return path.suffix == ".md" and path.is_file() and any(link.chained for link in read_doc(root, path).links)


def _symlinks_out(folder: Path, root: Path) -> list[Diagnostic]:
    """The symlinks that lead a skill's files out of it, each an error naming where it leads: the skill folder
    itself linked from outside its module's folder, and any Markdown file of the skill whose real path is
    outside the skill (the runtime reads the real path, so a link out would carry that file into requests)."""
    found = []
    if inside(folder.absolute().parent, root) is None:
        found.append(Diagnostic("error", "link-leaves-skill", f"the skill folder is a symlink to {root}, outside "
                                f"{folder.absolute().parent}", str(folder / "SKILL.md"), 1))
    for path in sorted(folder.absolute().rglob("*.md")):
        if (out := escape(folder.absolute(), path)) is not None:
            found.append(Diagnostic("error", "link-leaves-skill", f"a symlink to {out.real}, outside the skill",
                                    str(path), 1))
    return found


def _walk_steps(files: SkillFiles, first: str) -> None:
    """Read every step file reachable from ``first`` (a missing one is left for the linter to name)."""
    pending = [first]
    while pending:
        name = pending.pop()
        if name in files.steps or not (files.root / name).is_file():
            continue
        doc = read_doc(files.root, files.root / name)
        files.docs[name] = doc
        step = _step_file(files, name, doc)
        files.steps[name] = step
        pending.extend(t for t in [step.next, *(r.target for r in step.routes)] if t and t not in files.steps)


def missing_render_entry(files: SkillFiles) -> Diagnostic | None:
    """SKILL.md runs ``render_skill.py``, which renders the skill's ``workflow.md``, but there is none."""
    if (files.root / "workflow.md").is_file():
        return None
    line = next((n for n, text in enumerate(files.skill.text.splitlines(), start=1) if "render_skill.py" in text), 0)
    if not line:
        return None
    return Diagnostic("error", "missing-file", "SKILL.md renders the skill's workflow.md (render_skill.py), which "
                      "does not exist", str(files.skill.path), line)


def unrunnable(files: SkillFiles) -> list[Diagnostic]:
    """What keeps the skill from running as BMAD would render it, each with file:line: SKILL.md's frontmatter
    is not YAML, the workflow.md it renders is missing, the entry document or a step file links to a file of the
    skill that does not exist (the runtime would otherwise end the run where the link breaks, as if the skill
    were done), or — a skill with workflow.md — any of its Markdown files has a ``[[bmad-snapshot:…]]`` to no
    file or is not UTF-8. BMAD's ``render_skill.py`` refuses each of these."""
    found = list(files.skill.problems)
    entry = missing_render_entry(files)
    if entry is not None:
        found.append(entry)
    for name, doc in files.docs.items():
        found.extend(_snapshot_problems(files.root, doc.path, doc.text))
        step = files.steps.get(name)
        for link in doc.links:
            # a later step's menu branch (its [V] to another skill's file) fails when chosen, not the whole skill;
            # the entry document's mention of a step (a table of them) is no link the run follows
            branch = step is not None and (link.target != step.next or _MENU_BRANCH.match(link.text) is not None)
            mention = step is None and not link.hands_over and link.target != files.first_step and \
                link.target not in files.mode_entries.values()
            if not link.snapshot and not branch and not mention and link.to_step and \
                    not (files.root / link.target).is_file():
                found.append(Diagnostic("error", "missing-file", f"{link.target} names no file of the skill",
                                        str(doc.path), link.line))
    if (files.root / "workflow.md").is_file():  # rendered: render_skill.py resolves the links of every source
        read = {doc.path for doc in files.docs.values()} | {files.skill.path}
        for path in sorted(p for p in files.root.rglob("*.md") if p not in read):
            found.extend(_snapshot_problems(files.root, path, read_text(path)))
    return found


def _snapshot_problems(root: Path, path: Path, text: str) -> list[Diagnostic]:
    """Each ``[[bmad-snapshot:…]]`` of ``text`` that leaves the skill (``../``, or a symlink out: its real path
    is outside the skill's) or names no file of it, with file:line."""
    found = []
    for link in find(text, {Kind.SNAPSHOT}):
        if (out := escape(root, link.name)) is not None:
            found.append(Diagnostic("error", "link-leaves-skill", f"{link.text} leaves the skill (it is {out.real})",
                                    str(path), link.line))
        elif not (root / link.name).is_file():
            found.append(Diagnostic("error", "missing-file", f"{link.text} names no file of the skill", str(path),
                                    link.line))
    return found


def step_sections(files: SkillFiles) -> list[Section]:
    """The sections of a sections skill that run as steps: those after "On Activation", else all but preamble."""
    sections = files.sections
    index = next((i for i, s in enumerate(sections) if "activation" in s.title.lower()), None)
    return sections[index + 1:] if index is not None else []


def referenced_sections(text: str, sections: list[Section]) -> list[Section]:
    """The sections ``text`` names as ``## Title`` (handed over with the step that names them)."""
    wanted = {r.strip().lower() for r in _SECTION_REF.findall(text)}
    return [s for s in sections if s.title.lower() in wanted]
