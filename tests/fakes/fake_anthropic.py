"""A fake Anthropic Messages server: ``POST /v1/messages`` (with ``tool_use`` content blocks and ``usage``; streamed
as the API streams it when the request asks, see :func:`events`), ``POST /v1/messages/count_tokens``,
``GET /v1/models`` and ``HEAD /api/hello``, answering from a script of replies, faults (429, 500, 529) and
delays, or from a fake model (:func:`responder`).

Claude Code (2.1.x) defers MCP tools (and some of its own) behind ``ToolSearch``: the first request lists their
names in a message and offers a ``DeferredToolPlaceholder`` instead; the model calls ``ToolSearch`` with
``{"query": "select:mcp__stepline__finish"}``, claude answers with a ``tool_reference`` and offers the tool's
schema (``defer_loading: true``) from the next request on. :func:`responder` makes that round trip itself: a
call to a tool the request does not offer is preceded by the ``ToolSearch`` for it, and the fake model does not
see the extra turn.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fakes._script import Reply, Responder, Script
from fakes._server import serve
from fakes.policy import Call, Conversation, Play

_ids = itertools.count(1)


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """The API's error envelope."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def message(*calls: tuple[str, dict[str, Any]], text: str | None = None, model: str = "fake-claude",
            usage: tuple[int, int] = (120, 30)) -> Reply:
    """A 200 ``message`` whose content has a text block (optional) and one ``tool_use`` block per call."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name, "input": args}
                for name, args in calls]
    return Reply(200, {
        "id": f"msg_{next(_ids):04d}", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    })


def events(body: dict[str, Any]) -> Iterator[str]:
    """A ``message`` as the Messages API streams it (``"stream": true``): ``message_start`` with the input usage,
    then per content block ``content_block_start`` / ``…_delta`` (``text_delta``; ``input_json_delta`` in pieces
    for a ``tool_use``) / ``content_block_stop``, a ``ping``, ``message_delta`` with the stop reason and the
    usage, ``message_stop``."""
    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    usage = body["usage"]
    start_usage = {"input_tokens": usage["input_tokens"], "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 0, **usage, "output_tokens": 1}
    yield event("message_start", {"message": {**body, "content": [], "stop_reason": None, "stop_sequence": None,
                                              "usage": start_usage}})
    yield event("ping", {})
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            yield event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            yield event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
            text = json.dumps(block["input"])
            for at in range(0, len(text), 16):
                yield event("content_block_delta",
                            {"index": index, "delta": {"type": "input_json_delta", "partial_json": text[at:at + 16]}})
        yield event("content_block_stop", {"index": index})
    yield event("message_delta", {"delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                                  "usage": {**start_usage, "output_tokens": usage["output_tokens"]}})
    yield event("message_stop", {})


def fault(status: int, message: str = "injected fault", delay: float = 0.0) -> Reply:
    """An error answer (429 rate limit, 500 api error, 529 overloaded, 400 …)."""
    kind = {429: "rate_limit_error", 400: "invalid_request_error", 529: "overloaded_error"}.get(status, "api_error")
    return Reply(status, error_body(message, kind), delay)


def responder(policy: Play, usage: tuple[int, int] = (120, 30)) -> Responder:
    """Answer each Messages request with the ``tool_use`` blocks ``policy`` makes for it (and ``usage``); no call
    ends the turn with a text. A call to a tool the request does not offer (deferred by Claude Code) is loaded with
    ``ToolSearch`` first: the calls wait for its result, and those turns are not counted in ``turns``."""
    waiting: dict[str, list[Call]] = {}  # ToolSearch call id -> the calls it loads the tools for

    def respond(body: dict[str, Any]) -> Reply:
        model = str(body.get("model") or "fake-claude")
        messages = body["messages"]
        # Claude Code puts system-role messages between the turns (its environment, "the user hasn't heard from
        # you in a while"): the tool results are in the last message of the user
        said = [m for m in messages if m["role"] != "system"]
        last = said[-1]["content"] if said[-1]["role"] == "user" and len(said) > 1 else []
        if isinstance(last, str):  # a reminder: the last answer had no tool call
            results = [f"error: {last}"]
        else:
            blocks = [block for block in last if block.get("type") == "tool_result"]
            loaded = [waiting.pop(block["tool_use_id"]) for block in blocks if block["tool_use_id"] in waiting]
            if loaded:
                return message(*loaded[0], model=model, usage=usage)
            results = [("error: " if block.get("is_error") else "") + _text(block.get("content")) for block in blocks]
        tools = {t["name"]: t.get("input_schema", {}) for t in body.get("tools") or []}
        conversation = Conversation(
            system=_text(body.get("system")), prompt=_text(messages[0]["content"]),
            turns=sum(m["role"] == "assistant" and not _searches(m["content"]) for m in messages), results=results,
            tools=tools)
        calls = policy(conversation)
        deferred = sorted({name for name, _ in calls if name not in tools})
        if deferred and "ToolSearch" in tools:
            search = message(("ToolSearch", {"query": "select:" + ",".join(deferred)}), model=model, usage=usage)
            waiting[search.body["content"][0]["id"]] = calls
            return search
        return message(*calls, text=None if calls else "Done.", model=model, usage=usage)

    return respond


def _searches(content: Any) -> bool:
    """Whether an assistant message only loads deferred tools (calls ``ToolSearch`` and nothing else)."""
    uses = [block for block in content if block.get("type") == "tool_use"] if isinstance(content, list) else []
    return bool(uses) and all(block["name"] == "ToolSearch" for block in uses)


def _text(content: Any) -> str:
    """A content field as text: a string, or the text of its blocks."""
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(block.get("text", "") for block in content if block.get("type") == "text")


class FakeAnthropic(Script):
    """The fake server's state; :meth:`running` serves it."""

    def __init__(self) -> None:
        super().__init__()
        self.app = FastAPI()
        self.base_url = ""
        #: When set, ``GET /v1/models`` answers with this instead of the model list.
        self.models_fault: Reply | None = None

        @self.app.post("/v1/messages")
        async def messages(request: Request) -> Any:
            body = await request.json()
            return await self.answer(body, dict(request.headers), error_body, events if body.get("stream") else None)

        @self.app.api_route("/api/hello", methods=["GET", "HEAD"])
        async def hello() -> Any:  # Claude Code's connectivity check (left out with its non-essential traffic)
            return {}

        @self.app.post("/v1/messages/count_tokens")
        async def count_tokens(request: Request) -> Any:
            return {"input_tokens": len(json.dumps(await request.json())) // 4}

        @self.app.get("/v1/models")
        async def models(request: Request) -> Any:
            self.headers.append(dict(request.headers))
            if self.models_fault is not None:
                return JSONResponse(self.models_fault.body, status_code=self.models_fault.status)
            return {"data": [{"id": "fake-claude", "type": "model", "display_name": "Fake Claude",
                              "created_at": "2025-01-01T00:00:00Z"}], "has_more": False,
                    "first_id": "fake-claude", "last_id": "fake-claude"}

    def add_cache_usage(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """Anthropic's prompt caching: only up to a ``cache_control`` breakpoint (tools, then system blocks); the
        first request with that prefix writes it to the cache, later ones read it. ``input_tokens`` is then the
        uncached rest, as the API reports it."""
        def prefix(request: dict[str, Any]) -> str | None:
            blocks = [*(request.get("tools") or []),
                      *(request["system"] if isinstance(request.get("system"), list) else [])]
            marked = [n for n, block in enumerate(blocks) if isinstance(block, dict) and block.get("cache_control")]
            return json.dumps(blocks[: marked[-1] + 1], sort_keys=True) if marked else None

        mine = prefix(body)
        if mine is None:
            return usage
        size = min(usage["input_tokens"], max(1, len(mine) // 4))
        seen = any(prefix(r) == mine for r in self.requests[:-1])
        return {**usage, "input_tokens": usage["input_tokens"] - size,
                "cache_read_input_tokens": size if seen else 0, "cache_creation_input_tokens": 0 if seen else size}

    @contextmanager
    def running(self) -> Iterator[FakeAnthropic]:
        """Serve on 127.0.0.1; the SDK appends ``/v1/messages`` to ``base_url``."""
        with serve(self.app) as url:
            self.base_url = url
            yield self
