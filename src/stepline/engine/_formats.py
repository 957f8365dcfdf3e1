"""Imports the engine module of every workflow format so each registers its step driver and flow.

One line per format; a new format adds its line here (native steps are built into the runner).
"""

from __future__ import annotations

import stepline.engine._bmad_legacy  # bmad-legacy workflows (R-E2..R-E5)
import stepline.engine._ccw  # noqa: F401 - CCW sessions (R-E7, R-E8)
from stepline.engine import _microfile  # noqa: F401 - bmad-microfile (and hybrid) workflows
