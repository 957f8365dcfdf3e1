"""What the MCP tests share: a stdio ``stepline mcp`` server, a tool call's result, and an agent that does every
request the run waits on the way the dry-run executor would (default branches, the default menu option) — one
request at a time in the order listed, or every request of a batch at once, as parallel subagents would."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from conftest import CORPUS
from stepline.interfaces.cli._app import run_cli

#: A run's end states, as current_step reports them once nothing waits.
ENDED = ("completed", "failed", "blocked", "cancelled")
#: The two BMAD corpus trees.
TREES = {"v6.0.0-alpha.23": CORPUS / "bmad" / "v6.0.0-alpha.23", "v6.11.0": CORPUS / "bmad" / "v6.11.0"}


def install(tree: str, project: Path) -> Path:
    """The corpus tree ``tree`` installed into ``project`` as `stepline bmad install` does (alpha.23 with the
    extras its workflows name); skips the test when the corpus is not there."""
    if not TREES[tree].is_dir():
        pytest.skip(f"shared/corpus/bmad/{tree} is not available")
    extras = ["--extras", str(CORPUS / "bmad" / "extras")] if tree.startswith("v6.0") else []
    assert run_cli(["bmad", "install", str(TREES[tree]), "--project", str(project), *extras,
                    "--set", "user_name=Ada"]) == 0
    return project.resolve()


def stdio_server(project: Path) -> StdioServerParameters:
    """``python -m stepline.interfaces.mcp`` over the project: the same server as ``stepline mcp``."""
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "stepline.interfaces.mcp", "--project-root", str(project)],
                                 cwd=str(project))


async def call(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    """Call tool ``name`` and return its result; a tool error fails the test with its text."""
    result = await client.call_tool(name, args or {})
    if result.is_error:
        raise AssertionError(f"{name} failed: {result.content}")
    structured = result.structured_content
    if structured is not None:
        return structured.get("result", structured) if isinstance(structured, dict) else structured
    text = result.content[0].text  # type: ignore[union-attr]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def default_choice(request: dict[str, Any]) -> str | None:
    """The option a person pressing Enter takes: the menu's default, else C (Continue, in any case), else the
    first one."""
    menu = request.get("menu") or []
    for option in menu:
        if option.get("default"):
            return str(option["key"])
    keys = [str(option["key"]) for option in menu] or list(request.get("choices") or [])
    return next((key for key in keys if key.lower() == "c"), keys[0]) if keys else None


class DryAgent:
    """Does each waiting request as the dry-run executor would, through the MCP tools; counts its tool calls.

    ``parallel``: do all the requests of one current_step answer at once (as several subagents would).
    """

    def __init__(self, client: Client, *, parallel: bool = False) -> None:
        self.client, self.parallel = client, parallel
        self.calls = 0
        self.run_id = ""
        #: Every request handed out, as current_step listed it, in the order they were done.
        self.requests: list[dict[str, Any]] = []
        #: The largest number of requests waiting at once.
        self.widest = 0

    async def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        self.calls += 1
        return await call(self.client, name, args)

    async def drive(self, path: str, *, mode: str = "normal", limit: int = 400) -> dict[str, Any]:
        """Start ``path`` and do its requests until the run ends; return current_step's final answer."""
        self.run_id = (await self.call("start_run", {"path": path, "mode": mode}))["run_id"]
        for _ in range(limit):
            current = await self.call("current_step", {"wait_seconds": 30})
            requests = current.get("requests") or []
            if current["status"] in ENDED:
                return dict(current)
            if current["status"] == "running":
                continue
            self.widest = max(self.widest, len(requests))
            if self.parallel:
                await asyncio.gather(*(self.do(request) for request in requests))
            else:
                for request in reversed(requests):  # any order will do: the last one first
                    await self.do(request)
        raise AssertionError(f"{path}: still running after {limit} rounds")

    async def do(self, request: dict[str, Any]) -> None:
        """One request, named by its id in every call."""
        self.requests.append(request)
        rid = request["request_id"]
        if request["waiting_for"] == "answer":
            # a conversation the person ends: "(answer `done` when finished)"
            ends = "answer `done` when finished" in str(request.get("question") or "")
            await self.call("answer", {"run_id": self.run_id, "request_id": rid,
                                       "answer": default_choice(request) or ("done" if ends else "as you see fit")})
        elif request["kind"] == "decide":
            await self.call("decide", {"value": bool(request["hints"].get("default", False)),
                                       "reason": "the default branch", "request_id": rid})
        elif request["kind"] == "generate":
            await self.call("write_output", {"content": f"[agent] {request['section']}\n", "mode": "section",
                                             "section": request["section"], "request_id": rid})
            await self.call("finish", {"summary": f"generated {request['section']}", "request_id": rid})
        else:
            if request["hints"].get("output"):
                await self.call("write_output", {"content": f"[agent] {request['title']}\n", "request_id": rid})
            choice = default_choice(request)
            if request["kind"] == "answer" and choice is None:
                choice = "as you see fit"
            await self.call("finish", {"choice": choice, "summary": f"agent: {request['title']}",
                                       "request_id": rid})
