"""Imports every command module so their ``@app.command`` decorators register them."""

from __future__ import annotations

from stepline.interfaces.cli import (  # noqa: F401 - each registers its commands
    _bmad,
    _ccw,
    _cost,
    _doctor,
    _gates,
    _history,
    _logs,
    _mcp,
    _plan,
    _providers,
    _runs,
    _serve,
    _sprint,
    _validate,
)
