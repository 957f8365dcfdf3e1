"""A fake OpenAI Chat Completions server: ``POST /v1/chat/completions`` (with ``tool_calls``) and
``GET /v1/models``, answering from a script of replies, faults (429, 500) and delays, or from a fake model
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
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def completion(*calls: tuple[str, dict[str, Any]], text: str | None = None, model: str = "fake-gpt",
               usage: tuple[int, int] = (100, 20)) -> Reply:
    """A 200 ``chat.completion`` whose message calls the named functions with the given arguments."""
    tool_calls = [{"id": f"call_{next(_ids)}", "type": "function",
                   "function": {"name": name, "arguments": json.dumps(args)}} for name, args in calls]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return Reply(200, {
        "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    })


def fault(status: int, message: str = "injected fault", delay: float = 0.0) -> Reply:
    """An error answer (429 rate limit, 500, 400, …)."""
    kind = {429: "rate_limit_exceeded", 400: "invalid_request_error"}.get(status, "server_error")
    return Reply(status, error_body(message, kind), delay)


def responder(policy: Policy, usage: tuple[int, int] = (100, 20)) -> Responder:
    """Answer each Chat Completions request with the tool calls ``policy`` makes for it (and ``usage``)."""

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        trailing: list[str] = []
        for message in reversed(messages):
            if message["role"] != "tool":
                if message["role"] == "user" and len(messages) > 2:  # a reminder: the last answer had no call
                    trailing.append(f"error: {message['content']}")
                break
            trailing.insert(0, str(message["content"]))
        conversation = Conversation(
            system=messages[0]["content"], prompt=messages[1]["content"],
            turns=sum(m["role"] == "assistant" for m in messages), results=trailing,
            tools={t["function"]["name"]: t["function"]["parameters"] for t in body.get("tools") or []})
        return completion(*policy(conversation), model=str(body.get("model") or "fake-gpt"), usage=usage)

    return respond


class FakeOpenAI(Script):
    """The fake server's state; :meth:`running` serves it."""

    def __init__(self) -> None:
        super().__init__()
        self.app = FastAPI()
        self.base_url = ""
        #: When set, ``GET /v1/models`` answers with this instead of the model list.
        self.models_fault: Reply | None = None

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            return await self.answer(await request.json(), dict(request.headers), error_body)

        @self.app.get("/v1/models")
        async def models(request: Request) -> Any:
            self.headers.append(dict(request.headers))
            if self.models_fault is not None:
                return JSONResponse(self.models_fault.body, status_code=self.models_fault.status)
            return {"object": "list", "data": [{"id": "fake-gpt", "object": "model", "created": 0,
                                                "owned_by": "stepline-tests"}]}

    def add_cache_usage(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """OpenAI's automatic prefix caching: the prompt's prefix shared with an earlier request (tools, then
        messages, as serialised; a token taken as 4 characters) is reported as ``cached_tokens``."""
        def text(request: dict[str, Any]) -> str:
            return json.dumps(request.get("tools") or [], sort_keys=True) + "".join(
                json.dumps(m, sort_keys=True) for m in request["messages"])

        mine = text(body)
        shared = self.shared_prefix(mine, [text(r) for r in self.requests[:-1]])
        cached = min(usage["prompt_tokens"], usage["prompt_tokens"] * shared // max(1, len(mine)))
        return {**usage, "prompt_tokens_details": {"cached_tokens": cached}}

    @contextmanager
    def running(self) -> Iterator[FakeOpenAI]:
        """Serve on 127.0.0.1; ``base_url`` ends in ``/v1`` as the SDK expects."""
        with serve(self.app) as url:
            self.base_url = url + "/v1"
            yield self
