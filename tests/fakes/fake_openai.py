"""A fake OpenAI server: Chat Completions (``POST /v1/chat/completions``, with ``tool_calls``), Responses
(``POST /v1/responses``, with ``function_call`` items) and ``GET /v1/models``, answering from a script of replies,
faults (429, 500) and delays, or from a fake model (:func:`responder`, for either API). A request with
``"stream": true`` gets the reply as the API streams it (:func:`chunks`, :func:`response_events`), usage included.
"""

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


def chunks(body: dict[str, Any]) -> Iterator[str]:
    """A ``chat.completion`` as Chat Completions streams it: ``chat.completion.chunk`` lines with the role, the
    text, each tool call (its id and name, then its arguments), the finish reason, then a chunk with no choices
    and the ``usage`` (what ``stream_options.include_usage`` asks for; clients that did not ask ignore it), then
    ``[DONE]``."""
    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] if delta or finish else []
        data = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"],
                "model": body["model"], "choices": choices, **more}
        return f"data: {json.dumps(data)}\n\n"

    choice = body["choices"][0]
    message = choice["message"]
    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"], "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": call["function"]["arguments"]}}]})
    yield chunk({}, choice["finish_reason"])
    yield chunk({}, usage=body["usage"])
    yield "data: [DONE]\n\n"


def response(*calls: Call, text: str | None = None, model: str = "fake-gpt", usage: tuple[int, int] = (100, 20),
             namespaces: dict[str, str] | None = None) -> Reply:
    """A 200 Responses ``response`` whose output has an assistant message (optional) and a ``function_call`` item
    per call; a call named in ``namespaces`` (full name -> namespace, see :func:`_functions`) calls that namespace's
    function, as codex offers MCP tools (namespace ``mcp__stepline``, function ``finish``)."""
    output: list[dict[str, Any]] = []
    if text:
        output.append({"type": "message", "id": f"msg_{next(_ids)}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for name, args in calls:
        namespace = (namespaces or {}).get(name)
        item = {"type": "function_call", "id": f"fc_{next(_ids)}", "call_id": f"call_{next(_ids)}", "name": name,
                "arguments": json.dumps(args), "status": "completed"}
        if namespace:
            item |= {"name": name.removeprefix(f"{namespace}__"), "namespace": namespace}
        output.append(item)
    return Reply(200, {
        "id": f"resp_{next(_ids)}", "object": "response", "created_at": 1_700_000_000, "status": "completed",
        "model": model, "output": output,
        "usage": {"input_tokens": usage[0], "input_tokens_details": {"cached_tokens": 0}, "output_tokens": usage[1],
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": sum(usage)},
    })


def response_events(body: dict[str, Any]) -> Iterator[str]:
    """A ``response`` as the Responses API streams it: ``response.created``, per output item
    ``response.output_item.added``, its text or arguments deltas and ``….done``, ``response.output_item.done``,
    then ``response.completed`` with the whole response and its ``usage``."""
    sequence = itertools.count()

    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(sequence), **data})}\n\n"

    yield event("response.created", response={**body, "status": "in_progress", "output": [], "usage": None})
    for index, item in enumerate(body["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event("response.output_item.added", output_index=index, item={**item, "content": []})
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                        part=part)
            yield event("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                        delta=text)
            yield event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                        text=text)
            yield event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                        part={**part, "text": text})
        else:
            yield event("response.output_item.added", output_index=index,
                        item={**item, "arguments": "", "status": "in_progress"})
            yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                        delta=item["arguments"])
            yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                        arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=body)


def fault(status: int, message: str = "injected fault", delay: float = 0.0) -> Reply:
    """An error answer (429 rate limit, 500, 400, …)."""
    kind = {429: "rate_limit_exceeded", 400: "invalid_request_error"}.get(status, "server_error")
    return Reply(status, error_body(message, kind), delay)


def responder(policy: Play, usage: tuple[int, int] = (100, 20)) -> Responder:
    """Answer each request, Chat Completions or Responses, with the tool calls ``policy`` makes for it (and
    ``usage``; a call by another CLI's name for an MCP tool goes to the name this one offers, see
    :func:`~fakes._script.offered_name`); no call ends the turn with a text."""

    def respond(body: dict[str, Any]) -> Reply:
        model = str(body.get("model") or "fake-gpt")
        if "input" in body:
            conversation = _responses_conversation(body)
            calls = policy(conversation)
            return response(*calls, text=None if calls else "Done.", model=model, usage=usage,
                            namespaces={name: space for name, (space, _) in _functions(body.get("tools") or []).items()
                                        if space})
        conversation = _chat_conversation(body)
        calls = [(offered_name(name, conversation.tools), args) for name, args in policy(conversation)]
        return completion(*calls, text=None if calls else "Done.", model=model, usage=usage)

    return respond


def _chat_conversation(body: dict[str, Any]) -> Conversation:
    """A Chat Completions request as the fake model sees it: its prompt the user messages before the first answer
    (a CLI sends reminders of its own before the user's prompt)."""
    messages = body["messages"]
    trailing: list[str] = []
    for message in reversed(messages):
        if message["role"] != "tool":
            if message["role"] == "user" and len(messages) > 2:  # a reminder: the last answer had no call
                trailing.append(f"error: {_text(message['content'])}")
            break
        trailing.insert(0, _text(message["content"]))
    system = [_text(m["content"]) for m in messages if m["role"] == "system"]
    opening = next((n for n, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    prompt = "\n".join(_text(m["content"]) for m in messages[:opening] if m["role"] == "user")
    return Conversation(
        system="\n".join(system), prompt=prompt,
        turns=sum(m["role"] == "assistant" for m in messages), results=trailing,
        tools={t["function"]["name"]: t["function"].get("parameters", {}) for t in body.get("tools") or []})


def _responses_conversation(body: dict[str, Any]) -> Conversation:
    """A Responses request as the fake model sees it: its prompt the user messages before the model's first turn,
    its turns the runs of model output in ``input`` (messages of the assistant, function calls, reasoning), its
    results the function call outputs after the last one."""
    items = [{"type": "message", "role": "user", "content": body["input"]}] if isinstance(body["input"], str) \
        else body["input"]
    model_items = {"function_call", "custom_tool_call", "reasoning"}
    turns, in_turn = 0, False
    results: list[str] = []
    prompt: list[str] = []
    for item in items:
        if item.get("role") == "user" and not turns:
            prompt.append(_text(item["content"]))
        mine = item.get("type") in model_items or item.get("role") == "assistant"
        turns += mine and not in_turn
        in_turn = mine
        if mine:
            results = []
        elif item.get("type") in ("function_call_output", "custom_tool_call_output"):
            results.append(_text(item["output"]))
    system = [_text(item["content"]) for item in items if item.get("role") in ("system", "developer")]
    return Conversation(
        system="\n".join([body.get("instructions") or "", *system]), prompt="\n".join(prompt), turns=turns,
        results=results, tools={name: schema for name, (_, schema) in _functions(body.get("tools") or []).items()})


def _functions(offered: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The functions a Responses request offers: full name -> (namespace or "", parameters schema). Codex offers
    an MCP server's tools as the namespace ``mcp__<server>``: ``finish`` of ``stepline`` is
    ``mcp__stepline__finish``, the name claude gives it too."""
    functions = {t["name"]: ("", t.get("parameters", {})) for t in offered if t.get("type") == "function"}
    for space in (t for t in offered if t.get("type") == "namespace"):
        functions |= {f"{space['name']}__{name}": (space["name"], schema)
                      for name, (_, schema) in _functions(space.get("tools") or []).items()}
    return functions


def _text(content: Any) -> str:
    """A content field as text: a string, or the text of its parts."""
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


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
            body = await request.json()
            return await self.answer(body, dict(request.headers), error_body, chunks if body.get("stream") else None)

        @self.app.post("/v1/responses")
        async def responses(request: Request) -> Any:
            body = await request.json()
            return await self.answer(body, dict(request.headers), error_body,
                                     response_events if body.get("stream") else None)

        @self.app.get("/v1/models")
        async def models(request: Request) -> Any:
            self.headers.append(dict(request.headers))
            if self.models_fault is not None:
                return JSONResponse(self.models_fault.body, status_code=self.models_fault.status)
            return {"object": "list", "data": [{"id": "fake-gpt", "object": "model", "created": 0,
                                                "owned_by": "stepline-tests"}]}

    def add_cache_usage(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """OpenAI's automatic prefix caching: the prompt's prefix shared with an earlier request (tools, then
        messages or input items, as serialised; a token taken as 4 characters) is reported as ``cached_tokens``,
        in Chat Completions' ``prompt_tokens_details`` or in Responses' ``input_tokens_details``."""
        def text(request: dict[str, Any]) -> str:
            items = request["messages"] if "messages" in request else request["input"]
            return json.dumps(request.get("tools") or [], sort_keys=True) + "".join(
                json.dumps(m, sort_keys=True) for m in ([items] if isinstance(items, str) else items))

        mine = text(body)
        shared = self.shared_prefix(mine, [text(r) for r in self.requests[:-1]])
        prompt, details = ("prompt_tokens", "prompt_tokens_details") if "prompt_tokens" in usage \
            else ("input_tokens", "input_tokens_details")
        cached = min(usage[prompt], usage[prompt] * shared // max(1, len(mine)))
        return {**usage, details: {"cached_tokens": cached}}

    @contextmanager
    def running(self) -> Iterator[FakeOpenAI]:
        """Serve on 127.0.0.1; ``base_url`` ends in ``/v1`` as the SDK expects."""
        with serve(self.app) as url:
            self.base_url = url + "/v1"
            yield self
