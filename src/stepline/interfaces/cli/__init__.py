"""The ``stepline`` command line (typer + rich). Heavy modules are imported inside commands, not here."""

from __future__ import annotations

from stepline.interfaces.cli._app import app, main

__all__ = ["app", "main"]
