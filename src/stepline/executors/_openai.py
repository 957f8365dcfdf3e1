"""The ``openai`` executor: any OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, vLLM, LM Studio,
OpenRouter) through the official SDK, with the step protocol offered as function-calling tools.

Options (``executors.openai`` in the runtime config, or ``--executor openai`` options): ``model``,
``base_url``, ``api_key`` — else ``STEPLINE_OPENAI_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` — and the
shared ones of :class:`~stepline.executors._llm.LLMSettings`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from stepline.errors import ExecutorError
from stepline.executors._llm import LLMExecutor, ToolCall, ToolResult, Turn, sdk_errors
from stepline.executors._usage import Usage

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIExecutor"]


class OpenAIExecutor(LLMExecutor):
    """Runs steps with a Chat Completions model; tool calls are the step protocol."""

    name = "openai"
    env_prefix = "OPENAI"

    _client: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on first use with the SDK's own retries off (ours apply instead)."""
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(api_key=self.settings.api_key, base_url=self.settings.base_url,
                                              timeout=self.settings.timeout_seconds, max_retries=0)
        return self._client

    def translated(self) -> AbstractContextManager[None]:
        """SDK errors become :class:`ExecutorError` here (see :func:`~stepline.executors._llm.sdk_errors`)."""
        import openai

        return sdk_errors(self.name, self.settings.timeout_seconds, openai, openai.OpenAIError)

    def start_messages(self, user: str, repeated: int = 0) -> list[dict[str, Any]]:
        """A single user message; the system prompt goes first at send time. (OpenAI caches any repeated prefix by
        itself: ``repeated`` needs no mark.)"""
        return [{"role": "user", "content": user}]

    def add_turn(self, messages: list[dict[str, Any]], turn: Turn) -> None:
        """The assistant message with its tool calls, as the API expects them echoed back."""
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.tool_calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}}
                                     for c in turn.tool_calls]
        messages.append(message)

    def add_results(self, messages: list[dict[str, Any]], results: list[ToolResult]) -> None:
        """One ``tool`` message per call."""
        messages.extend({"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in results)

    def add_user_text(self, messages: list[dict[str, Any]], text: str) -> None:
        """A plain user message."""
        messages.append({"role": "user", "content": text})

    async def send(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                   cache_key: str | None = None) -> Turn:
        """POST /chat/completions. OpenAI caches a prompt's prefix by itself; ``prompt_cache_key`` (the run) keeps
        a run's requests on the same cache, and the usage's ``cached_tokens`` say how much it served."""
        extra: dict[str, Any] = {}
        if cache_key is not None:
            extra["prompt_cache_key"] = cache_key
        if self.settings.max_tokens is not None:
            extra["max_tokens"] = self.settings.max_tokens
        if self.settings.temperature is not None:
            extra["temperature"] = self.settings.temperature
        with self.translated():
            response = await self.client().chat.completions.create(
                model=self.settings.model,
                messages=[{"role": "system", "content": system}, *messages],  # type: ignore[list-item]
                tools=[{"type": "function", "function": tool} for tool in tools],  # type: ignore[typeddict-item]
                **extra,
            )
        if not response.choices:
            raise ExecutorError(f"{self.name}: the response has no choices", retryable=True)
        choice = response.choices[0]
        calls = [ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
                 for c in choice.message.tool_calls or [] if c.type == "function"]
        usage = response.usage
        details = usage.prompt_tokens_details if usage else None
        used = Usage(usage.prompt_tokens, usage.completion_tokens,  # the whole prompt, its cached part included
                     (details.cached_tokens or 0) if details else 0, calls=1) if usage else Usage(calls=1)
        return Turn(text=choice.message.content or "", tool_calls=calls, stop_reason=choice.finish_reason,
                    usage={**used.to_record(), "model": response.model or self.settings.model})
