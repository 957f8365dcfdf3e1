"""Markdown frontmatter: a tolerant reader and a writer that changes only the keys it is given.

BMAD step files keep their variables in their frontmatter, and the documents a workflow writes keep its state
there (the step chain's ``stepsCompleted``). Real files contain YAML that does not parse (``'don\\'t'``, unquoted
``{x}`` values, a missing comma in a flow list), so the reader never raises on bad YAML: it parses the block key by
key, keeps the value of a broken key as its raw text and reports a :class:`~stepline.formats.Diagnostic` with
file:line. YAML past the reader's limits (an alias bomb, a value without end: :mod:`stepline._limits`) is hostile,
not broken, and is a :class:`~stepline.errors.ReaderError` naming file:line and the limit.

The writer (:func:`update_frontmatter`) replaces the value lines of the keys it updates and leaves every other
byte of the file as it was, odd YAML included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stepline._yaml import YamlLimitError, YamlLoader, describe_yaml_error, yaml_errors
from stepline.errors import NotFoundError, ReaderError
from stepline.formats._diagnostics import Diagnostic
from stepline.formats._files import read_text

__all__ = [
    "Frontmatter",
    "read_frontmatter",
    "read_frontmatter_file",
    "update_frontmatter",
]

_FENCE = "---"
_KEY_RE = re.compile(r"^(?P<key>[A-Za-z_][\w.\-]*)[ \t]*:(?=[ \t]|$)")
_PLAIN_SAFE_RE = re.compile(r"^[A-Za-z_][\w./\-]*$")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "none", "~"})


@dataclass(frozen=True, slots=True)
class _Chunk:
    """One top-level key of a frontmatter block: its key line and the lines its value spans."""

    key: str
    start: int  # index of the key line in the file's lines
    value_end: int  # one past the last value line (indented lines and list items after the key line)
    end: int  # one past the last line before the next key (adds trailing blanks and comments)


@dataclass(slots=True)
class Frontmatter:
    """The frontmatter of one markdown file, as read.

    Attributes:
        path: The file it came from (for diagnostics).
        data: The parsed top-level mapping; a key whose YAML is broken holds its raw text.
        body: Everything after the closing ``---`` line.
        present: Whether the file starts with a frontmatter block at all.
        start_line: 1-based line of the opening ``---`` (``None`` when absent).
        end_line: 1-based line of the closing ``---`` (``None`` when absent).
        body_line: 1-based line where ``body`` starts.
        key_lines: 1-based line of each top-level key.
        diagnostics: YAML problems found, each with file:line.
    """

    path: str
    data: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    present: bool = False
    start_line: int | None = None
    end_line: int | None = None
    body_line: int = 1
    key_lines: dict[str, int] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def line_of(self, key: str) -> int | None:
        """Return the 1-based line of ``key``, or of the frontmatter start when the key is absent."""
        return self.key_lines.get(key, self.start_line)


def _newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _find_block(lines: list[str]) -> tuple[int, int] | None:
    """Return (index of opening fence, index of closing fence), or None when there is no frontmatter."""
    if not lines or lines[0].lstrip("\ufeff").rstrip() != _FENCE:
        return None
    for index in range(1, len(lines)):
        if lines[index].rstrip() == _FENCE:
            return 0, index
    return None


def _is_value_line(line: str) -> bool:
    stripped = line.rstrip("\r\n")
    return bool(stripped) and (stripped[0] in " \t" or stripped.startswith("- ") or stripped == "-")


def _chunks(lines: list[str], first: int, closing: int) -> list[_Chunk]:
    starts = [i for i in range(first, closing) if _KEY_RE.match(lines[i])]
    chunks = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else closing
        value_end = start + 1
        while value_end < end and _is_value_line(lines[value_end]):
            value_end += 1
        match = _KEY_RE.match(lines[start])
        assert match is not None
        chunks.append(_Chunk(match["key"], start, value_end, end))
    return chunks


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1].replace("''", "'").replace("\\'", "'")
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return raw[1:-1].replace('\\"', '"').replace("\\'", "'")
    return raw


def _raw_value(chunk_text: str) -> Any:
    """Best-effort value of a key whose YAML does not parse: the text after the colon, unquoted.

    A broken flow list (``['a.md' 'b.md']``) becomes the list of its quoted items.
    """
    first, _, rest = chunk_text.partition("\n")
    value = first.split(":", 1)[1].strip()
    if value.startswith("[") and value.endswith("]"):
        items = re.findall(r"'((?:[^'\\]|\\.|'')*)'|\"((?:[^\"\\]|\\.)*)\"", value)
        if items:
            return [_unquote(f"'{a}'") if a else _unquote(f'"{b}"') for a, b in items]
    if not value and rest.strip():
        return rest.strip()
    return _unquote(value)


def read_frontmatter(text: str, *, path: str = "<string>") -> Frontmatter:
    """Split markdown ``text`` into its frontmatter mapping and body, never raising on bad YAML.

    Args:
        text: The whole file.
        path: Shown in diagnostics.

    Returns:
        The :class:`Frontmatter`; ``present`` is False (and ``body`` is ``text``) when the text has no block.
    """
    lines = text.splitlines(keepends=True)
    block = _find_block(lines)
    if block is None:
        result = Frontmatter(path=path, body=text)
        if lines and lines[0].rstrip() == _FENCE:
            result.diagnostics.append(
                Diagnostic(
                    "error", "frontmatter-unterminated", "frontmatter opened with '---' is never closed", path, 1
                )
            )
        return result
    opening, closing = block
    result = Frontmatter(
        path=path,
        present=True,
        start_line=opening + 1,
        end_line=closing + 1,
        body="".join(lines[closing + 1 :]),
        body_line=closing + 2,
    )
    chunks = _chunks(lines, opening + 1, closing)
    result.key_lines = {c.key: c.start + 1 for c in chunks}
    yaml_text = "".join(lines[opening + 1 : closing])
    try:
        loaded = yaml.load(yaml_text, Loader=YamlLoader)  # a safe loader (C when libyaml is there)
    except YamlLimitError as exc:  # hostile, not merely broken: refused whole (key by key would hide it)
        problem, line = describe_yaml_error(exc, yaml_text)
        raise ReaderError(f"frontmatter: {problem}", path=path,
                          line=opening + 1 + line if line is not None else opening + 1) from None
    except yaml_errors:
        result.data = _parse_by_key(lines, chunks, result)
    else:
        if isinstance(loaded, dict):
            result.data = {str(k): v for k, v in loaded.items()}
        elif loaded is not None:
            result.diagnostics.append(
                Diagnostic(
                    "error",
                    "frontmatter-not-mapping",
                    f"frontmatter is a {type(loaded).__name__}, not a mapping of keys",
                    path,
                    opening + 2,
                )
            )
    return result


def _parse_by_key(lines: list[str], chunks: list[_Chunk], result: Frontmatter) -> dict[str, Any]:
    """Parse each top-level key on its own so one broken value does not lose the others."""
    data: dict[str, Any] = {}
    for chunk in chunks:
        chunk_text = "".join(lines[chunk.start : chunk.end])
        try:
            loaded = yaml.load(chunk_text, Loader=YamlLoader)  # a safe loader
        except yaml_errors as exc:
            message, line = describe_yaml_error(exc, chunk_text)
            where = chunk.start + (line or 1)
            result.diagnostics.append(
                Diagnostic(
                    "error",
                    "yaml-syntax",
                    f"frontmatter key {chunk.key!r} is not valid YAML ({message}); its raw text is used",
                    result.path,
                    where,
                )
            )
            data[chunk.key] = _raw_value("".join(lines[chunk.start : chunk.value_end]).rstrip())
            continue
        if isinstance(loaded, dict) and chunk.key in loaded:
            data[chunk.key] = loaded[chunk.key]
        else:
            data[chunk.key] = _raw_value("".join(lines[chunk.start : chunk.value_end]).rstrip())
    return data


def read_frontmatter_file(path: Path) -> Frontmatter:
    """Read ``path`` and return its :class:`Frontmatter`; a missing, unreadable or not UTF-8 file is an error."""
    try:
        text = read_text(path)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: file not found") from exc
    except OSError as exc:
        raise ReaderError(f"cannot read file ({exc.strerror or exc})", path=str(path)) from exc
    return read_frontmatter(text, path=str(path))


def _render_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if _PLAIN_SAFE_RE.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return "'" + text.replace("'", "''") + "'"


def _quoted(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return _render_scalar(value)


def _render(key: str, value: Any, old_lines: list[str], nl: str) -> list[str]:
    """Render ``key: value``, keeping the list style (flow or block, indentation) of the old value."""
    if isinstance(value, list | tuple):
        block_item = next((ln for ln in old_lines[1:] if ln.lstrip().startswith("-")), None)
        if block_item is not None and value:
            indent = block_item[: len(block_item) - len(block_item.lstrip())]
            return [f"{key}:{nl}", *(f"{indent}- {_quoted(v)}{nl}" for v in value)]
        return [f"{key}: [{', '.join(_quoted(v) for v in value)}]{nl}"]
    if isinstance(value, Mapping):
        dumped = yaml.safe_dump({key: dict(value)}, default_flow_style=False, sort_keys=False, allow_unicode=True)
        return [ln + nl for ln in dumped.splitlines()]
    return [f"{key}: {_render_scalar(value)}{nl}"]


def update_frontmatter(text: str, updates: Mapping[str, Any]) -> str:
    """Return ``text`` with the frontmatter keys in ``updates`` set; every other line is kept byte for byte.

    A key that exists has its value lines replaced in place (a list keeps its flow ``[a, b]`` or block
    ``- a`` style); a new key is added before the closing ``---``; a file without frontmatter gets one.

    Args:
        text: The whole markdown document.
        updates: Keys to set and their new values (scalars, lists, mappings).
    """
    nl = _newline_of(text)
    lines = text.splitlines(keepends=True)
    block = _find_block(lines)
    if block is None:
        head = [f"{_FENCE}{nl}"]
        for key, value in updates.items():
            head.extend(_render(key, value, [], nl))
        head.append(f"{_FENCE}{nl}")
        return "".join(head) + text
    opening, closing = block
    by_key = {c.key: c for c in _chunks(lines, opening + 1, closing)}
    replacements: dict[int, tuple[int, list[str]]] = {}
    added: list[str] = []
    for key, value in updates.items():
        chunk = by_key.get(key)
        if chunk is None:
            added.extend(_render(key, value, [], nl))
        else:
            old = lines[chunk.start : chunk.value_end]
            replacements[chunk.start] = (chunk.value_end, _render(key, value, old, nl))
    out: list[str] = []
    index = 0
    while index < len(lines):
        if index == closing:
            out.extend(added)
        if index in replacements:
            end, new_lines = replacements[index]
            out.extend(new_lines)
            index = end
            continue
        out.append(lines[index])
        index += 1
    return "".join(out)

