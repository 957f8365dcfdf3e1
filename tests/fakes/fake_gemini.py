"""A fake Gemini API server (``generativelanguage.googleapis.com``'s REST shape): ``POST
/v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (``?alt=sse``, one event per candidate
chunk), ``:countTokens`` and ``GET /v1beta/models``, answering from a script of replies and faults or from a fake
model (:func:`responder`). The model named in the path is recorded in each request as ``model``."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fakes._script import Reply, Responder, Script, offered_name
from fakes._server import serve
from fakes.policy import Call, Conversation, Play

_ids = itertools.count(1)


def error_body(message: str, status: str = "INVALID_ARGUMENT", code: int = 400) -> dict[str, Any]:
    """The API's error envelope."""
    return {"error": {"code": code, "message": message, "status": status}}


def content(*calls: Call, text: str | None = None, model: str = "fake-gemini",
            usage: tuple[int, int] = (110, 25)) -> Reply:
    """A 200 ``GenerateContentResponse`` whose one candidate has a text part (optional) and a ``functionCall``
    part per call, with ``usageMetadata``."""
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts += [{"functionCall": {"id": f"call_{next(_ids)}", "name": name, "args": args}} for name, args in calls]
    return Reply(200, {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": usage[0], "candidatesTokenCount": usage[1],
                          "totalTokenCount": sum(usage)},
        "modelVersion": model, "responseId": f"resp_{next(_ids)}",
    })


def events(body: dict[str, Any]) -> Iterator[str]:
    """A ``GenerateContentResponse`` as ``streamGenerateContent?alt=sse`` sends it: a chunk per part, the last
    one with the finish reason and the ``usageMetadata``."""
    candidate = body["candidates"][0]
    parts = candidate["content"]["parts"] or [{"text": ""}]
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0,
                                 **({"finishReason": candidate["finishReason"]} if last else {})}],
                 "modelVersion": body["modelVersion"], "responseId": body["responseId"],
                 **({"usageMetadata": body["usageMetadata"]} if last else {})}
        yield f"data: {json.dumps(chunk)}\r\n\r\n"


def fault(status: int, message: str = "injected fault", delay: float = 0.0) -> Reply:
    """An error answer (429 quota, 500, 503 overloaded, 400 …)."""
    kind = {429: "RESOURCE_EXHAUSTED", 400: "INVALID_ARGUMENT", 503: "UNAVAILABLE"}.get(status, "INTERNAL")
    return Reply(status, error_body(message, kind, status), delay)


def responder(policy: Play, usage: tuple[int, int] = (110, 25)) -> Responder:
    """Answer each request with the function calls ``policy`` makes for it (and ``usage``; an MCP tool by any
    CLI's name, see :func:`~fakes._script.offered_name`); no call ends the turn with a text."""

    def respond(body: dict[str, Any]) -> Reply:
        conversation = _conversation(body)
        calls = [(offered_name(name, conversation.tools), args) for name, args in policy(conversation)]
        return content(*calls, text=None if calls else "Done.", model=str(body["model"]), usage=usage)

    return respond


def _conversation(body: dict[str, Any]) -> Conversation:
    """A request as the fake model sees it: its prompt the user texts before the model's first turn, its results
    the function responses of the last user content."""
    contents = body.get("contents") or []
    opening = next((n for n, c in enumerate(contents) if c.get("role") == "model"), len(contents))
    prompt = "\n".join(part["text"] for c in contents[:opening] for part in c.get("parts") or [] if "text" in part)
    results: list[str] = []
    if contents and contents[-1].get("role") == "user":
        for part in contents[-1].get("parts") or []:
            if "functionResponse" in part:
                answer = part["functionResponse"].get("response") or {}
                results.append(("error: " if "error" in answer else "") + json.dumps(answer))
    system = "".join(part.get("text", "") for part in (body.get("systemInstruction") or {}).get("parts") or [])
    tools = {declaration["name"]: declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
             for tool in body.get("tools") or [] for declaration in tool.get("functionDeclarations") or []}
    return Conversation(system=system, prompt=prompt, turns=sum(c.get("role") == "model" for c in contents),
                        results=results, tools=tools)


class FakeGemini(Script):
    """The fake server's state; :meth:`running` serves it."""

    def __init__(self) -> None:
        super().__init__()
        self.app = FastAPI()
        self.base_url = ""
        self.usage_key = "usageMetadata"

        @self.app.post("/{version}/models/{call}")
        async def models_call(version: str, call: str, request: Request) -> Any:
            model, _, method = call.partition(":")
            body = {**await request.json(), "model": model}
            if method == "countTokens":
                return {"totalTokens": len(json.dumps(body)) // 4}
            if method not in ("generateContent", "streamGenerateContent"):
                return JSONResponse(error_body(f"fake: no method {method!r}", "NOT_FOUND", 404), status_code=404)
            return await self.answer(body, dict(request.headers), error_body,
                                     events if method == "streamGenerateContent" else None)

        @self.app.get("/{version}/models")
        async def models(version: str) -> Any:
            return {"models": [{"name": "models/fake-gemini", "displayName": "Fake Gemini",
                                "supportedGenerationMethods": ["generateContent", "countTokens"]}]}

    def add_cache_usage(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """Gemini's implicit caching: the prompt's prefix shared with an earlier request (system instruction, tools,
        then contents, as serialised; a token taken as 4 characters) is reported as ``cachedContentTokenCount``, a
        part of ``promptTokenCount``."""
        def text(request: dict[str, Any]) -> str:
            return json.dumps([request.get("systemInstruction"), request.get("tools")], sort_keys=True) + "".join(
                json.dumps(c, sort_keys=True) for c in request.get("contents") or [])

        mine = text(body)
        shared = self.shared_prefix(mine, [text(r) for r in self.requests[:-1]])
        prompt = usage["promptTokenCount"]
        return {**usage, "cachedContentTokenCount": min(prompt, prompt * shared // max(1, len(mine)))}

    @contextmanager
    def running(self) -> Iterator[FakeGemini]:
        """Serve on 127.0.0.1; ``base_url`` is the root (``GOOGLE_GEMINI_BASE_URL``), without the API version."""
        with serve(self.app) as url:
            self.base_url = url
            yield self
