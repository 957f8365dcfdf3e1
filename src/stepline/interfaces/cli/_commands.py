"""Imports every command module so their ``@app.command`` decorators register them."""

from __future__ import annotations

import stepline.interfaces.cli._bmad  # registers `stepline bmad install`
import stepline.interfaces.cli._ccw  # registers `stepline ccw …`
import stepline.interfaces.cli._mcp  # noqa: F401 - registers `stepline mcp`
from stepline.interfaces.cli import _doctor, _gates, _runs, _validate
from stepline.interfaces.cli import _history as _history  # registers `stepline fork`, `replay`, `diff`
from stepline.interfaces.cli import _plan as _plan  # registers `stepline plan`
from stepline.interfaces.cli import _providers as _providers  # registers `stepline providers`
from stepline.interfaces.cli import _serve as _serve  # registers `stepline serve`
from stepline.interfaces.cli import _sprint as _sprint  # registers `stepline sprint …`

__all__ = ["_doctor", "_gates", "_runs", "_validate"]
