"""The MCP server's current_step hands the agent the step's TELIS context (a real client over stdio)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def _call(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(name, args or {})
    assert not result.is_error, result.content
    if result.structured_content is not None:
        structured = result.structured_content
        return structured.get("result", structured) if isinstance(structured, dict) else structured
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


def test_current_step_returns_the_context_with_the_step(project: Path) -> None:
    """The waiting step's payload holds telis_context: the shard the query found, with its fingerprint."""
    (project / "docs").mkdir()
    (project / "docs" / "backup.md").write_text("# Backups\n\nBackups run nightly at two.\n", encoding="utf-8")
    (project / "flow.yaml").write_text("id: ops\nsteps:\n  - id: check\n    body: Check the backups.\n"
                                       "    inputs: {telis_query: nightly backups}\n", encoding="utf-8")
    server = StdioServerParameters(command=sys.executable, args=["-m", "stepline.interfaces.mcp", "-C", str(project)],
                                   cwd=str(project))

    async def main() -> dict[str, Any]:
        async with asyncio.timeout(60), Client(server) as client:
            await _call(client, "start_run", {"path": "flow.yaml"})
            current = await _call(client, "current_step", {"wait_seconds": 20})
            await _call(client, "finish", {"summary": "checked"})
            return current

    current = asyncio.run(main())
    assert current["status"] == "waiting_for_work"
    context = current["requests"][0]["telis_context"]
    assert [s["id"] for s in context["shards"]] == ["docs/backup.md#backups"]
    assert context["fingerprint"].startswith("sha256:") and "nightly at two" in context["shards"][0]["text"]
