"""JSON and TOML from a workflow's files, every way they fail to parse one :class:`ReaderError` at file:line.

A syntax error, nesting past what the parser or the reader's depth limit (``STEPLINE_MAX_DEPTH``) takes, and a
number of more digits than Python reads (:func:`stepline._limits.long_number`, cut short in the message) are
each one line naming the file, the line where it is known, and the problem. YAML has :mod:`stepline._yaml`.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from stepline._limits import long_number, nesting, read_limits
from stepline.errors import ReaderError
from stepline.formats._files import read_text

__all__ = ["load_toml", "parse_json", "parse_toml"]

_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def parse_json(text: str, path: Path | str, *, what: str = "JSON error") -> Any:
    """The value of the JSON ``text`` (from ``path``); a ReaderError ``"<what>: <problem>"`` when it cannot be read."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReaderError(f"{what}: {exc.msg}", path=str(path), line=exc.lineno) from None
    except RecursionError:
        raise ReaderError(f"{what}: nested too deeply", path=str(path)) from None
    except ValueError as exc:
        found = long_number(exc, text)
        if found is None:
            raise
        raise ReaderError(f"{what}: {found[0]}", path=str(path), line=found[1]) from None


def parse_toml(text: str, path: Path | str) -> dict[str, Any]:
    """The table of the TOML ``text`` (from ``path``), no deeper than the reader's depth limit."""
    try:
        data: dict[str, Any] | None = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_LINE.search(str(exc))
        line = int(found[1]) if found else max(1, text.count("\n"))
        raise ReaderError(f"TOML does not parse: {_TOML_LINE.sub('', str(exc)).strip()}", path=str(path),
                          line=line, hint="fix the TOML syntax") from exc
    except RecursionError:  # tomllib parses arrays and inline tables recursively
        data = None
    except ValueError as exc:
        number = long_number(exc, text)
        if number is None:
            raise
        raise ReaderError(f"TOML does not parse: {number[0]}", path=str(path), line=number[1]) from None
    limit = read_limits().max_depth
    if data is None or nesting(data, limit) > limit:
        raise ReaderError(f"values nest deeper than {limit} levels", path=str(path),
                          hint="STEPLINE_MAX_DEPTH sets the limit")
    return data


def load_toml(path: Path) -> dict[str, Any]:
    """Read and parse one TOML file (:func:`parse_toml`)."""
    return parse_toml(read_text(path), path)
