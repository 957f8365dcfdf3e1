"""The output document of a BMAD template workflow: created from the template, filled section by section.

These are the runtime's own writes (R-E3). Each is idempotent, so redoing one after a crash leaves the same
file: the skeleton is written only when the file does not exist yet, a section fills its ``{{var}}`` marker
or is appended once, and a section to be generated again first gets its marker back in place of the old
text. Writes go through a temporary file and a rename.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from stepline._placeholders import Kind, Placeholder, find, substitute
from stepline.formats import read_text
from stepline.store import atomic_write_bytes

__all__ = ["create_from_template", "placeholders", "put_section", "reopen_section"]


def _marker(text: str, name: str) -> Placeholder | None:
    """The first ``{{name}}`` marker of ``text``."""
    return next((p for p in find(text, {Kind.RUNTIME}) if p.name == name), None)


def _write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, text.encode("utf-8"))


def placeholders(text: str) -> list[str]:
    """The distinct ``{{name}}`` placeholders of ``text``, in order."""
    return list(dict.fromkeys(p.name for p in find(text, {Kind.RUNTIME})))


def create_from_template(target: Path, template: Path | None, values: Mapping[str, Any],
                         keep: Collection[str]) -> bool:
    """Write the template skeleton (known variables filled) unless ``target`` exists; return whether written."""
    if target.exists():
        return False
    text = read_text(template) if template is not None and template.is_file() else ""
    _write(target, substitute(text, values, kinds={Kind.RUNTIME}, keep=keep))  # sections still to generate stay
    return True


def put_section(target: Path, name: str, content: str) -> None:
    """Fill the ``{{name}}`` marker with ``content``; without a marker append it, unless it is already there."""
    text = read_text(target) if target.exists() else ""
    body = content.rstrip("\n")
    marker = _marker(text, name)
    if marker is not None:
        _write(target, text[:marker.start] + body + text[marker.end:])
    elif body not in text:
        _write(target, text + ("\n" if text and not text.endswith("\n") else "") + body + "\n")


def reopen_section(target: Path, name: str, previous: str) -> None:
    """Put the ``{{name}}`` marker back where ``previous`` (the section's last text) is, to generate it again."""
    if not target.exists():
        return
    text = read_text(target)
    body = previous.rstrip("\n")
    if _marker(text, name) is not None or not body or body not in text:
        return
    _write(target, text.replace(body, "{{" + name + "}}", 1))

