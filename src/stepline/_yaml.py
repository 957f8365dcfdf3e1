"""YAML with file:line errors: parsing user files and finding the line of a key for schema errors.

Shared by the readers, the runtime config and the scripted executor, which all report a broken file the
same way.
"""

from __future__ import annotations

from typing import Any

import yaml

from stepline.errors import ReaderError

__all__ = ["find_yaml_line", "load_yaml_text"]


def load_yaml_text(text: str, *, path: str, error: type[ReaderError] = ReaderError) -> Any:
    """Parse ``text`` (from ``path``); a syntax error raises ``error`` naming file:line and the problem."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise error(f"YAML error: {getattr(exc, 'problem', None) or exc}", path=path,
                    line=mark.line + 1 if mark else None) from None


def find_yaml_line(text: str, keys: tuple[Any, ...]) -> int | None:
    """Return the 1-based line of the node at ``keys`` in ``text`` (the deepest key that exists)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
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
