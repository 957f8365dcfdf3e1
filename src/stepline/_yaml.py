"""YAML with file:line errors: parsing user files once, with libyaml, and finding the line of a key.

Shared by the readers, the runtime config, the scripted executor and the cassettes, which all report a broken
file the same way. Every parse goes through :class:`YamlLoader`: PyYAML's C loader (``CSafeLoader``, ten times
faster than the pure-Python one) when libyaml is installed, else ``SafeLoader``; both build the same values
(the safe constructors and resolvers: ``yes`` is ``True``, ``2024-01-02`` a date, the last duplicate key wins).

A reader that needs lines on success (the native reader gives every step its line) parses with
:func:`compose_yaml_text`, which keeps the node tree the values were built from; every other reader parses
with :func:`load_yaml_text` and composes only when an error needs a line (:func:`find_yaml_line`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from stepline.errors import ReaderError

__all__ = [
    "YamlLoader",
    "compose_yaml_text",
    "describe_yaml_error",
    "find_yaml_line",
    "load_yaml_text",
    "yaml_errors",
]

_BASE: Any = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
#: libyaml's reader errors count the position in bytes of the UTF-8 text, the Python reader in characters.
_C_LOADER = _BASE is not yaml.SafeLoader


class YamlLoader(_BASE):  # type: ignore[misc]  # the base is chosen at import time
    """The safe loader (C when libyaml is there), whose malformed typed scalars are YAML errors with a line.

    The safe constructors raise ``ValueError`` (``2024-13-45``, ``0x_``, ``!!int abc``) or ``KeyError``
    (``!!bool maybe``) on a scalar the resolver matched but that does not convert; here they raise a
    :class:`~yaml.constructor.ConstructorError` marking the scalar. Every value that loads loads the same.
    """


def _guarded(construct: Callable[[Any, yaml.Node], Any]) -> Callable[[Any, yaml.Node], Any]:
    def guarded(loader: Any, node: yaml.Node) -> Any:
        try:
            return construct(loader, node)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            kind = str(node.tag).rpartition(":")[2]
            reason = exc.args[0] if exc.args and isinstance(exc, KeyError) else exc
            raise ConstructorError(None, None, f"{node.value!r} is not a valid {kind} ({reason})",
                                   node.start_mark) from None

    return guarded


for _tag in ("int", "float", "bool", "timestamp"):
    YamlLoader.add_constructor(f"tag:yaml.org,2002:{_tag}",
                               _guarded(SafeConstructor.yaml_constructors[f"tag:yaml.org,2002:{_tag}"]))

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
