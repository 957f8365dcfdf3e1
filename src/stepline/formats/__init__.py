"""What every family's readers share: diagnostics with file:line, front matter, small files and their version.

The readers themselves live with their family (:mod:`stepline.native`, :mod:`stepline.bmad`,
:mod:`stepline.ccw`); :mod:`stepline.families` picks the one for a path. Nothing here reads a workflow format.
"""

from __future__ import annotations

from stepline.formats._diagnostics import Diagnostic, Severity

__all__ = ["Diagnostic", "Severity"]
