"""``python -m stepline.interfaces.mcp [-C DIR] [--project-root DIR] [--config FILE]``: the same server as
``stepline mcp`` (its options too), started without the CLI."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from stepline.errors import SteplineError
from stepline.interfaces.mcp import serve_stdio


def main(argv: list[str] | None = None) -> int:
    """Serve the project's runs over MCP on stdio; a user error is one line on stderr and its exit code."""
    parser = argparse.ArgumentParser(prog="python -m stepline.interfaces.mcp",
                                     description="Serve a project's runs over MCP on stdin/stdout.")
    parser.add_argument("-C", "--directory", type=Path, default=Path(), metavar="DIR",
                        help="work as if started in DIR (relative paths are taken from it)")
    parser.add_argument("--project-root", type=Path, metavar="DIR", help="the project folder (default: -C DIR)")
    parser.add_argument("--config", type=Path, metavar="FILE", help="runtime config file")
    args = parser.parse_args(argv)
    root = args.directory / args.project_root if args.project_root else args.directory
    try:
        asyncio.run(serve_stdio(root, args.directory / args.config if args.config else None))
    except SteplineError as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)
        return type(exc).exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
