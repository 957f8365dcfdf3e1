"""A one-tool MCP server (stdio) for the real-CLI tests: ``finish(summary)`` writes the summary to the file named
by its first argument, so a test sees that the agent's MCP call arrived."""

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("stepline")


@server.tool()
def finish(summary: str) -> str:
    """Finish the step with a one-line summary."""
    Path(sys.argv[1]).write_text(summary, encoding="utf-8")
    return "finished"


if __name__ == "__main__":
    server.run()
