"""Where a BMAD project keeps what the sprint loop needs, found on disk (old era and skill era alike).

* the implementation artifacts folder: ``implementation_artifacts`` of the bmm module's config
  (``_bmad/bmm/config.yaml`` + ``config.user.yaml``, or ``[modules.bmm]`` of ``_bmad/config.toml``);
* the board: ``<implementation_artifacts>/sprint-status.yaml``;
* the dev workflow: the skill ``bmad-build-auto`` (v6.11+), else ``bmad-dev-auto``, else ``bmad-dev-story``,
  else the old-era ``workflows/4-implementation/dev-story/workflow.yaml``, searched under ``_bmad/`` and the
  agent skill folders (``.claude/skills``, ``.agents/skills``);
* a story's file: ``<story_location>/<key>.md``, or a skill-era spec ``spec-<key>*.md``; its status from the
  front matter's ``status:`` or an old-era ``Status:`` line;
* the review layers of the dev skill's ``customize.toml`` (``[[workflow.review_layers]]``), merged with the
  team and personal overrides in ``_bmad/custom/`` by ``id`` as BMAD does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepline._placeholders import PROJECT_ROOT, Kind, substitute
from stepline._yaml import load_yaml_text
from stepline.errors import ReaderError
from stepline.formats import load_toml, read_frontmatter, read_text

__all__ = ["DevWorkflow", "ReviewLayer", "SprintProject", "StoryFile", "find_project", "read_story"]

_DEV_SKILLS = ("bmad-build-auto", "bmad-dev-auto", "bmad-dev-story")
_SKILL_HOMES = ("_bmad", ".claude/skills", ".agents/skills", ".cursor/skills", ".opencode/skills")
_STATUS_LINE = re.compile(r"^\s*\**Status\**\s*:\s*\**\s*([A-Za-z][\w -]*?)\s*\**\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ReviewLayer:
    """One review layer: who reviews and with what instruction (``{diff_output}`` etc. substituted later)."""

    id: str
    name: str
    instruction: str


@dataclass(frozen=True, slots=True)
class DevWorkflow:
    """The dev workflow found on disk."""

    name: str
    path: Path
    era: str  # "skill" or "legacy"
    review_layers: tuple[ReviewLayer, ...] = ()


@dataclass(frozen=True, slots=True)
class StoryFile:
    """A story's (or spec's) file and the status it states."""

    path: Path
    status: str | None


@dataclass(frozen=True, slots=True)
class SprintProject:
    """A BMAD project as the sprint loop sees it."""

    root: Path
    artifacts: Path
    board_path: Path
    dev: DevWorkflow | None
    story_dirs: tuple[Path, ...] = field(default_factory=tuple)

    def story_file(self, key: str) -> StoryFile | None:
        """The file of story ``key`` (its spec, in the skill era); None when none exists yet."""
        for folder in self.story_dirs:
            for candidate in (folder / f"{key}.md", *sorted(folder.glob(f"spec-{key}*.md")),
                              *sorted(folder.glob(f"stories/{key}*.md"))):
                if candidate.is_file():
                    return read_story(candidate)
        return None


def read_story(path: Path) -> StoryFile:
    """A story file and its status (front matter ``status:``, else a ``Status:`` line), lower-cased."""
    text = read_text(path)
    status: str | None = None
    if text.startswith("---"):
        try:
            value = read_frontmatter(text, path=str(path)).data.get("status")
        except ReaderError:
            value = None
        status = str(value).strip() if value else None
    if status is None and (match := _STATUS_LINE.search(text)):
        status = match.group(1)
    return StoryFile(path=path, status=status.strip().lower() if status else None)


def _module_config(root: Path) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    toml_path = root / "_bmad" / "config.toml"
    if toml_path.is_file():
        data = load_toml(toml_path)
        merged.update(data.get("core") or {})
        merged.update((data.get("modules") or {}).get("bmm") or {})
    for name in ("config.yaml", "config.user.yaml"):
        path = root / "_bmad" / "bmm" / name
        if path.is_file():
            data = load_yaml_text(read_text(path), path=str(path))
            if isinstance(data, dict):
                merged.update({str(k): v for k, v in data.items()})
    return merged


def _resolve(root: Path, value: object) -> Path:
    text = substitute(str(value), {PROJECT_ROOT: str(root), "project_root": str(root)}, kinds={Kind.VAR})
    path = Path(text)
    return path if path.is_absolute() else root / path


def _review_layers(skill_dir: Path, root: Path) -> tuple[ReviewLayer, ...]:
    """``[[workflow.review_layers]]`` of the skill's customize.toml, with _bmad/custom overrides merged by id
    (a matching id replaces, a new id appends; an empty instruction disables the layer)."""
    layers: dict[str, dict[str, Any]] = {}
    sources = [skill_dir / "customize.toml", root / "_bmad" / "custom" / f"{skill_dir.name}.toml",
               root / "_bmad" / "custom" / f"{skill_dir.name}.user.toml"]
    for source in sources:
        if source.is_file():
            for raw in ((load_toml(source).get("workflow") or {}).get("review_layers") or []):
                if isinstance(raw, dict) and raw.get("id"):
                    layers[str(raw["id"])] = {**layers.get(str(raw["id"]), {}), **raw}
    return tuple(ReviewLayer(id=lid, name=str(raw.get("name") or lid), instruction=str(raw.get("instruction") or ""))
                 for lid, raw in layers.items() if str(raw.get("instruction") or "").strip())


def find_dev_workflow(root: Path) -> DevWorkflow | None:
    """The dev workflow installed in the project (see the module docstring for the order)."""
    for name in _DEV_SKILLS:
        for home in _SKILL_HOMES:
            base = root / home
            if not base.is_dir():
                continue
            found = sorted(base.glob(f"**/{name}/SKILL.md"))
            if found:
                skill_dir = found[0].parent
                return DevWorkflow(name=name, path=found[0], era="skill",
                                   review_layers=_review_layers(skill_dir, root))
    legacy = sorted((root / "_bmad").glob("**/4-implementation/dev-story/workflow.yaml")) if (
        root / "_bmad").is_dir() else []
    if legacy:
        return DevWorkflow(name="dev-story", path=legacy[0], era="legacy")
    return None


def find_project(root: Path) -> SprintProject:
    """The sprint loop's view of the BMAD project at ``root``."""
    config = _module_config(root)
    artifacts_value = config.get("implementation_artifacts") or config.get("sprint_artifacts")
    if artifacts_value:
        artifacts = _resolve(root, artifacts_value)
    elif config.get("output_folder"):
        artifacts = _resolve(root, config["output_folder"]) / "implementation-artifacts"
    else:
        artifacts = root / "_bmad-output" / "implementation-artifacts"
    board_path = artifacts / "sprint-status.yaml"
    if not board_path.is_file():
        others = [p for p in (root / "_bmad-output" / "sprint-status.yaml", root / "docs" / "sprint-status.yaml")
                  if p.is_file()]
        board_path = others[0] if others else board_path
    story_dirs = [artifacts]
    for key in ("story_location", "dev_story_location"):
        if config.get(key):
            story_dirs.insert(0, _resolve(root, config[key]))
    if board_path.is_file():
        match = re.search(r"^story_location:\s*['\"]?([^'\"\n#]+?)['\"]?\s*$", read_text(board_path), re.MULTILINE)
        if match and "{" not in match.group(1):
            story_dirs.insert(0, _resolve(root, match.group(1)))
    unique = tuple(dict.fromkeys(p.resolve() if p.exists() else p for p in [*story_dirs, board_path.parent]))
    return SprintProject(root=root, artifacts=artifacts, board_path=board_path, dev=find_dev_workflow(root),
                         story_dirs=unique)
