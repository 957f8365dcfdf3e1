"""The ``anthropic`` executor: the Anthropic Messages API through the official SDK, with the step protocol
offered as tools (``tool_use`` / ``tool_result`` content blocks).

Options (``executors.anthropic`` in the runtime config): ``model``, ``base_url``, ``api_key`` — else
``STEPLINE_ANTHROPIC_MODEL``, ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY`` — ``max_tokens`` (default 4096, the
API requires one) and the shared ones of :class:`~stepline.executors._llm.LLMSettings`.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from stepline.executors._llm import LLMExecutor, ToolCall, ToolResult, Turn, sdk_errors
from stepline.executors._usage import Usage

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicExecutor"]


class AnthropicExecutor(LLMExecutor):
    """Runs steps with a Claude model; ``tool_use`` blocks are the step protocol."""

    name = "anthropic"
    env_prefix = "ANTHROPIC"
    default_max_tokens = 4096

    _client: anthropic.AsyncAnthropic | None = None

    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client, built on first use with the SDK's own retries off (ours apply instead)."""
        if self._client is None:
            import anthropic

            self._client = anthropic.AsyncAnthropic(api_key=self.settings.api_key, base_url=self.settings.base_url,
                                                    timeout=self.settings.timeout_seconds, max_retries=0)
        return self._client

    def translated(self) -> AbstractContextManager[None]:
        """SDK errors become :class:`ExecutorError` here (see :func:`~stepline.executors._llm.sdk_errors`)."""
        import anthropic

        return sdk_errors(self.name, self.settings.timeout_seconds, anthropic, anthropic.AnthropicError)

    def start_messages(self, user: str, repeated: int = 0) -> list[dict[str, Any]]:
        """A single user message; the system prompt is a separate request field. Its ``repeated`` first characters
        (the step's text, which the step's other requests send again) are a block of their own ending in a cache
        breakpoint: the first request writes it to the cache, the others read it."""
        if not repeated:
            return [{"role": "user", "content": user}]
        return [{"role": "user", "content": [
            {"type": "text", "text": user[:repeated], "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": user[repeated:]}]}]

    def add_turn(self, messages: list[dict[str, Any]], turn: Turn) -> None:
        """The assistant's text and ``tool_use`` blocks, echoed back unchanged."""
        blocks: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments or "{}")}
                   for c in turn.tool_calls]
        messages.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(no answer)"}]})

    def add_results(self, messages: list[dict[str, Any]], results: list[ToolResult]) -> None:
        """One user message holding a ``tool_result`` block per call."""
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}
            for r in results]})

    def add_user_text(self, messages: list[dict[str, Any]], text: str) -> None:
        """A plain user message."""
        messages.append({"role": "user", "content": text})

    async def send(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                   cache_key: str | None = None) -> Turn:
        """POST /v1/messages, with a cache breakpoint at the end of the system text: the tools and the system
        text, the same in every request of a run, are written to the prompt cache once and read from it after (a
        step's text sent by several of its requests has a breakpoint of its own: :meth:`start_messages`).
        (``cache_key`` is OpenAI's; Anthropic caches by the breakpoint.)"""
        extra: dict[str, Any] = {}
        if self.settings.temperature is not None:
            extra["temperature"] = self.settings.temperature
        with self.translated():
            response = await self.client().messages.create(
                model=self.settings.model,
                max_tokens=self.settings.max_tokens or self.default_max_tokens or 4096,
                system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                messages=messages,  # type: ignore[arg-type]
                tools=[{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                       for t in tools],
                **extra,
            )
        text = "".join(block.text for block in response.content if block.type == "text")
        calls = [ToolCall(id=block.id, name=block.name, arguments=json.dumps(block.input))
                 for block in response.content if block.type == "tool_use"]
        read = response.usage.cache_read_input_tokens or 0
        write = response.usage.cache_creation_input_tokens or 0
        used = Usage(response.usage.input_tokens + read + write,  # Anthropic's input_tokens: the uncached part only
                     response.usage.output_tokens, read, write, calls=1)
        return Turn(text=text, tool_calls=calls, stop_reason=response.stop_reason,
                    usage={**used.to_record(), "model": response.model or self.settings.model})
