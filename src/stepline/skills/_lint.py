"""``stepline validate`` for Agent Skills: every structural problem of a skill, with file:line.

What is checked: SKILL.md's frontmatter (``name``, ``description``); ``customize.toml`` parses, and the
files its fields name (``prd_template = "assets/prd-template.md"``) exist; in every Markdown file of the
skill, ``[[bmad-snapshot:…]]`` links name a file of the skill, paths into the skill's folders
(``references/x.md``, ``./step-02.md``, ``{skill-root}/assets/y.md``) exist, ``{workflow.<name>}`` names a
field of the customization, ``{{.key}}`` a config value (when the project has a config), and the scripts it
runs (``uv run {project-root}/_bmad/scripts/memlog.py``, ``scripts/x.py``) exist; every step file is reached
by some route from the entry; a shim's target skill exists.
"""

from __future__ import annotations

import re
from pathlib import Path

from stepline._placeholders import Kind, find
from stepline.errors import ReaderError
from stepline.formats import Diagnostic
from stepline.skills._customize import load_central_config, resolve_customization
from stepline.skills._load import find_skill, module_of
from stepline.skills._render import RenderEnv, unknown_tokens
from stepline.skills._skill import (
    SkillDoc,
    missing_render_entry,
    read_doc,
    read_skill_files,
    skill_folder,
    unrunnable,
)

__all__ = ["lint_skill", "skill_kind"]

_SKILL_DIRS = {"references", "assets", "steps", "scripts", "templates", "agents", "types", "review-prompts", "data"}
_PATHLIKE = re.compile(r"^(?:\./)?(?:[\w.-]+/)+[\w.-]+\.\w+$")
_SHARED_SCRIPT = "{project-root}/_bmad/scripts/"


def skill_kind(path: Path) -> str:
    """The kind of the skill at ``path``: ``step-files``, ``sections`` or ``shim``."""
    return read_skill_files(path).kind


def _checked_path(root: Path, target: str) -> bool:
    """Whether a link target is one the linter vouches for (a file of the skill, not a document it writes)."""
    first = target.split("/", 1)[0]
    in_skill_folder = "/" in target and (first in _SKILL_DIRS or (root / first).is_dir())
    return in_skill_folder or Path(target).name.startswith("step-")


def _script_exists(raw: str, skill_root: Path, project_root: Path) -> bool:
    if raw.startswith(_SHARED_SCRIPT):
        name = raw[len(_SHARED_SCRIPT):]
        if (project_root / "_bmad" / "scripts" / name).is_file():
            return True
        return any((parent / "scripts" / name).is_file() for parent in skill_root.parents)  # a source tree
    if raw.startswith("{project-root}/"):
        return (project_root / raw[len("{project-root}/"):]).is_file()
    rel = raw.removeprefix("{skill-root}/").removeprefix("./")
    return (skill_root / rel).is_file() or "{" in rel


def _lint_doc(doc: SkillDoc, root: Path, project_root: Path, env: RenderEnv, module: str | None,
              check_config: bool, runs: bool) -> list[Diagnostic]:
    """``runs``: the skill runs the document (SKILL.md, its workflow.md, a step file); in any other (a reference,
    a knowledge document) a step file named in prose (``step-05-gate-decision.md``, another workflow's
    ``src/…/steps-c/step-05.md``) is a mention, not a file of the skill, unless written as a link (``./step-…``)."""
    out: list[Diagnostic] = []
    path = str(doc.path)
    sources = {p.relative_to(root).as_posix() for p in root.rglob("*.md")}
    for snapshot in find(doc.text, {Kind.SNAPSHOT}):
        if snapshot.name not in sources:
            out.append(Diagnostic("error", "broken-snapshot-link",
                                  f"{snapshot.text} names no Markdown file of the skill", path, snapshot.line))
    shape = doc.path.relative_to(root).parts[0] in ("templates", "assets") if doc.path != root else False
    for link in doc.links:  # a template's or asset's links are its output's (./architecture.md), not the skill's
        mention = not runs and Path(link.target).name.startswith("step-") and f"./{Path(link.target).name}" \
            not in link.text
        if not link.snapshot and not shape and not mention and _checked_path(root, link.target) and \
                not (root / link.target).exists():
            out.append(Diagnostic("error", "missing-file", f"{link.target} does not exist in the skill", path,
                                  link.line))
    for number, token, why in unknown_tokens(doc.text, env, module):
        if token.startswith("{{") and not check_config:
            continue
        code = "unknown-field" if token.startswith("{") and not token.startswith("{{") else "unknown-config"
        out.append(Diagnostic("error", code, f"{token}: {why}", path, number))
    for number, raw in doc.scripts:
        if not _script_exists(raw, root, project_root):
            out.append(Diagnostic("error", "missing-script", f"script {raw} does not exist", path, number))
    return out


def _lint_customization(root: Path, values: dict[str, object]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    toml_path = root / "customize.toml"
    lines = toml_path.read_text(encoding="utf-8", errors="replace").splitlines() if toml_path.is_file() else []
    for block in values.values():
        if not isinstance(block, dict):
            continue
        for key, value in block.items():
            names_skill_file = isinstance(value, str) and _PATHLIKE.match(value) and "{" not in value and \
                value.split("/", 1)[0] in _SKILL_DIRS | {p.name for p in root.iterdir() if p.is_dir()}
            if names_skill_file and not (root / str(value)).exists():
                line = next((i for i, text in enumerate(lines, start=1) if text.strip().startswith(key)), 1)
                out.append(Diagnostic("error", "missing-file", f"{key} = {value!r}: no such file in the skill",
                                      str(toml_path), line))
    return out


def lint_skill(path: Path, project_root: Path) -> list[Diagnostic]:
    """Every problem of the skill at ``path`` (its folder or SKILL.md)."""
    root = skill_folder(path).resolve()
    try:
        files = read_skill_files(path)  # as given: a skill folder linked from outside is an error
        custom = resolve_customization(root, project_root)
    except ReaderError as exc:
        return [Diagnostic("error", "unreadable", exc.detail, exc.path or str(root), exc.line)]
    out: list[Diagnostic] = []
    skill_md = str(files.skill.path)
    for key in ("name", "description"):
        if not files.skill.frontmatter.get(key):
            out.append(Diagnostic("error", "skill-frontmatter", f"SKILL.md has no {key!r} in its frontmatter",
                                  skill_md, 1))
    if files.skill.frontmatter.get("name") and files.name != root.name:
        out.append(Diagnostic("warning", "skill-name", f"name {files.name!r} differs from the folder {root.name!r}",
                              skill_md, 2))
    module = module_of(root)
    central, _ = load_central_config(project_root, module)
    check_config = any(central.get(k) for k in ("core", "modules"))
    env = RenderEnv(project_root=project_root, skill_root=root, central=central, customization=custom.values,
                    names={})
    for doc_path in sorted(root.rglob("*.md")):
        try:
            doc = files.docs.get(doc_path.relative_to(root).as_posix()) or read_doc(root, doc_path)
        except ReaderError as exc:
            out.append(Diagnostic("error", "unreadable", exc.detail, exc.path or str(doc_path), exc.line))
            continue
        runs = doc.path == root / "SKILL.md" or doc.path.relative_to(root).as_posix() in files.docs
        out.extend(_lint_doc(doc, root, project_root, env, module, check_config, runs))
        if runs:
            out.extend(doc.problems)  # an asset's frontmatter is its output's example, not the skill's to read
    out.extend(_lint_customization(root, custom.values))
    render_entry = missing_render_entry(files)
    if render_entry is not None:
        out.append(render_entry)
    out.extend(d for d in unrunnable(files) if d.code == "link-leaves-skill")  # symlinks and links out of it
    reached = set(files.steps)
    if files.kind == "step-files":
        for step in sorted(root.rglob("step-*.md")):
            rel = step.relative_to(root).as_posix()
            if rel not in reached:
                out.append(Diagnostic("warning", "unreachable-step", f"no route from {files.entry.path.name} reaches "
                                      f"{rel}", str(step), 1))
    if files.kind == "shim" and find_skill(str(files.forward_to), root, project_root) is None:
        out.append(Diagnostic("error", "shim-target", f"forwards to {files.forward_to!r}, which is not installed "
                              "or in this source tree", skill_md, 3))
    return out
