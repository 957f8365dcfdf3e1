"""What every family's readers share: diagnostics with file:line, front matter, small files and their version.

The readers themselves live with their family (:mod:`stepline.native`, :mod:`stepline.bmad`,
:mod:`stepline.ccw`); :mod:`stepline.families` picks the one for a path. Nothing here reads a workflow format.
Names are imported on first use: a reader pays for YAML only when it reads front matter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

_EXPORTS = {
    "Diagnostic": "._diagnostics",
    "Severity": "._diagnostics",
    "FileVersion": "._files",
    "check_size": "._files",
    "decode_text": "._files",
    "file_version": "._files",
    "read_file": "._files",
    "read_text": "._files",
    "load_toml": "._data",
    "parse_json": "._data",
    "parse_toml": "._data",
    "Frontmatter": "._frontmatter",
    "read_frontmatter": "._frontmatter",
    "read_frontmatter_file": "._frontmatter",
    "update_frontmatter": "._frontmatter",
}

__all__ = [
    "Diagnostic",
    "FileVersion",
    "Frontmatter",
    "Severity",
    "check_size",
    "decode_text",
    "file_version",
    "load_toml",
    "parse_json",
    "parse_toml",
    "read_file",
    "read_frontmatter",
    "read_frontmatter_file",
    "read_text",
    "update_frontmatter",
]

if TYPE_CHECKING:
    from stepline.formats._data import load_toml, parse_json, parse_toml
    from stepline.formats._diagnostics import Diagnostic, Severity
    from stepline.formats._files import FileVersion, check_size, decode_text, file_version, read_file, read_text
    from stepline.formats._frontmatter import (
        Frontmatter,
        read_frontmatter,
        read_frontmatter_file,
        update_frontmatter,
    )

__getattr__, __dir__ = _lazy_exports("stepline.formats", globals(), _EXPORTS)
