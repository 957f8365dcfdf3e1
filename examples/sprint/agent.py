#!/usr/bin/env python3
"""A sample agent for `stepline sprint`, written from the sprint guide's contract alone, with Python's standard
library only (no model: it knows how to write a calculator's functions, and nothing else).

stepline starts it once per request (a story's build, each review layer) in the story's checkout, with the prompt
on stdin and its MCP server in STEPLINE_MCP_URL (answering only requests carrying STEPLINE_MCP_TOKEN). It asks for
the request with get_step(), does it, ends it with finish(summary=...), prints a stream-JSON result line with its
usage, and exits 0.

- build: the story asks for `NAME(a, b)` in `MODULE.py`; it writes the function and its unit test, and sets the
  story's status to review. It knows the operators of add, sub, mul and div, or the one the story names ("Use the
  `**` operator."); for any other story it writes nothing, which verify refuses.
- review: no finding (`none`), except for a division: that one it escalates to a person.
"""

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


class Mcp:
    """A minimal MCP client over streamable HTTP: JSON-RPC requests POSTed to one URL, answered as JSON or as
    server-sent events."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token, self.session, self.ids = url, token, "", 0

    def post(self, message: dict) -> dict | None:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        request = urllib.request.Request(self.url, json.dumps(message).encode(), headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            self.session = response.headers.get("Mcp-Session-Id") or self.session
            body = response.read().decode()
        if "id" not in message:
            return None  # a notification: no answer
        lines = body.splitlines() if "data:" in body else [f"data: {body}"]
        for line in lines:
            if line.startswith("data:"):
                answer = json.loads(line[5:])
                if answer.get("id") == message["id"]:
                    if "error" in answer:
                        raise RuntimeError(f"{message['method']}: {answer['error']}")
                    return answer["result"]
        raise RuntimeError(f"{message['method']}: no answer")

    def request(self, method: str, params: dict) -> dict:
        self.ids += 1
        return self.post({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}) or {}

    def start(self) -> None:
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "sample-agent", "version": "1"}})
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, **arguments: object) -> str:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        text = "".join(part.get("text", "") for part in result.get("content", []))
        if result.get("isError"):
            raise RuntimeError(f"{tool}: {text}")
        return text


def build(prompt: str) -> str:
    name, module = re.search(r"`(\w+)\(a, b\)` in `(\w+)\.py`", prompt).groups()
    named = re.search(r"Use the `([^`]+)` operator", prompt)
    operator = named.group(1) if named else OPERATORS.get(name)
    if operator is None:
        return f"I do not know how to write {name}(): nothing written"
    Path(f"{module}.py").write_text(f"def {name}(a, b):\n    return a {operator} b\n")
    Path("tests").mkdir(exist_ok=True)
    Path(f"tests/test_{name}.py").write_text(
        f"import unittest\n\nfrom {module} import {name}\n\n\nclass Test(unittest.TestCase):\n"
        f"    def test_{name}(self):\n        self.assertEqual({name}(6, 3), 6 {operator} 3)\n")
    story = Path(re.search(r"^## The story \((.+)\)$", prompt, re.M).group(1))
    story.write_text(re.sub(r"^status:.*$", "status: review", story.read_text(), count=1, flags=re.M))
    return f"{name}() in {module}.py, with its test; the story is in review"


def review(prompt: str) -> str:
    if re.search(r"\bdef div\(", prompt):
        return "escalate: div(a, 0) raises ZeroDivisionError; the story does not say what it should do"
    return "none"


def main() -> int:
    prompt = sys.stdin.read()
    mcp = Mcp(os.environ["STEPLINE_MCP_URL"], os.environ["STEPLINE_MCP_TOKEN"])
    mcp.start()
    step = json.loads(mcp.call("get_step"))
    summary = build(prompt) if step["hints"]["stage"] == "build" else review(prompt)
    mcp.call("finish", summary=summary)
    print(json.dumps({"type": "result", "result": summary, "usage": {"input_tokens": 300, "output_tokens": 50},
                      "total_cost_usd": 0.001}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
