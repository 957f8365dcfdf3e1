"""A fake Anthropic Messages server: ``POST /v1/messages`` (with ``tool_use`` content blocks and ``usage``) and
``GET /v1/models``, answering from a script of replies, faults (429, 500, 529) and delays, or from a fake model
(:func:`responder`)."""

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
from fakes.policy import Conversation, Policy

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


def fault(status: int, message: str = "injected fault", delay: float = 0.0) -> Reply:
    """An error answer (429 rate limit, 500 api error, 529 overloaded, 400 …)."""
    kind = {429: "rate_limit_error", 400: "invalid_request_error", 529: "overloaded_error"}.get(status, "api_error")
    return Reply(status, error_body(message, kind), delay)


def responder(policy: Policy, usage: tuple[int, int] = (120, 30)) -> Responder:
    """Answer each Messages request with the ``tool_use`` blocks ``policy`` makes for it (and ``usage``)."""

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]["content"] if len(messages) > 1 else []
        if isinstance(last, str):  # a reminder: the last answer had no tool call
            results = [f"error: {last}"]
        else:
            results = [("error: " if block.get("is_error") else "") + _text(block.get("content"))
                       for block in last if block.get("type") == "tool_result"]
        first = messages[0]["content"]
        conversation = Conversation(
            system=_text(body.get("system")), prompt=_text(first),
            turns=sum(m["role"] == "assistant" for m in messages), results=results,
            tools={t["name"]: t["input_schema"] for t in body.get("tools") or []})
        return message(*policy(conversation), model=str(body.get("model") or "fake-claude"), usage=usage)

    return respond


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
            return await self.answer(await request.json(), dict(request.headers), error_body)

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
