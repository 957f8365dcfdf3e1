#!/usr/bin/env python3
"""A custom agent written from the sprint guide's "Your own agent" contract alone (nothing of stepline imported): it
reads the prompt on stdin, asks the step's MCP server (STEPLINE_MCP_URL) for the request with get_step(), does a
build (the story's function and its test, the story file set to review) or a review (no finding), ends with
finish(summary=...), prints a claude-style stream-JSON result line with its usage, and exits 0."""

import asyncio
import json
import os
import re
import sys
from pathlib import Path

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}


def build(prompt: str) -> str:
    name, module = re.search(r"`(\w+)\(a, b\)` in `(\w+)\.py`", prompt).groups()
    Path(f"{module}.py").write_text(f"def {name}(a, b):\n    return a {OPERATORS[name]} b\n")
    Path("tests").mkdir(exist_ok=True)
    Path(f"tests/test_{name}.py").write_text(
        f"import unittest\n\nfrom {module} import {name}\n\n\nclass Test(unittest.TestCase):\n"
        f"    def test_{name}(self):\n        self.assertEqual({name}(6, 3), 6 {OPERATORS[name]} 3)\n")
    story = Path(re.search(r"^## The story \((.+)\)$", prompt, re.M).group(1))
    story.write_text(re.sub(r"^status:.*$", "status: review", story.read_text(), count=1, flags=re.M))
    return f"{name}() in {module}.py, with its test; the story is in review"


async def main() -> int:
    prompt = sys.stdin.read()
    headers = {"Authorization": f"Bearer {os.environ['STEPLINE_MCP_TOKEN']}"}
    async with streamable_http_client(os.environ["STEPLINE_MCP_URL"],
                                      http_client=create_mcp_http_client(headers=headers)) as (read, write), \
            ClientSession(read, write) as mcp:
        await mcp.initialize()
        step = json.loads((await mcp.call_tool("get_step", {})).content[0].text)
        summary = build(prompt) if step["hints"]["stage"] == "build" else "none"
        await mcp.call_tool("finish", {"summary": summary})
    print(json.dumps({"type": "result", "result": summary, "usage": {"input_tokens": 300, "output_tokens": 50},
                      "total_cost_usd": 0.001}), flush=True)
    return 0


sys.exit(asyncio.run(main()))
