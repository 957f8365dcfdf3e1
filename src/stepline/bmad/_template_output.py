"""The output document of a BMAD template workflow: created from the template, filled section by section.

These are the runtime's own writes (R-E3). Each is idempotent, so redoing one after a crash leaves the same
file: the skeleton is written only when the file does not exist yet, a section fills its ``{{var}}`` marker
or is appended once, and a section to be generated again first gets its marker back in place of the old
text. Writes go through a temporary file and a rename.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from stepline.formats._files import read_text
from stepline.store import atomic_write_bytes

__all__ = ["create_from_template", "fill_placeholders", "placeholders", "put_section", "reopen_section"]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")


def _marker(name: str) -> re.Pattern[str]:
    return re.compile(r"\{\{\s*" + re.escape(name) + r"\s*\}\}")


def _write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, text.encode("utf-8"))


def placeholders(text: str) -> list[str]:
    """The distinct ``{{name}}`` placeholders of ``text``, in order."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(text)))


def fill_placeholders(text: str, values: Mapping[str, Any], keep: Collection[str] = ()) -> str:
    """Replace ``{{name}}`` with scalar ``values``; names in ``keep`` (sections still to generate) stay."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        value = values.get(name)
        if name in keep or value is None or isinstance(value, dict | list):
            return match.group(0)
        return str(value).lower() if isinstance(value, bool) else str(value)

    return _PLACEHOLDER.sub(fill, text)


def create_from_template(target: Path, template: Path | None, values: Mapping[str, Any],
                         keep: Collection[str]) -> bool:
    """Write the template skeleton (known variables filled) unless ``target`` exists; return whether written."""
    if target.exists():
        return False
    text = read_text(template) if template is not None and template.is_file() else ""
    _write(target, fill_placeholders(text, values, keep))
    return True


def put_section(target: Path, name: str, content: str) -> None:
    """Fill the ``{{name}}`` marker with ``content``; without a marker append it, unless it is already there."""
    text = read_text(target) if target.exists() else ""
    body = content.rstrip("\n")
    marker = _marker(name)
    if marker.search(text):
        _write(target, marker.sub(lambda _m: body, text, count=1))
    elif body not in text:
        _write(target, text + ("\n" if text and not text.endswith("\n") else "") + body + "\n")


def reopen_section(target: Path, name: str, previous: str) -> None:
    """Put the ``{{name}}`` marker back where ``previous`` (the section's last text) is, to generate it again."""
    if not target.exists():
        return
    text = read_text(target)
    body = previous.rstrip("\n")
    if _marker(name).search(text) or not body or body not in text:
        return
    _write(target, text.replace(body, "{{" + name + "}}", 1))

