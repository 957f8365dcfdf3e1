"""Finding the line of a YAML key, so schema errors can name file:line."""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["find_yaml_line"]


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
