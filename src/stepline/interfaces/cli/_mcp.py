"""The ``mcp`` command: serve the step protocol over MCP (stdio) for IDE and CLI agents."""

from __future__ import annotations

from pathlib import Path

from stepline.interfaces.cli._app import ConfigOption, ProjectRoot, app


@app.command()
def mcp(project_root: ProjectRoot = Path("."), config: ConfigOption = None) -> None:
    """Serve runs over MCP on stdin/stdout: an agent gets one step at a time and reports through the protocol."""
    import asyncio

    from stepline.engine import load_runtime_config
    from stepline.errors import NotFoundError
    from stepline.interfaces.mcp import serve_stdio

    root = project_root.resolve()
    if not root.is_dir():
        raise NotFoundError(f"{project_root}: no such project folder", hint="pass an existing --project-root")
    asyncio.run(serve_stdio(root, load_runtime_config(root, config)))
