"""The ``mcp`` command: serve the step protocol over MCP (stdio) for IDE and CLI agents."""

from __future__ import annotations

from stepline.interfaces.cli._options import ConfigOption, Directory, ProjectRoot, app, where


@app.command()
def mcp(directory: Directory = None, project_root: ProjectRoot = None, config: ConfigOption = None) -> None:
    """Serve runs over MCP on stdin/stdout: an agent gets the requests a run waits on and does them through the
    step protocol (Claude Code, Cursor, Codex: see docs/guides/mcp.md)."""
    import asyncio

    from stepline.engine import load_runtime_config
    from stepline.interfaces.mcp import serve_stdio

    at = where(directory, project_root)
    asyncio.run(serve_stdio(at.root, load_runtime_config(at.root, at.option(config))))
