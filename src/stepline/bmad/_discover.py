"""The ``discover_inputs`` protocol of the BMAD runner (R-E5), done by the runtime instead of the model.

For each group of a workflow's ``input_file_patterns`` the sharded documents are tried first, then the whole
document: ``FULL_LOAD`` loads every shard (``index.md`` first, then alphabetical), ``SELECTIVE_LOAD`` loads the
one shard named by ``sharded_single`` once its ``{{var}}`` is known, ``INDEX_GUIDED`` loads the index and the
documents it links to. The group's text goes to ``{<group>_content}``; a group with no file is an empty
variable and a note, not an error. Nothing here asks anyone: the caller first resolves the names
:func:`selective_names` reports, so the same files always give the same result.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepline._placeholders import Kind, Unresolved, find, substitute

__all__ = ["DiscoveredGroup", "Discovery", "discover_inputs", "infer_selective", "selective_names"]

_LINK = re.compile(r"\]\(\s*<?([^)\s#>]+\.md)>?(?:#[^)]*)?\s*\)|(?<![\w/.(-])([\w./-]+\.md)\b")
_STRATEGIES = ("FULL_LOAD", "SELECTIVE_LOAD", "INDEX_GUIDED")


@dataclass(slots=True)
class DiscoveredGroup:
    """What was loaded for one pattern group."""

    name: str
    variable: str
    strategy: str
    source: str | None
    files: list[str] = field(default_factory=list)
    note: str = ""

    def line(self) -> str:
        """One line of the discovery report, in the runner's format."""
        if not self.files:
            return f"○ No {self.name} files found ({self.note})" if self.note else f"○ No {self.name} files found"
        shown = ", ".join(self.files[:6]) + (", …" if len(self.files) > 6 else "")
        count = f"{len(self.files)} {self.source} file{'s' if len(self.files) > 1 else ''}"
        extra = f" ({self.note})" if self.note else ""
        return f"✓ Loaded {{{self.variable}}} from {count}: {shown}{extra}"


@dataclass(slots=True)
class Discovery:
    """The discovery report and the content variable of every group."""

    groups: list[DiscoveredGroup]
    contents: dict[str, str]

    def report(self) -> str:
        """The report shown to the executor and kept in the journal."""
        return "\n".join(group.line() for group in self.groups)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form for the journal (without the loaded text)."""
        return {"groups": [{"name": g.name, "variable": g.variable, "strategy": g.strategy, "source": g.source,
                            "files": g.files, "note": g.note} for g in self.groups]}


def selective_names(patterns: Mapping[str, Any], variables: Mapping[str, Any]) -> list[str]:
    """The ``{{var}}`` names a ``SELECTIVE_LOAD`` group needs that have no value yet (to be asked for)."""
    names: list[str] = []
    for config in patterns.values():
        if not isinstance(config, dict) or _strategy(config) != "SELECTIVE_LOAD":
            continue
        for token in find(str(config.get("sharded_single") or ""), {Kind.RUNTIME}):
            if variables.get(token.name) in (None, "") and token.name not in names:
                names.append(token.name)
    return names


_STORY_KEY = re.compile(r"^(\d+)[-.](\d+)\b")


def infer_selective(name: str, variables: Mapping[str, Any]) -> str | None:
    """A ``SELECTIVE_LOAD`` variable inferred from context, as the protocol allows ("ask user for value OR infer
    from context"): ``epic_num`` from a story the run already names (a ``story_*`` value whose file name is a story
    key, ``1-2-user-auth.md`` -> ``1``); None when nothing names it."""
    if name != "epic_num":
        return None
    for key, value in variables.items():
        if "story" in str(key) and isinstance(value, str) and value.strip():
            match = _STORY_KEY.match(Path(value.strip()).name)
            if match:
                return match[1]
    return None


def discover_inputs(patterns: Mapping[str, Any], variables: Mapping[str, Any], project_root: Path) -> Discovery:
    """Load every pattern group of ``input_file_patterns`` as the runner's protocol says."""
    groups: list[DiscoveredGroup] = []
    contents: dict[str, str] = {}
    for name, config in patterns.items():
        if not isinstance(config, dict):
            continue
        group = _load_group(str(name), config, variables, project_root)
        groups.append(group)
        contents[group.variable] = _concatenate(group.files, project_root)
    return Discovery(groups, contents)


def _strategy(config: Mapping[str, Any]) -> str:
    value = str(config.get("load_strategy") or "FULL_LOAD").strip().upper()
    return value if value in _STRATEGIES else "FULL_LOAD"


def _load_group(name: str, config: Mapping[str, Any], variables: Mapping[str, Any], root: Path) -> DiscoveredGroup:
    strategy = _strategy(config)
    group = DiscoveredGroup(name=name, variable=f"{name}_content", strategy=strategy, source=None)
    sharded = _matches(config.get("sharded"), variables, root)
    files: list[Path] = []
    if strategy == "SELECTIVE_LOAD" and config.get("sharded_single"):
        files = _matches(config["sharded_single"], variables, root)
        group.source = "selective"
        if not files and sharded:
            group.note = f"no shard matches {config['sharded_single']}"
    elif strategy == "INDEX_GUIDED" and sharded:
        files, group.note = _index_guided(config, sharded, variables, root)
        group.source = "index-guided"
    elif sharded:
        files = sharded
        group.source = "sharded"
        if strategy == "SELECTIVE_LOAD":
            group.note = "no sharded_single pattern to select by; every shard loaded"
    if not files:
        files = sorted(_matches(config.get("whole"), variables, root), key=lambda p: str(p).lower())
        group.source = "whole" if files else None
    group.files = [_shown(path, root) for path in files]
    return group


def _matches(pattern: Any, variables: Mapping[str, Any], root: Path) -> list[Path]:
    """Files matching a glob pattern (relative to the project root), index.md of each folder first."""
    if not isinstance(pattern, str) or not pattern.strip():
        return []
    try:
        rendered = substitute(pattern.strip(), variables, nested=True, strict=True)
    except Unresolved:
        return []
    full = rendered if Path(rendered).is_absolute() else str(root / rendered)
    found = [Path(p) for p in glob.glob(full, recursive=True) if Path(p).is_file()]
    return sorted(found, key=lambda p: (str(p.parent).lower(), p.name.lower() != "index.md", p.name.lower()))


def _index_guided(config: Mapping[str, Any], sharded: list[Path], variables: Mapping[str, Any],
                  root: Path) -> tuple[list[Path], str]:
    """The index and, in the index's order, every shard it links to (when in doubt, load it)."""
    indexes = _matches(config.get("sharded_index"), variables, root) or [p for p in sharded if p.name == "index.md"]
    if not indexes:
        return sharded, "no index.md; every shard loaded"
    chosen: list[Path] = []
    for index in indexes:
        chosen.append(index)
        for match in _LINK.finditer(index.read_text(encoding="utf-8", errors="replace")):
            target = (index.parent / (match.group(1) or match.group(2))).resolve()
            if target.is_file() and target not in chosen and target != index.resolve():
                chosen.append(target)
    unnamed = [p for p in sharded if p.resolve() not in {c.resolve() for c in chosen}]
    note = f"{len(unnamed)} shard(s) the index does not name were not loaded" if unnamed else ""
    return chosen, note


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _concatenate(files: list[str], root: Path) -> str:
    texts: list[str] = []
    for shown in files:
        path = Path(shown) if Path(shown).is_absolute() else root / shown
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(f"<!-- source: {shown} -->\n{text}" if len(files) > 1 else text)
    return "\n\n".join(texts)
