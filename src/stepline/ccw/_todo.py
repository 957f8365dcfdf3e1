"""TODO_LIST.md of a CCW session: reading task lines with their positions, and flipping one to done.

Lines the reader understands::

    ## Module A (Frontend)                                      ← a section heading (module)
    ▸ **IMPL-1**: Auth module → [📋](./.task/IMPL-1.json)        ← a container (has subtasks)
      - [ ] **IMPL-1.1**: Schema → [📋](./.task/IMPL-1.1.json)   ← a subtask (indented under it)
    - [x] **IMPL-2**: Docs → [📋](./.task/IMPL-2.json) | [✅](./.summaries/IMPL-2-summary.md)

Every other line (legends, prose, cross-module notes) is kept as text and never rewritten: the writer
helpers change exactly one line, so a file edited by hand keeps its shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from stepline.errors import ReaderError
from stepline.formats import FileVersion, decode_text, read_file

TodoState = Literal["pending", "in_progress", "completed", "container"]

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# The body is greedy and stripped afterwards: a lazy body tried the end of the line at every character.
_TASK_LINE = re.compile(
    r"^(?P<indent>[ \t]*)(?:(?:[-*+]\s+)?(?P<container>▸)|[-*+]\s+\[(?P<mark>[ xX~/-])\])\s+(?P<body>.*)$"
)
_BOLD_ID = re.compile(r"^\*\*(?P<id>[^*\s]+?)\*\*\s*:?\s*(?P<rest>.*)$")
_PLAIN_ID = re.compile(r"^(?P<id>[A-Za-z][\w.-]*)\s*:\s*(?P<rest>.*)$")
_LINK = re.compile(r"\[(?P<label>[^\]]*)\]\((?P<href>[^)\s]+)\)")
_TITLE_END = re.compile(r"\s+(?:→|->)\s+|\s+\[(?:📋|✅)\]")
_MARK_STATE: dict[str, TodoState] = {" ": "pending", "x": "completed", "X": "completed", "~": "in_progress",
                                     "/": "in_progress", "-": "in_progress"}


@dataclass(frozen=True, slots=True)
class TodoEntry:
    """One task line of TODO_LIST.md with enough position to rewrite that line alone.

    ``line`` is 1-based; ``mark_col`` is the 0-based column of the character between ``[`` and ``]`` (None
    for a ``▸`` container line); ``text`` is the line as read, without its line ending.
    """

    task_id: str
    line: int
    text: str
    indent: int
    state: TodoState
    title: str
    mark_col: int | None
    task_href: str | None = None
    summary_href: str | None = None
    section: str | None = None
    parent: str | None = None

    @property
    def is_container(self) -> bool:
        """True for a ``▸`` line (its state is derived from its subtasks, it has no checkbox)."""
        return self.mark_col is None


@dataclass(frozen=True, slots=True)
class TodoList:
    """The task lines of one TODO_LIST.md in file order; ``duplicates`` are later lines repeating an id."""

    path: Path
    entries: tuple[TodoEntry, ...]
    duplicates: tuple[TodoEntry, ...] = ()
    by_id: dict[str, TodoEntry] = field(default_factory=dict)

    @property
    def containers(self) -> frozenset[str]:
        """Ids that are containers: ``▸`` lines and checkbox lines with indented subtasks."""
        return frozenset(entry.parent for entry in self.entries if entry.parent) | frozenset(
            entry.task_id for entry in self.entries if entry.is_container)

    def progress(self) -> tuple[int, int]:
        """Return ``(done, total)`` over the leaf task lines (containers are not counted)."""
        containers = self.containers
        leaves = [entry for entry in self.entries if entry.task_id not in containers]
        return sum(entry.state == "completed" for entry in leaves), len(leaves)


def _parse_body(body: str) -> tuple[str, str, str | None, str | None] | None:
    match = _BOLD_ID.match(body) or _PLAIN_ID.match(body)
    if match is None:
        return None
    rest = match["rest"]
    task_href = summary_href = None
    for link in _LINK.finditer(rest):
        label, href = link["label"], link["href"]
        if ".summaries/" in href or "✅" in label:
            summary_href = summary_href or href
        elif ".task/" in href or "📋" in label:
            task_href = task_href or href
    title = _TITLE_END.split(rest, maxsplit=1)[0].strip()
    return match["id"], title, task_href, summary_href


def parse_todo_text(text: str, path: Path) -> TodoList:
    """Parse the text of a TODO_LIST.md; lines that are not task lines are ignored, never an error."""
    entries: list[TodoEntry] = []
    duplicates: list[TodoEntry] = []
    by_id: dict[str, TodoEntry] = {}
    section: str | None = None
    top: TodoEntry | None = None
    in_fence = False
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        stripped = raw.lstrip()
        heading = _HEADING.match(raw) if stripped.startswith("#") else None
        if heading:
            section, top = heading[2], None
            continue
        match = _TASK_LINE.match(raw) if stripped[:1] in ("-", "*", "+", "▸") else None
        parsed = _parse_body(match["body"].rstrip()) if match else None
        if match is None or parsed is None:
            continue
        task_id, title, task_href, summary_href = parsed
        indent = len(match["indent"].expandtabs(4))
        parent = top.task_id if top is not None and indent > top.indent else None
        mark = match["mark"]
        entry = TodoEntry(
            task_id=task_id, line=number, text=raw, indent=indent,
            state="container" if mark is None else _MARK_STATE[mark], title=title,
            mark_col=None if mark is None else match.start("mark"),
            task_href=task_href, summary_href=summary_href, section=section, parent=parent,
        )
        if parent is None:
            top = entry
        if task_id in by_id:
            duplicates.append(entry)
            continue
        by_id[task_id] = entry
        entries.append(entry)
    return TodoList(path=path, entries=tuple(entries), duplicates=tuple(duplicates), by_id=by_id)


def read_todo_list(path: Path) -> TodoList:
    """Read and parse a TODO_LIST.md file."""
    return read_todo_file(path)[1]


#: The last version read of each TODO_LIST.md, by path: ``(version, text, parsed)``. A run reads its session's
#: twice (the index, then its writer), and parsing costs ~20 µs a line.
_read: dict[Path, tuple[FileVersion, str, TodoList]] = {}
_READ_KEPT = 8


def read_todo_file(path: Path) -> tuple[str, TodoList, FileVersion]:
    """Read and parse a TODO_LIST.md file; return its text, the parse and the file's version. A version read
    before is not parsed again."""
    data, version = read_file(path)
    known = _read.get(path)
    if known is not None and known[0] == version:
        return known[1], known[2], version
    text = decode_text(data, path)
    todo = parse_todo_text(text, path)
    if len(_read) >= _READ_KEPT:
        _read.pop(next(iter(_read)))
    _read[path] = (version, text, todo)
    return text, todo, version


def summary_href_for(task_id: str) -> str:
    """Return the link TODO_LIST.md uses for a task's summary (``./.summaries/<id>-summary.md``)."""
    return f"./.summaries/{task_id}-summary.md"


def render_todo_line_completed(entry: TodoEntry, summary_href: str) -> str:
    """Return ``entry``'s line with its box ticked and a link to the summary (added once).

    Raises:
        ReaderError: the entry is a ``▸`` container, which has no checkbox to tick.
    """
    if entry.mark_col is None:
        raise ReaderError(f"{entry.task_id} is a container line; it completes with its subtasks",
                          line=entry.line)
    line = entry.text[: entry.mark_col] + "x" + entry.text[entry.mark_col + 1:]
    if entry.summary_href is None:
        joiner = " | " if entry.task_href is not None else " → "
        line = f"{line.rstrip()}{joiner}[✅]({summary_href})"
    return line


def mark_todo_completed(text: str, task_id: str, summary_href: str | None = None) -> str:
    """Return TODO_LIST.md ``text`` with ``task_id``'s line ticked; every other byte stays as it was.

    Raises:
        ReaderError: no line names ``task_id``, or it is a container line.
    """
    todo = parse_todo_text(text, Path("TODO_LIST.md"))
    entry = todo.by_id.get(task_id)
    if entry is None:
        raise ReaderError(f"TODO_LIST.md has no line for task {task_id}")
    lines = text.splitlines(keepends=True)
    old = lines[entry.line - 1]
    ending = old[len(old.rstrip("\r\n")):]
    new = render_todo_line_completed(entry, summary_href or summary_href_for(task_id))
    lines[entry.line - 1] = new + ending
    return "".join(lines)
