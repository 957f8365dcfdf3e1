"""Shards: pieces of project knowledge, each at three tiers made deterministically, never by a model.

A shard comes from a shards file (YAML, see ``shards.schema.json``), from a markdown document split at its
headings, or from any other text file (one shard per file). Its tiers:

* ``nano`` (≈50 tokens): the shard's title path and the first sentence of its text;
* ``micro`` (≈500 tokens): the title, an outline of its sub-headings (or a code file's declarations) and the
  first sentence of each paragraph;
* ``full`` (≥2000 tokens): the text itself, cut only beyond ``full_tokens`` (4000 by default, never below 2000).

A shards file may give ``nano`` and ``micro`` by hand; the made ones are used where it does not.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepline._yaml import find_yaml_line, load_yaml_text
from stepline.context._tiers import FULL_MIN_TOKENS, TIER_TOKENS, TIERS, Tier
from stepline.context._tokens import clip_to_tokens
from stepline.errors import ConfigError
from stepline.formats import read_text

__all__ = [
    "FULL_MIN_TOKENS",
    "TIERS",
    "TIER_TOKENS",
    "Shard",
    "ShardsFile",
    "Tier",
    "build_shards_schema",
    "load_shards_file",
    "shards_from_markdown",
    "shards_from_text_file",
    "shards_schema",
]


_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*(?=\s|$)")
_DECLARATION = re.compile(
    r"^[ \t]*(?:export[ \t]+)?(?:async[ \t]+)?(?:def|class|function|interface|type|enum|struct|impl|trait|fn|func"
    r"|pub[ \t]+fn|module|package|const[ \t]+\w+[ \t]*=[ \t]*(?:async[ \t]*)?\()\b")
_SLUG = re.compile(r"[^a-z0-9]+")
_MARKS = re.compile(r"(\*\*|__|`|^\s*>\s?)")


@dataclass(slots=True, eq=False)
class Shard:
    """One piece of knowledge at its three tiers; ``source`` is the project-relative file it came from.

    ``nano`` and ``micro`` are made from ``body`` when first asked for (``kind`` says how: prose or code), so an
    index of thousands of shards is built without making tiers that no step retrieves; a shards file's
    hand-written tiers are given as ``_nano`` and ``_micro``.
    """

    id: str
    title: str
    source: str
    full: str
    tags: tuple[str, ...] = ()
    body: str = ""
    kind: Literal["prose", "code"] = "prose"
    _nano: str | None = field(default=None, repr=False)
    _micro: str | None = field(default=None, repr=False)

    @property
    def nano(self) -> str:
        """≈50 tokens (see the module docstring)."""
        if self._nano is None:
            self._nano = make_nano(self.title, self.body) if self.kind == "prose" else _code_nano(self.source,
                                                                                                  self.body)
        return self._nano

    @property
    def micro(self) -> str:
        """≈500 tokens (see the module docstring)."""
        if self._micro is None:
            self._micro = make_micro(self.title, self.body) if self.kind == "prose" else _code_micro(self.source,
                                                                                                    self.body)
        return self._micro

    def text(self, tier: Tier) -> str:
        """The shard at ``tier``."""
        return self.nano if tier == "nano" else self.micro if tier == "micro" else self.full

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Shard):
            return NotImplemented
        return (self.id, self.title, self.source, self.full, self.tags, self.nano, self.micro) == (
            other.id, other.title, other.source, other.full, other.tags, other.nano, other.micro)

    __hash__ = None  # type: ignore[assignment]  # mutable (its tiers are made on demand): not hashable


# -- the shards file ----------------------------------------------------------------------------------------
class ShardEntry(BaseModel):
    """One shard of a shards file: its full text inline (``text``) or in a project file (``path``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, description="unique within the file")
    title: str = Field(default="", description="what the shard is about (searched with a higher weight)")
    tags: list[str] = Field(default_factory=list, description="words the shard is found by")
    text: str | None = Field(default=None, description="the full text")
    path: str | None = Field(default=None, description="a project file (relative to the project root) holding "
                                                        "the full text, when `text` is not given")
    nano: str | None = Field(default=None, description="the ≈50-token tier by hand (made from the text if absent)")
    micro: str | None = Field(default=None, description="the ≈500-token tier by hand (made from the text if absent)")


class ShardsFile(BaseModel):
    """A shards file: ``shards:``, a list of shards (``version`` is 1)."""

    model_config = ConfigDict(extra="forbid", title="stepline TELIS shards file")

    version: Literal[1] = 1
    shards: list[ShardEntry] = Field(default_factory=list)


SCHEMA_ID = "https://stepline.dev/schemas/shards.schema.json"


def build_shards_schema() -> dict[str, Any]:
    """The JSON Schema of shards files, as built from :class:`ShardsFile` (what ``shards.schema.json`` holds)."""
    schema = ShardsFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    return schema


def shards_schema() -> dict[str, Any]:
    """The shipped JSON Schema of shards files (``shards.schema.json`` in this package)."""
    text = resources.files("stepline.context").joinpath("shards.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def load_shards_file(path: Path, project_root: Path, *, full_tokens: int = 4000) -> tuple[list[Shard], list[Path]]:
    """Read a shards file; return its shards and the files they were read from (the file, and each ``path``).

    Raises:
        ConfigError: the file is not a shards file (the message names file:line and the fix), or a shard's
            ``path`` does not exist.
    """
    text = read_text(path)
    data = load_yaml_text(text, path=str(path), error=ConfigError)
    try:
        parsed = ShardsFile.model_validate(data if data is not None else {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        where = ".".join(str(p) for p in loc) or "the file"
        raise ConfigError(f"{where}: {first['msg']}", path=str(path), line=find_yaml_line(text, loc) or 1,
                          hint="see stepline/context/shards.schema.json for the shards file's form") from None
    rel = _relative(path, project_root)
    shards: list[Shard] = []
    sources = [path]
    seen: set[str] = set()
    for index, entry in enumerate(parsed.shards):
        def line(index: int = index) -> int:  # found only for an error: finding it parses the file again
            return find_yaml_line(text, ("shards", index)) or 1

        if entry.id in seen:
            raise ConfigError(f"shard id {entry.id!r} is used twice", path=str(path), line=line(),
                              hint="give every shard its own id")
        seen.add(entry.id)
        body, source = entry.text, rel
        if body is None:
            if entry.path is None:
                raise ConfigError(f"shard {entry.id!r} has neither text nor path", path=str(path), line=line(),
                                  hint="add `text:` or `path:` (a project file)")
            target = project_root / entry.path
            if not target.is_file():
                raise ConfigError(f"shard {entry.id!r}: file {entry.path!r} not found", path=str(path), line=line(),
                                  hint="paths in a shards file are relative to the project root")
            body, source = read_text(target), _relative(target, project_root)
            sources.append(target)
        title = entry.title or entry.id
        shards.append(Shard(id=entry.id, title=title, source=source, tags=tuple(entry.tags), body=body,
                            _nano=entry.nano, _micro=entry.micro, full=make_full(title, body, full_tokens)))
    return shards, sources


# -- markdown and other files -------------------------------------------------------------------------------
def shards_from_markdown(text: str, source: str, *, split_level: int = 3, full_tokens: int = 4000) -> list[Shard]:
    """Split a markdown document at its headings of level ``split_level`` or less: one shard per section.

    A section's title is its heading path (``Guide › Install › Linux``), so a search for a parent's words finds
    its sections too. Text before the first heading is a shard titled by the file's name. Headings inside
    fenced code blocks are code, not headings; a YAML front matter block is left out.
    """
    lines = _without_front_matter(text.replace("\r\n", "\n")).split("\n")
    sections: list[tuple[str, list[str]]] = []  # (title path, body lines)
    trail: list[tuple[int, str]] = []
    current: tuple[str, list[str]] = (Path(source).stem, [])
    fenced = False
    for line in lines:
        if ("```" in line or "~~~" in line) and _FENCE.match(line):  # the cheap test first: most lines are prose
            fenced = not fenced
        match = None if fenced or not line.startswith("#") else _HEADING.match(line)
        if match and len(match.group(1)) <= split_level:
            if current[1] and any(x.strip() for x in current[1]):
                sections.append(current)
            level, title = len(match.group(1)), _plain(match.group(2))
            trail = [(lv, t) for lv, t in trail if lv < level] + [(level, title)]
            current = (" › ".join(t for _, t in trail), [line])
        else:
            current[1].append(line)
    if current[1] and any(x.strip() for x in current[1]):
        sections.append(current)
    shards: list[Shard] = []
    used: dict[str, int] = {}
    for title, body_lines in sections:
        whole = "\n".join(body_lines).strip("\n")
        # The section's own heading is its title: the made tiers start from what follows it.
        body = "\n".join(body_lines[1:] if _HEADING.match(body_lines[0]) else body_lines).strip("\n")
        slug = _SLUG.sub("-", title.rsplit(" › ", 1)[-1].lower()).strip("-") or "top"
        used[slug] = used.get(slug, 0) + 1
        anchor = slug if used[slug] == 1 else f"{slug}-{used[slug]}"
        shards.append(Shard(id=f"{source}#{anchor}", title=title, source=source, body=body,
                            full=make_full("", whole, full_tokens)))
    return shards


def shards_from_text_file(text: str, source: str, *, full_tokens: int = 4000) -> list[Shard]:
    """One shard for a file that is not markdown (code, config): its outline is its declarations."""
    text = text.replace("\r\n", "\n")
    if not text.strip():
        return []
    return [Shard(id=source, title=source, source=source, body=text, kind="code",
                  full=make_full(source, text, full_tokens))]


def _code_nano(source: str, text: str) -> str:
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    return clip_to_tokens(f"{source}: {first}", TIER_TOKENS["nano"])


def _code_micro(source: str, text: str) -> str:
    declarations = [line.rstrip() for line in text.split("\n") if _DECLARATION.match(line)]
    outline = declarations or [line.rstrip() for line in text.split("\n")[:40] if line.strip()]
    return clip_to_tokens("\n".join([source, *outline]), TIER_TOKENS["micro"])


# -- the tiers ------------------------------------------------------------------------------------------------
def make_nano(title: str, body: str) -> str:
    """≈50 tokens: the title and the first sentence of the body."""
    first = next(iter(_first_sentences(body)), "")
    return clip_to_tokens(f"{title}: {first}" if first else title, TIER_TOKENS["nano"])


def make_micro(title: str, body: str) -> str:
    """≈500 tokens: the title, the outline of sub-headings and the first sentence of each paragraph."""
    lines = [title]
    for kind, value in _blocks(body):
        if kind == "heading":
            lines.append(value)
        else:
            lines.append("- " + value)
    return clip_to_tokens("\n".join(lines), TIER_TOKENS["micro"])


def make_full(title: str, body: str, full_tokens: int) -> str:
    """The text itself (titled when it does not start with its heading), cut beyond ``full_tokens``."""
    text = body if not title or body.lstrip().startswith("#") else f"{title}\n\n{body}"
    return clip_to_tokens(text.strip(), max(full_tokens, FULL_MIN_TOKENS))


def digest_text(text: str) -> str:
    """Hex sha256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _blocks(body: str) -> list[tuple[str, str]]:
    """The outline of a section: sub-headings (indented by level) and each paragraph's first sentence."""
    found: list[tuple[str, str]] = []
    paragraph: list[str] = []
    fenced = False

    def flush() -> None:
        if paragraph:
            sentence = next(iter(_first_sentences(" ".join(paragraph))), "")
            if sentence:
                found.append(("sentence", sentence))
            paragraph.clear()

    for line in body.split("\n"):
        if _FENCE.match(line):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            found.append(("heading", "  " * (len(heading.group(1)) - 1) + "# " + _plain(heading.group(2))))
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("|"):
            flush()
            continue
        if re.match(r"^([-*+]|\d+[.)])\s+", stripped):  # a list item starts a block of its own
            flush()
            stripped = re.sub(r"^([-*+]|\d+[.)])\s+", "", stripped)
        paragraph.append(stripped)
    flush()
    return found


def _first_sentences(text: str) -> list[str]:
    """The first sentence of ``text`` (markdown decoration removed), as a one-element list, or none.

    Lines are taken until one ends the sentence: a long section costs no more than its first sentence."""
    taken: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        stripped = line.strip()
        if fenced or not stripped or stripped.startswith("|") or _HEADING.match(line):
            continue
        taken.append(_plain(stripped))
        plain = " ".join(" ".join(taken).split())
        end = _SENTENCE_END.search(plain)
        if end:
            return [plain[: end.end()]]
    plain = " ".join(" ".join(taken).split())
    return [plain] if plain else []


def _plain(text: str) -> str:
    """Markdown decoration off: links become their text, emphasis and code marks go."""
    if "[" in text:
        text = _LINK.sub(r"\1", text)
    if "*" in text or "_" in text or "`" in text or ">" in text:
        text = _MARKS.sub("", text)
    return text.strip()


def _without_front_matter(text: str) -> str:
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end != -1:
            return text[text.find("\n", end + 1) + 1:] if text.find("\n", end + 1) != -1 else ""
    return text


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()
