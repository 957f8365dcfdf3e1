"""How much a reader accepts from one file: its size, the values its YAML expands to, and how deep it nests.

A workflow's files come from anywhere (a downloaded skill, a shared CCW session), so every reader bounds them:
a file over the size limit is refused before it is read, a YAML document whose aliases expand past the value
limit (a "billion laughs") or that nests deeper than the depth limit (``a: &a [*a]`` nests without end) is
refused while it is parsed, and TOML/JSON nesting is bounded the same way. Exceeding a limit is a
:class:`~stepline.errors.ReaderError` (exit 4) naming the file and the limit, reached within a second and in
memory bounded by the file's size.

Each limit can be set in the environment (``STEPLINE_MAX_FILE_BYTES``, ``STEPLINE_MAX_YAML_VALUES``,
``STEPLINE_MAX_DEPTH``), read at every check so a test or a wrapper can change it. Python itself reads no whole
number of more than 4,300 digits (``sys.get_int_max_str_digits``); :func:`long_number` says so in one line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from stepline.errors import ConfigError

__all__ = ["ReadLimits", "cut", "long_number", "nesting", "read_limits"]

#: The defaults: 8 MiB is thirty times the largest file of the BMAD and CCW releases in the corpus and holds a
#: 20,000-step native workflow (6.5 MB); two million values is eight times what that workflow has; 200 levels
#: is ten times the deepest real document.
_DEFAULTS = {"STEPLINE_MAX_FILE_BYTES": 8 * 1024 * 1024, "STEPLINE_MAX_YAML_VALUES": 2_000_000,
             "STEPLINE_MAX_DEPTH": 200}


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """The bounds a reader applies to one file."""

    max_file_bytes: int
    max_yaml_values: int
    max_depth: int


def _setting(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return _DEFAULTS[name]
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} is not a positive whole number", path=f"environment variable {name}",
                          hint=f"unset it (default {_DEFAULTS[name]}) or give a number of "
                               f"{'bytes' if 'BYTES' in name else 'values' if 'VALUES' in name else 'levels'}")
    return value


def read_limits() -> ReadLimits:
    """The limits in force now (the environment's, else the defaults)."""
    return ReadLimits(max_file_bytes=_setting("STEPLINE_MAX_FILE_BYTES"),
                      max_yaml_values=_setting("STEPLINE_MAX_YAML_VALUES"),
                      max_depth=_setting("STEPLINE_MAX_DEPTH"))


def nesting(value: Any, stop: int) -> int:
    """How many levels of lists and mappings ``value`` nests (a scalar is 1), counted without recursion and
    no further than ``stop + 1`` (enough to know a limit is passed)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > stop:
            return deepest
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


#: Python's refusal to read a whole number longer than it reads (json, tomllib and YAML's int all raise it).
_LONG_NUMBER = re.compile(r"Exceeds the limit \((\d+) digits\) for integer string conversion")


def cut(text: str, keep: int = 12) -> str:
    """``text`` for a one-line message: as it is when short, else its first and last ``keep`` characters."""
    return text if len(text) <= 2 * keep + 1 else f"{text[:keep]}…{text[-keep:]}"


def long_number(exc: BaseException, text: str | None = None) -> tuple[str, int | None] | None:
    """When ``exc`` is Python's refusal of a number too long to read: what to say of it (the number cut short, its
    digits, the limit) and its 1-based line in ``text`` (None when ``text`` is not given or does not show it);
    else None."""
    found = _LONG_NUMBER.search(str(exc)) if isinstance(exc, ValueError) else None
    if found is None:
        return None
    limit = int(found[1])
    number = re.search(rf"\d{{{limit + 1},}}", text) if text is not None else None
    if number is None:
        return f"a number of more than {limit} digits (no number may have more)", None
    line = text.count("\n", 0, number.start()) + 1 if text is not None else None
    return f"the number {cut(number[0])} has {len(number[0])} digits (no number may have more than {limit})", line
