"""``python -m stepline.interfaces.mcp [--project-root DIR]``: the same server as ``stepline mcp``."""

from __future__ import annotations

import sys

from stepline.interfaces.cli._app import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(["mcp", *sys.argv[1:]]))
