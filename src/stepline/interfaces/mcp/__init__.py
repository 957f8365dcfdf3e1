"""The MCP interface (``stepline mcp``): IDE and CLI agents drive runs through the step protocol over MCP."""

from __future__ import annotations

from stepline.interfaces.mcp._server import RunHost, build_server, find_workflows, serve_stdio

__all__ = ["RunHost", "build_server", "find_workflows", "serve_stdio"]
