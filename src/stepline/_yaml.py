"""YAML with file:line errors: parsing user files once, with libyaml, and finding the line of a key.

Shared by the readers, the runtime config, the scripted executor and the cassettes, which all report a broken
file the same way. Every parse goes through :class:`YamlLoader`: PyYAML's C loader (``CSafeLoader``, ten times
faster than the pure-Python one) when libyaml is installed, else ``SafeLoader``; both build the same values
(the safe constructors and resolvers: ``yes`` is ``True``, ``2024-01-02`` a date, the last duplicate key wins).

Values are built straight from libyaml's event stream, never from a node tree (which takes six times the
memory of the values it builds): a loader's peak memory stays a few times the text's size. A reader that needs
lines on success (the native reader gives every step its line) asks :func:`load_yaml_lines` for the lines of
the values near the top; every other reader parses with :func:`load_yaml_text` and composes only when an error
needs a line (:func:`find_yaml_line`).

Every parse is bounded (:mod:`stepline._limits`): aliases are counted at the size of what they repeat, so a
"billion laughs" stops at the value limit, and an alias inside its own anchor (``a: &a [*a]``, a value without
end) is refused; nesting, aliases included, stops at the depth limit. Exceeding one is a :class:`YamlLimitError`.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from stepline._limits import cut, long_number, read_limits
from stepline.errors import ReaderError

__all__ = [
    "YamlLimitError",
    "YamlLoader",
    "compose_yaml_text",
    "describe_yaml_error",
    "find_yaml_line",
    "load_yaml_lines",
    "load_yaml_text",
    "yaml_errors",
]

_BASE: Any = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
#: libyaml's reader errors count the position in bytes of the UTF-8 text, the Python reader in characters.
_C_LOADER = _BASE is not yaml.SafeLoader


class YamlLimitError(yaml.MarkedYAMLError):
    """A document past one of the reader's limits (:mod:`stepline._limits`): its values, its depth."""


class YamlLoader(_BASE):  # type: ignore[misc]  # the base is chosen at import time
    """The safe loader (C when libyaml is there), whose malformed typed scalars are YAML errors with a line,
    and which never builds more than the limits allow.

    The safe constructors raise ``ValueError`` (``2024-13-45``, ``0x_``, ``!!int abc``) or ``KeyError``
    (``!!bool maybe``) on a scalar the resolver matched but that does not convert; here they raise a
    :class:`~yaml.constructor.ConstructorError` marking the scalar. Every value that loads loads the same.

    ``yaml.load(text, Loader=YamlLoader)`` builds the values from the event stream (:class:`_Builder`);
    a node tree composed by a caller is checked against the limits before its values are built.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.source = stream

    def get_single_data(self) -> Any:
        return self.single_data()

    def single_data(self, lines: dict[tuple[Any, ...], int] | None = None) -> Any:
        """The document's values, built from the event stream (``lines``, when given, receives the lines of the
        values at most two levels down, by path)."""
        try:
            return _Builder(self, lines=lines).document()
        except _Fallback:
            fresh = YamlLoader(self.source)
            try:
                node = fresh.get_single_node()
                if lines is not None and node is not None:
                    _node_lines(node, (), lines)
                return fresh.construct_document(node) if node is not None else None
            finally:
                fresh.dispose()

    def construct_document(self, node: yaml.Node) -> Any:
        _check_nodes(node)
        return super().construct_document(node)


def _guarded(construct: Callable[[Any, yaml.Node], Any]) -> Callable[[Any, yaml.Node], Any]:
    def guarded(loader: Any, node: yaml.Node) -> Any:
        try:
            return construct(loader, node)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            kind = str(node.tag).rpartition(":")[2]
            number = long_number(exc, str(node.value))
            if number is not None:
                raise ConstructorError(None, None, number[0], node.start_mark) from None
            reason = exc.args[0] if exc.args and isinstance(exc, KeyError) else exc
            raise ConstructorError(None, None, f"{cut(str(node.value), 40)!r} is not a valid {kind} ({reason})",
                                   node.start_mark) from None

    return guarded


for _tag in ("int", "float", "bool", "timestamp"):
    YamlLoader.add_constructor(f"tag:yaml.org,2002:{_tag}",
                               _guarded(SafeConstructor.yaml_constructors[f"tag:yaml.org,2002:{_tag}"]))

_SEQ, _MAP, _MERGE = "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map", "tag:yaml.org,2002:merge"
_NO_KEY, _MERGE_KEY = object(), object()


class _Fallback(Exception):
    """A collection with an explicit tag (``!!set``, ``!!omap``): its document is built by PyYAML's composer and
    constructors instead (the tree checked by :func:`_check_nodes` first)."""


@dataclass(slots=True)
class _Frame:
    """A collection being built: its values so far, where it started, and what a mapping waits for."""

    container: list[Any] | dict[Any, Any]
    mark: Any
    anchor: str | None
    path: tuple[Any, ...] | None
    first_value: int
    key: Any = _NO_KEY
    merges: list[tuple[Any, Any]] = field(default_factory=list)
    nested: int = 1  # levels of values below and including this one


class _Builder:
    """Values from the event stream, as the safe constructor builds them from nodes, within the limits.

    Each open collection is a frame on a stack (no recursion); an anchor remembers its value with the number of
    values and the levels it stands for, so an alias counts as what it repeats. ``lines`` (when asked for) maps
    the path of every value at most two levels down to its 1-based line.
    """

    def __init__(self, loader: Any, *, lines: dict[tuple[Any, ...], int] | None = None) -> None:
        self.loader = loader
        self.limits = read_limits()
        self.lines = lines
        self.anchors: dict[str, tuple[Any, int, int]] = {}
        self.values = 0

    def document(self) -> Any:
        loader = self.loader
        loader.get_event()  # StreamStart
        if loader.check_event(yaml.StreamEndEvent):
            return None
        start = loader.get_event()  # DocumentStart
        data = self._value()
        loader.get_event()  # DocumentEnd
        if not loader.check_event(yaml.StreamEndEvent):
            extra = loader.get_event()
            raise yaml.composer.ComposerError("expected a single document in the stream", start.start_mark,
                                              "but found another document", extra.start_mark)
        return data

    def _count(self, values: int, depth: int, mark: Any) -> None:
        self.values += values
        if self.values > self.limits.max_yaml_values:
            raise YamlLimitError(None, None, f"the document expands to more than {self.limits.max_yaml_values} "
                                 "values (aliases counted at their size; limit STEPLINE_MAX_YAML_VALUES)", mark)
        if depth > self.limits.max_depth:
            raise YamlLimitError(None, None, f"values nest deeper than {self.limits.max_depth} levels (aliases "
                                 "counted at their depth; limit STEPLINE_MAX_DEPTH)", mark)

    def _scalar(self, event: Any) -> Any:
        loader = self.loader
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _MERGE:
            return _MERGE_KEY
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        constructor = loader.yaml_constructors.get(tag) or loader.yaml_constructors[None]
        return constructor(loader, node)

    def _value(self) -> Any:
        """The document's root value: one loop over the events, as PyYAML's composer walks them."""
        loader = self.loader
        stack: list[_Frame] = []
        building: set[str] = set()  # anchors of the collections still open
        while True:
            event = loader.get_event()
            mark: Any = event.start_mark
            nested = 1
            if isinstance(event, yaml.AliasEvent):
                if event.anchor in building:
                    raise YamlLimitError(None, None, f"alias *{event.anchor} repeats a value inside itself "
                                         "(a value without end)", mark)
                if event.anchor not in self.anchors:
                    raise yaml.composer.ComposerError(None, None, f"found undefined alias {event.anchor!r}",
                                                      mark)
                value, extent, nested = self.anchors[event.anchor]
                self._count(extent, len(stack) + nested, mark)
            elif isinstance(event, yaml.ScalarEvent):
                self._count(1, len(stack) + 1, mark)
                value = self._scalar(event)
                if event.anchor is not None:
                    self.anchors[event.anchor] = (value, 1, 1)
            elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                is_map = isinstance(event, yaml.MappingStartEvent)
                if event.tag not in (None, "!", _MAP if is_map else _SEQ):
                    raise _Fallback
                self._count(1, len(stack) + 1, mark)
                if event.anchor is not None:
                    building.add(event.anchor)
                path = self._path(stack[-1]) if stack else ()
                if path is not None and self.lines is not None and len(path) <= 2:
                    self.lines[path] = mark.line + 1
                stack.append(_Frame({} if is_map else [], mark, event.anchor,
                                    path if path is not None and len(path) < 2 else None, self.values))
                continue
            else:  # the end of the innermost collection
                frame = stack.pop()
                value = frame.container
                if frame.merges and isinstance(value, dict):
                    value = _merged(frame.merges, value, frame.mark)
                nested = frame.nested
                if frame.anchor is not None:
                    building.discard(frame.anchor)
                    self.anchors[frame.anchor] = (value, self.values - frame.first_value + 1, nested)
            if not stack:
                if value is _MERGE_KEY:
                    raise ConstructorError(None, None, "found a merge key ('<<') where a value belongs", mark)
                return value
            self._add(stack[-1], value, nested, event)

    def _path(self, frame: _Frame) -> tuple[Any, ...] | None:
        """The path of the value about to be added to ``frame`` (None when lines are not kept for it)."""
        if self.lines is None or frame.path is None:
            return None
        key = len(frame.container) if isinstance(frame.container, list) else frame.key
        return (*frame.path, key) if isinstance(key, (str, int)) and not isinstance(key, bool) else None

    def _add(self, frame: _Frame, value: Any, nested: int, event: Any) -> None:
        frame.nested = max(frame.nested, nested + 1)
        mark: Any = event.start_mark
        if isinstance(event, yaml.ScalarEvent | yaml.AliasEvent) and (
                path := self._path(frame)) is not None and self.lines is not None:
            self.lines[path] = mark.line + 1
        if value is _MERGE_KEY and (isinstance(frame.container, list) or frame.key is not _NO_KEY):
            raise ConstructorError(None, None, "found a merge key ('<<') where a value belongs", event.start_mark)
        if isinstance(frame.container, list):
            frame.container.append(value)
            return
        if frame.key is _NO_KEY:
            try:
                hash(value)
            except TypeError:
                raise ConstructorError("while constructing a mapping", frame.mark, "found unhashable key",
                                       event.start_mark) from None
            frame.key = sys.intern(value) if type(value) is str else value  # a key repeats in every item
            return
        key, frame.key = frame.key, _NO_KEY
        if key is _MERGE_KEY:
            frame.merges.append((value, event.start_mark))
        else:
            frame.container[key] = value


def _merged(merges: list[tuple[Any, Any]], explicit: dict[Any, Any], mark: Any) -> dict[Any, Any]:
    """``<<`` keys as SafeConstructor.flatten_mapping merges them: explicit keys win, then earlier sources."""
    merged: dict[Any, Any] = {}
    for value, at in reversed(merges):
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise ConstructorError("while constructing a mapping", mark,
                                   "expected a mapping or list of mappings for merging", at)
        for source in reversed(sources):
            merged.update(source)
    merged.update(explicit)
    return merged


def _check_nodes(root: yaml.Node) -> None:
    """Refuse a composed node tree whose values would pass the limits: an alias inside its own anchor (a cycle),
    more values than allowed once aliases are expanded, deeper nesting. Iterative, memoised by node: linear."""
    limits = read_limits()
    size: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = [v for pair in node.value for v in pair] if isinstance(node, yaml.MappingNode) else (
            node.value if isinstance(node, yaml.SequenceNode) else [])
        if done:
            open_nodes.discard(key)
            values = 1 + sum(size[id(c)][0] for c in children)
            depth = 1 + max((size[id(c)][1] for c in children), default=0)
            if values > limits.max_yaml_values:
                raise YamlLimitError(None, None, f"the document expands to more than {limits.max_yaml_values} "
                                     "values (aliases counted at their size; limit STEPLINE_MAX_YAML_VALUES)",
                                     node.start_mark)
            if depth > limits.max_depth:
                raise YamlLimitError(None, None, f"values nest deeper than {limits.max_depth} levels (aliases "
                                     "counted at their depth; limit STEPLINE_MAX_DEPTH)", node.start_mark)
            size[key] = (values, depth)
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise YamlLimitError(None, None, "an alias repeats a value inside itself (a value without end)",
                                 node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in size)


#: What a parse can raise on bad input: a YAML error, text the C loader cannot encode (a lone surrogate), or
#: (the pure-Python loader only; libyaml has a depth limit) nesting deeper than Python's recursion limit.
yaml_errors: tuple[type[Exception], ...] = (yaml.YAMLError, UnicodeEncodeError, RecursionError)


def describe_yaml_error(exc: Exception, text: str | None = None) -> tuple[str, int | None]:
    """One line describing a parse error of ``text`` (context first when there is one), and its 1-based line
    in ``text`` (None when unknown)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or str(exc).splitlines()[0]
        message = f"{exc.context}: {problem}" if exc.context else str(problem)
        return message, (mark.line + 1 if mark is not None else None)
    if isinstance(exc, yaml.reader.ReaderError):
        character = exc.character
        code = f"#x{character:04x}" if isinstance(character, int) else repr(character)
        line = None
        if text is not None and isinstance(exc.position, int):
            if _C_LOADER:
                line = text.encode("utf-8", "surrogatepass")[: exc.position].count(b"\n") + 1
            else:
                line = text.count("\n", 0, exc.position) + 1
        return f"unacceptable character {code}: {exc.reason}", line
    if isinstance(exc, UnicodeEncodeError):
        return f"unacceptable character {exc.object[exc.start]!r}: {exc.reason}", (
            exc.object.count("\n", 0, exc.start) + 1)
    if isinstance(exc, RecursionError):
        return "nested too deeply", None
    return (str(exc).splitlines() or [type(exc).__name__])[0], None


#: Text longer than this is parsed with the cyclic garbage collector paused: the tens of thousands of nodes and
#: values a big file makes would trigger collections that walk them all again and again (half the parse time of
#: a 3,000-step workflow). Nothing a parse makes is collectable before it ends.
_PAUSE_GC_ABOVE = 64 * 1024


@contextmanager
def _gc_paused(text: str) -> Iterator[None]:
    if len(text) <= _PAUSE_GC_ABOVE or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _raise(exc: Exception, text: str, path: str, error: type[ReaderError], first_line: int) -> ReaderError:
    problem, line = describe_yaml_error(exc, text)
    return error(f"YAML error: {problem}", path=path, line=line + first_line - 1 if line is not None else None)


def load_yaml_text(text: str, *, path: str, error: type[ReaderError] = ReaderError) -> Any:
    """Parse ``text`` (from ``path``); a syntax error raises ``error`` naming file:line and the problem."""
    try:
        with _gc_paused(text):
            return yaml.load(text, Loader=YamlLoader)  # a safe loader
    except yaml_errors as exc:
        raise _raise(exc, text, path, error, 1) from None


def load_yaml_lines(text: str, *, path: str, error: type[ReaderError] = ReaderError,
                    first_line: int = 1) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """Parse ``text`` once into its values and the 1-based lines of the values at most two levels down, by
    path (``("steps", 3)``: the fourth item of the top-level ``steps``), without keeping a node tree.

    Args:
        text: the YAML source.
        path: the file it came from, for messages.
        error: the error class raised on a syntax error or a limit passed (naming file:line).
        first_line: the file line of ``text``'s first line (frontmatter starts below ``---``).
    """
    lines: dict[tuple[Any, ...], int] = {}
    loader = YamlLoader(text)
    try:
        with _gc_paused(text):
            data = loader.single_data(lines)
    except yaml_errors as exc:
        raise _raise(exc, text, path, error, first_line) from None
    finally:
        loader.dispose()
    if first_line != 1:
        lines = {key: line + first_line - 1 for key, line in lines.items()}
    return data, lines


def _node_lines(node: yaml.Node, path: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> None:
    """The lines :func:`load_yaml_lines` gives, from a composed tree (a document with an explicit tag)."""
    lines[path] = node.start_mark.line + 1
    if len(path) >= 2:
        return
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                _node_lines(value, (*path, key.value), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _node_lines(item, (*path, index), lines)


def compose_yaml_text(text: str, *, path: str, error: type[ReaderError] = ReaderError,
                      first_line: int = 1) -> tuple[Any, yaml.Node | None]:
    """Parse ``text`` once into its values and the node tree they were built from (which knows every line).

    Args:
        text: the YAML source.
        path: the file it came from, for messages.
        error: the error class raised on a syntax error (naming file:line).
        first_line: the file line of ``text``'s first line (frontmatter starts below ``---``).

    Returns:
        The values (None for an empty document) and the root node (None for an empty document).
    """
    loader = YamlLoader(text)
    try:
        with _gc_paused(text):
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
    except yaml_errors as exc:
        raise _raise(exc, text, path, error, first_line) from None
    finally:
        loader.dispose()
    return data, node


def find_yaml_line(source: str | yaml.Node | None, keys: tuple[Any, ...]) -> int | None:
    """Return the 1-based line of the node at ``keys`` (the deepest key that exists).

    ``source`` is the YAML text (composed only now: call this when an error needs the line) or the root node
    :func:`compose_yaml_text` returned.
    """
    if isinstance(source, str):
        try:
            node: Any = yaml.compose(source, Loader=YamlLoader)
        except yaml_errors:
            return None
    else:
        node = source
    line = None
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(key):
                    line, node = k.start_mark.line + 1, v
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line
