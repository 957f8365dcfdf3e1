"""Sphinx configuration of stepline's docs site (built by scripts/test.sh with warnings as errors)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "stepline"
author = "the stepline authors"
extensions = ["myst_parser", "stepline_reference"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "stepline"
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
# A console or yaml sample is shown as written; an unknown lexer name is an error (-W), not a silent fallback.
highlight_language = "none"
pygments_style = "friendly"
