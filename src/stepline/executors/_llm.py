"""The loop shared by the model-API executors: prompt, protocol tools, turns, usage, error translation.

One request is a short conversation: the system and user messages describe the current step only; the step
protocol is offered as function-calling tools; each model turn's tool calls run through the
:class:`StepSession` and their results go back as messages, until the model calls ``finish`` (or ``decide``)
or ``max_turns`` is reached. Every model request goes through ``session.memo`` so a resumed step replays the
journaled turn instead of paying for (and possibly getting a different) second answer. The journal keeps a
digest of each request and the parsed turn with its usage — never the API key.

Providers subclass :class:`LLMExecutor` and implement the wire format: building and extending the message
list, and sending one request (translating their SDK's errors with :func:`status_error` /
:func:`transport_error` at that one place).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from stepline.errors import ExecutorError, NotFoundError, OutsideRootError, StepFailed, ToolError, UsageError
from stepline.executors._base import Executor
from stepline.executors._protocol import (
    NOTES_HEADING,
    REPEATED_HINT,
    STANDING_HINT,
    StepRequest,
    StepSession,
    WriteMode,
    choice_fits,
)
from stepline.executors._reliability import Backoff, CircuitBreaker, Reliability
from stepline.executors._usage import Price, PriceTable, Usage

__all__ = [
    "LLMExecutor",
    "LLMSettings",
    "ToolCall",
    "ToolResult",
    "Turn",
    "build_prompt",
    "protocol_tools",
    "status_error",
    "transport_error",
]

#: Tool results longer than this are cut (a whole file read back into the conversation costs tokens each turn).
MAX_RESULT_CHARS = 100_000
#: What the engine writes in place of a masked option (``api_key``) when it stores a run's options.
_MASKED = "***"


# -- settings ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LLMSettings:
    """One provider's options, from the executor options (``executors.<name>`` in the runtime config) or env."""

    provider: str
    model: str
    api_key: str = field(repr=False)
    base_url: str | None = None
    max_turns: int = 12
    timeout_seconds: float = 60.0
    max_tokens: int | None = None
    temperature: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    breaker_threshold: int = 5
    breaker_reset_seconds: float = 30.0
    #: Prices (USD per million tokens) to journal each call's cost with; none: it is weighed when read.
    prices: PriceTable = field(default_factory=PriceTable)

    @classmethod
    def from_options(cls, provider: str, options: dict[str, Any], env_prefix: str, *,
                     default_max_tokens: int | None = None) -> LLMSettings:
        """Read options, falling back to ``<PREFIX>_BASE_URL``, ``<PREFIX>_API_KEY`` and ``STEPLINE_<PREFIX>_MODEL``."""

        def opt(name: str) -> Any:
            value = options.get(name)
            return None if value in (None, "", _MASKED) else value

        model = opt("model") or os.environ.get(f"STEPLINE_{env_prefix}_MODEL")
        if not model:
            raise ExecutorError(f"the {provider} executor needs a model",
                                hint=f"set executors.{provider}.model in config/runtime.yaml or "
                                     f"STEPLINE_{env_prefix}_MODEL")
        base_url = opt("base_url") or os.environ.get(f"{env_prefix}_BASE_URL") or None
        api_key = opt("api_key") or os.environ.get(f"{env_prefix}_API_KEY")
        if not api_key:
            if base_url is None:
                raise ExecutorError(f"the {provider} executor needs an API key",
                                    hint=f"set {env_prefix}_API_KEY (or base_url for a local server)")
            api_key = "unused"  # local OpenAI-compatible servers (Ollama, vLLM) ignore it, the SDK requires one
        try:
            return cls(
                provider=provider, model=str(model), api_key=str(api_key), base_url=base_url,
                max_turns=int(opt("max_turns") or 12),
                timeout_seconds=float(opt("timeout_seconds") or 60.0),
                max_tokens=int(opt("max_tokens") or 0) or default_max_tokens,
                temperature=None if opt("temperature") is None else float(opt("temperature")),
                backoff=Backoff(retries=int(opt("retries") if opt("retries") is not None else 3),
                                base_seconds=float(opt("backoff_seconds") or 0.5),
                                max_seconds=float(opt("max_backoff_seconds") or 8.0)),
                breaker_threshold=int(opt("breaker_threshold") or 5),
                breaker_reset_seconds=float(opt("breaker_reset_seconds") or 30.0),
                prices=PriceTable({str(k): Price.from_dict(dict(v)) for k, v in dict(opt("prices") or {}).items()}),
            )
        except (TypeError, ValueError) as exc:
            raise ExecutorError(f"bad option for the {provider} executor: {exc}",
                                hint="see examples/runtime.yaml, section executors") from None


# -- errors: the one translation of a provider failure ---------------------------------------------------
def status_error(provider: str, status: int, message: str) -> ExecutorError:
    """An HTTP error answer: 429 and 5xx may pass and are retryable; anything else is the request's fault."""
    retryable = status == 429 or status >= 500
    hint = None
    if status in (401, 403):
        hint = "check the API key"
    elif status == 404:
        hint = "check base_url and model"
    return ExecutorError(f"{provider}: HTTP {status}: {message}", retryable=retryable, hint=hint)


def transport_error(provider: str, message: str, *, timeout: float | None = None) -> ExecutorError:
    """No answer (timeout, refused or dropped connection): retryable."""
    if timeout is not None:
        return ExecutorError(f"{provider}: no answer within {timeout:g}s", retryable=True,
                             hint="raise timeout_seconds if the model is slow")
    return ExecutorError(f"{provider}: connection failed: {message}", retryable=True, hint="check base_url")


@contextmanager
def sdk_errors(provider: str, timeout: float, sdk: Any, base: type[Exception]) -> Iterator[None]:
    """The one place an official SDK's errors become :class:`ExecutorError` (retryable or not).

    The openai and anthropic SDKs name their errors alike (``APIStatusError``, ``APITimeoutError``,
    ``APIConnectionError``); ``sdk`` is the imported module and ``base`` its root error class.
    """
    try:
        yield
    except sdk.APIStatusError as exc:
        raise status_error(provider, exc.status_code, _server_message(exc)) from exc
    except sdk.APITimeoutError as exc:
        raise transport_error(provider, str(exc), timeout=timeout) from exc
    except sdk.APIConnectionError as exc:
        raise transport_error(provider, str(exc)) from exc
    except base as exc:
        raise ExecutorError(f"{provider}: {exc}") from exc


def _server_message(exc: Any) -> str:
    """The server's error message (``{"error": {"message": …}}``, Anthropic's inside an envelope), else the SDK's."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc.message)


# -- the turn record ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class ToolCall:
    """One function call the model made; ``arguments`` is the JSON text it sent."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ToolResult:
    """What a tool call produced, sent back to the model."""

    call_id: str
    content: str
    is_error: bool = False


@dataclass(slots=True)
class Turn:
    """One model answer, provider-neutral: what the journal keeps for each model request."""

    text: str
    tool_calls: list[ToolCall]
    stop_reason: str | None
    usage: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (the memo result)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Turn:
        """Rebuild from a memo result."""
        return cls(text=str(raw.get("text") or ""), tool_calls=[ToolCall(**c) for c in raw.get("tool_calls") or []],
                   stop_reason=raw.get("stop_reason"), usage=dict(raw.get("usage") or {}))


# -- the protocol as tools ---------------------------------------------------------------------------------
def protocol_tools() -> list[dict[str, Any]]:
    """The step protocol as tool definitions (name, description, JSON-schema parameters).

    The same for every request of a run, byte for byte: tools come first in what a provider caches, so one
    request's tools that differed from another's (an enum of this step's menu keys, say) would make every
    request's prefix its own. A ``decide`` request ends with ``decide``, any other with ``finish``; the menu or
    the choices a ``finish`` may name are in the request's text and checked when it is called.
    """
    return list(_PROTOCOL_TOOLS)


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}


_PROTOCOL_TOOLS: tuple[dict[str, Any], ...] = (
    _tool("read", "Read a project file (path relative to the project root).",
          {"path": {"type": "string"}}, ["path"]),
    _tool("ask", "Ask the user a question; returns the answer.",
          {"question": {"type": "string"}, "choices": {"type": "array", "items": {"type": "string"}}},
          ["question"]),
    _tool("write_output", "Write content to the step's output file (or `path`). `section` fills that template "
                          "section; mode is append (default), replace or section. Returns the path written.",
          {"content": {"type": "string"}, "path": {"type": "string"}, "section": {"type": "string"},
           "mode": {"type": "string", "enum": ["append", "replace", "section"]}}, ["content"]),
    _tool("set_var", "Set a run variable that later steps can use.",
          {"name": {"type": "string"}, "value": {"description": "any JSON value"}}, ["name", "value"]),
    _tool("call_tool", "Call a runtime tool (getCurrentTime, file and repo tools, …) with its arguments.",
          {"name": {"type": "string"}, "args": {"type": "object"}}, ["name"]),
    _tool("decide", "Answer a decide request's condition: value true if it holds, and why. Ends that request.",
          {"value": {"type": "boolean"}, "reason": {"type": "string"}}, ["value", "reason"]),
    _tool("finish", "End any other request: the menu choice (or your answer, for a question) and a short summary "
                    "of what you did.",
          {"choice": {"type": "string"}, "summary": {"type": "string"}}, []),
)


# -- the prompt --------------------------------------------------------------------------------------------
_SYSTEM = """You do one step of a workflow run by stepline. The runtime owns the order of steps, files, \
variables, menus and state: do only the current step, and act only through the tools — text you write outside \
a tool call is not kept. End a decide request by calling `decide`, any other request by calling `finish`, \
exactly once, after your other tool calls; make them all in one reply when you can. Paths are relative to the \
project root, where commands run. {mode}"""

#: How a request's user message reads, said once in the system text (the same for every request of every run)
#: rather than in each request: its parts, what each asks of the model, and what the runtime does instead.
_GUIDE = """A request's user message: `# Step <id>: <title>`, what it asks, then the parts that apply:
- `## Step instructions`: the step's text, without what the runtime does itself (presenting its menu, loading the \
next step file, updating the frontmatter and stepsCompleted): do not do those. Under it, `## This request`: the \
runtime's notes to this one request (where this turn of the step stops, the person's answers so far, what the \
runtime does after it); the step's other requests send the same text before different notes.
- `## Condition` / `## Question`: what a decide / answer request asks.
- `## Choices`: the only values `finish`'s `choice` may take (your own text in place of a `<…>` in one).
- `## Menu`: in a work request, the step's menu, which the runtime presents after it: do the work up to the menu, \
do not present it, and put the option you would pick in `choice` (in #yolo it is the answer; otherwise the person \
answers). In a choose request: the options, by key.
- `## Output`: where `write_output` writes without `path`.
- `## Variables`: the run's variables the step names, then the names of the others set. `## Context`: facts for \
this step.
A subagent request (`"fresh_context": true` in its context) works only from its own instructions, not from the \
workflow's standing instructions."""

_KIND = {
    "work": "Do the step's work described below.",
    "generate": "Generate the content of template section `{section}` and write it with write_output.",
    "decide": "Decide whether the condition below holds.",
    "answer": "Answer the question below as an expert user of this workflow would.",
    "choose": "Pick one option of the menu below.",
}


def build_prompt(request: StepRequest) -> tuple[str, str]:
    """The system and user messages for ``request``: the current step only, secrets redacted.

    The system message is what every request of the run shares byte for byte, so that a provider caches it once
    and reads it after (with the tools, which precede it): the protocol, the run mode, the workflow's name and the
    run's standing instructions a driver hands over as ``hints["standing"]`` — workflow-level text that is the same
    for the whole run (a skill's standing rules, a workflow's goal and role), sent once here instead of restated in
    each step. A request that must not see them (a subagent's fresh context) has none, and shares the part before.
    The user message is the step's own part.
    """
    from stepline.guardrails import redact, redact_obj

    mode = ("Run mode #yolo: do not wait for confirmations; where a question needs an answer, answer it yourself "
            "as an expert user would." if request.mode == "yolo" else "")
    shared = [_SYSTEM.format(mode=mode).strip(), _GUIDE, f"Workflow: {request.workflow_id or '-'}."]
    standing = str(request.hints.get(STANDING_HINT) or "").strip()
    if standing:
        shared.append("## Standing instructions of this workflow (for every step)\n" + standing)
    root = str(request.context.get("project_root") or "")
    system = redact(project_relative("\n\n".join(shared), root))
    # the step as the workflow names it, not the runtime's visit (``step-01@2``): a step visited again sends its
    # text under the same header, which a provider then serves from its cache
    parts = [f"# Step {request.step_id.split('@', 1)[0]}: {request.title}",
             _KIND[request.kind].format(section=request.section)
             + (f"\nAttempt {request.attempt}." if request.attempt > 1 else "")]
    if standing and request.context.get("fresh_context"):  # a subagent: the shared prefix is not its context
        parts[1] += "\nA subagent with a fresh context: work only from the instructions below."
    if request.content:
        parts.append("## Step instructions\n" + request.content)
    if request.condition:
        parts.append("## Condition\n" + request.condition)
    if request.question:
        parts.append("## Question\n" + request.question)
    if request.choices:
        parts.append("## Choices\n" + "\n".join(f"- {c}" for c in request.choices))
    if request.menu:
        parts.append("## Menu\n" + "\n".join(f"[{o.key}] {o.label}" + (" (default)" if o.default else "")
                                             for o in request.menu))
    outputs = request.hints.get("outputs")
    if outputs:
        parts.append("## Output\n" + str(outputs[0]))
    configured = _configured(project_relative(standing, root))
    variables = _variables(request, set(configured)) if request.variables else ""
    if variables:
        parts.append(variables)
    context = {key: value for key, value in request.context.items()  # what the text above does not say
               if value not in (None, "", [], {}) and key != "project_root" and not (key == "output" and outputs)
               and configured.get(key.replace("_", "-"), configured.get(key)) != _shown(value, root)}
    if context:
        parts.append("## Context\n" + _compact(redact_obj(context)))
    if request.telis_context:  # TELIS (R-C1): shards and a language server's answer, resolved for this step
        from stepline.context import render_context

        parts.append("## Context (TELIS)\n" + render_context(request.telis_context))
    return system, redact(project_relative("\n\n".join(parts), root))


def repeated_prefix(request: StepRequest, user: str) -> int:
    """How much of the user message ``user`` another request of the step sends again, byte for byte: up to the
    runtime's notes to this request, when the driver says the step's text is sent again (0: nothing is)."""
    if not request.hints.get(REPEATED_HINT):
        return 0
    found = user.find(f"\n\n{NOTES_HEADING}\n")
    return max(found, 0)


def project_relative(text: str, root: str) -> str:
    """``text`` with the paths under the project ``root`` written relative to it: every tool takes
    them so (``read``, ``write_output``, ``runScript``) and commands run there, so the absolute prefix, the same in
    every path, tells the model nothing. The root itself reads ``.``; a sibling (``<root>-old``) is left alone."""
    if not root or root.rstrip("/") == "":
        return text
    prefix = r"(?<![\w./~-])" + re.escape(root.rstrip("/"))  # the root where a path starts, not inside another
    return re.sub(prefix + r"(?![\w.-])", ".", re.sub(prefix + "/+", "", text))


def _configured(standing: str) -> dict[str, str]:
    """The names and values the standing text's configuration lists (``- name: value`` under ``## Configuration``,
    as :func:`~stepline.executors.standing_text` writes it)."""
    return dict(re.findall(r"(?m)^- ([^\s:]+): (.*)$", standing.partition("## Configuration\n")[2]))


def _shown(value: Any, root: str) -> str:
    """A context value as the standing configuration would show it (a path under the project root relative to
    it), so that an entry the configuration already shows is not repeated in every request's context."""
    return project_relative(str(value).lower() if isinstance(value, bool) else str(value), root)


def _variables(request: StepRequest, configured: set[str] | frozenset[str] = frozenset()) -> str:
    """The run's variables the step refers to (by name, in its text), and only the names of the others: a step
    rarely needs more, and every request carrying all of them is the largest repeated part of a run's prompts.
    Those the run's standing configuration already shows (``configured``) are not named again."""
    text = "\n".join(filter(None, (request.content, request.question, request.condition, request.title)))
    used = {name: value for name, value in request.variables.items() if name and _names(text, name)}
    others = sorted(name for name in request.variables if name not in used and name not in configured)
    from stepline.guardrails import redact_obj

    lines = ["## Variables", *([_compact(redact_obj(used))] if used else [])]
    if others:
        lines.append("Others set: " + ", ".join(others))
    return "\n".join(lines) if len(lines) > 1 else ""


_PLAIN_WORD = re.compile(r"[A-Za-z]+")


def _names(text: str, name: str) -> bool:
    """Whether ``text`` refers to the variable ``name``: as a placeholder (``{name}``, ``{{name}}``) or in code
    (`` `name` ``); a name that is no plain word (``user_name``, ``skill-root``) also where it stands as a word. A
    plain word (``name``, ``description``) standing in prose is the word, not the variable."""
    if f"{{{name}}}" in text or f"`{name}`" in text:
        return True
    if _PLAIN_WORD.fullmatch(name):
        return False
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def _compact(value: Any) -> str:
    """JSON on one line, for the prompt (indentation is a tenth of the text and tells a model nothing)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


# -- the executor ------------------------------------------------------------------------------------------
class LLMExecutor(Executor):
    """Drives a model API through the step protocol; providers implement the wire format.

    Args:
        options: see :class:`LLMSettings` (``model``, ``base_url``, ``api_key``, ``max_turns``,
            ``timeout_seconds``, ``retries``, ``backoff_seconds``, ``breaker_threshold``, ``prices``, …).
        clock: monotonic seconds, for latency and the breaker (tests pass a fake).
        sleep: waits between retries (tests pass a fake).
        rng: jitter source.
    """

    env_prefix: ClassVar[str] = ""
    default_max_tokens: ClassVar[int | None] = None

    def __init__(self, options: dict[str, Any], *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[Any]] | None = None, rng: random.Random | None = None) -> None:
        self.settings = LLMSettings.from_options(self.name, options, self.env_prefix,
                                                 default_max_tokens=self.default_max_tokens)
        self.clock = clock
        breaker = CircuitBreaker(self.name, failure_threshold=self.settings.breaker_threshold,
                                 reset_seconds=self.settings.breaker_reset_seconds, clock=clock)
        kwargs: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
        self.reliability = Reliability(self.name, backoff=self.settings.backoff, breaker=breaker, rng=rng, **kwargs)

    # -- what a provider implements -------------------------------------------------------------------------
    @abstractmethod
    def client(self) -> Any:
        """The SDK client, built (and the SDK imported) on first use — before any latency is measured."""

    @abstractmethod
    def start_messages(self, user: str, repeated: int = 0) -> list[dict[str, Any]]:
        """The conversation's first messages (the system prompt is passed to :meth:`send` separately).
        ``repeated``: how many leading characters of ``user`` another request of the step sends again (0: none),
        for a provider that caches at explicit breakpoints (see :func:`repeated_prefix`)."""

    @abstractmethod
    def add_turn(self, messages: list[dict[str, Any]], turn: Turn) -> None:
        """Append the model's own answer to the conversation."""

    @abstractmethod
    def add_results(self, messages: list[dict[str, Any]], results: list[ToolResult]) -> None:
        """Append the tool results of the last turn."""

    @abstractmethod
    def add_user_text(self, messages: list[dict[str, Any]], text: str) -> None:
        """Append a plain user message (a reminder to use the tools)."""

    @abstractmethod
    async def send(self, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                   cache_key: str | None = None) -> Turn:
        """Send one request; return the turn with ``usage`` (:meth:`Usage.to_record` of what the provider reports:
        this method is the provider's usage normalizer) and ``model`` filled in. ``cache_key`` names the run, for a
        provider that routes a run's requests to the same prefix cache by it.

        Errors are raised as :class:`ExecutorError` (via :func:`status_error` / :func:`transport_error`).
        """

    @abstractmethod
    def translated(self) -> AbstractContextManager[None]:
        """The provider's one boundary where SDK errors become :class:`ExecutorError` (retryable or not)."""

    _client: Any = None

    async def aclose(self) -> None:
        """Close the SDK's HTTP connection pool."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def list_models(self) -> list[str]:
        """Ids of the models the endpoint offers: the cheap request ``stepline providers --check`` sends."""
        with self.translated():
            page = await self.client().models.list()
        return [model.id async for model in page]

    async def check(self) -> dict[str, Any]:
        """Ask the endpoint for its models once (no retries); a failure is raised as :class:`ExecutorError`."""
        self.client()
        started = self.clock()
        try:
            models = await self.list_models()
        finally:
            await self.aclose()
        return {"base_url": self.settings.base_url or "(SDK default)", "model": self.settings.model,
                "models": len(models), "model_listed": self.settings.model in models,
                "latency_ms": round((self.clock() - started) * 1000, 1)}

    # -- the loop -------------------------------------------------------------------------------------------
    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Converse with the model until it ends the request through ``finish`` or ``decide``."""
        system, user = build_prompt(request)
        tools = protocol_tools()
        messages = self.start_messages(user, repeated_prefix(request, user))
        ending = "decide" if request.kind == "decide" else "finish"
        refusals = _Refusals(ending)
        for number in range(1, self.settings.max_turns + 1):
            turn = await self._model_turn(session, system, messages, tools, number, cache_key=request.run_id)
            self.add_turn(messages, turn)
            if not turn.tool_calls:
                self.add_user_text(messages, f"Use the tools: do the step through them and call `{ending}` "
                                             "to end the request.")
                continue
            results: list[ToolResult] = []
            for call in turn.tool_calls:
                result = await self._dispatch(request, session, call)
                if call.name == ending and not result.is_error:
                    return
                refusals.note(call.name, result)
                results.append(result)
            self.add_results(messages, results)
        raise ExecutorError(f"{self.name}: step {request.step_id!r} ({request.kind} request) did not call "
                            f"{ending} within {self.settings.max_turns} model turns: {refusals.cause()}",
                            retryable=False, hint=refusals.hint(self.name))

    async def _model_turn(self, session: StepSession, system: str, messages: list[dict[str, Any]],
                          tools: list[dict[str, Any]], number: int, cache_key: str) -> Turn:
        digest = hashlib.sha256(_json([system, messages, tools]).encode("utf-8")).hexdigest()
        # The request as sent (secrets are redacted by the journal), so `stepline show RUN --prompt STEP` prints it;
        # the tools are the run's one set: named, with their digest.
        prompt = {"system": system, "messages": messages, "tools": [tool["name"] for tool in tools],
                  "tools_sha256": hashlib.sha256(_json(tools).encode("utf-8")).hexdigest()}
        payload = {"model": self.settings.model, "turn": number, "messages": len(messages), "sha256": digest,
                   "prompt": prompt}

        async def compute() -> dict[str, Any]:
            self.client()
            started = self.clock()
            turn = await self.reliability.call(lambda: self.send(system, messages, tools, cache_key=cache_key))
            model = str(turn.usage.get("model") or self.settings.model)
            used = self.settings.prices.priced(Usage.from_record(turn.usage), model)
            turn.usage = {**used.to_record(), "model": model, "latency_ms": round((self.clock() - started) * 1000, 1)}
            return turn.to_dict()

        return Turn.from_dict(await session.memo(self.name, payload, compute))

    async def _dispatch(self, request: StepRequest, session: StepSession, call: ToolCall) -> ToolResult:
        """Run one tool call through the session; a bad call is reported back to the model, not raised."""
        try:
            args = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return ToolResult(call.id, f"error: arguments are not JSON ({exc.msg})", is_error=True)
        if not isinstance(args, dict):
            return ToolResult(call.id, "error: arguments must be a JSON object", is_error=True)
        try:
            content = await self._run_call(request, session, call.name, args)
        except _BadCall as exc:
            return ToolResult(call.id, f"error: {exc}", is_error=True)
        except (UsageError, NotFoundError, OutsideRootError, ToolError, StepFailed) as exc:
            return ToolResult(call.id, f"error: {exc.format_message()}", is_error=True)
        if len(content) > MAX_RESULT_CHARS:
            content = content[:MAX_RESULT_CHARS] + f"\n[cut at {MAX_RESULT_CHARS} characters]"
        return ToolResult(call.id, content)

    async def _run_call(self, request: StepRequest, session: StepSession, name: str, args: dict[str, Any]) -> str:
        offered = {tool["name"]: tool["parameters"] for tool in _PROTOCOL_TOOLS}
        schema = offered.get(name)
        if schema is None:
            raise _BadCall(f"no tool {name!r} here; use one of {', '.join(offered)}")
        ending = "decide" if request.kind == "decide" else "finish"
        if name in ("decide", "finish") and name != ending:
            raise _BadCall(f"this {request.kind} request ends with `{ending}`, not `{name}`")
        missing = [key for key in schema["required"] if key not in args]
        if missing:
            raise _BadCall(f"{name} needs {', '.join(missing)}")
        if name == "read":
            return await session.read(_text(args, "path"))
        if name == "ask":
            choices = args.get("choices")
            return await session.ask(_text(args, "question"), [str(c) for c in choices] if choices else None)
        if name == "write_output":
            path, section = _opt_text(args, "path"), _opt_text(args, "section")
            mode = _MODES.get(str(args.get("mode") or ("section" if section else "append")))
            if mode is None:
                raise _BadCall(f"mode must be append, replace or section, not {args['mode']!r}")
            if request.kind == "generate" and path is None and section is None:
                section, mode = request.section, "section"
            written = await session.write_output(_text(args, "content"), path=path, section=section, mode=mode)
            return json.dumps({"path": written})
        if name == "set_var":
            await session.set_var(_text(args, "name"), args["value"])
            return "ok"
        if name == "call_tool":
            tool_args = args.get("args") or {}
            if not isinstance(tool_args, dict):
                raise _BadCall("args must be an object")
            return _json(await session.call_tool(_text(args, "name"), tool_args))
        if name == "decide":
            if not isinstance(args["value"], bool):
                raise _BadCall("value must be true or false")
            await session.decide(args["value"], _text(args, "reason"))
            return "ok"
        choice = _opt_text(args, "choice")
        allowed = [option.key for option in request.menu] or list(request.choices or [])
        if allowed and (choice is None or not choice_fits(choice, allowed)):
            raise _BadCall(f"choice must be one of {', '.join(allowed)}")
        if choice is None and request.kind in ("choose", "answer"):
            raise _BadCall("finish needs choice: the menu key, or your answer")
        await session.finish(choice, _opt_text(args, "summary"))
        return "ok"


_MODES: dict[str, WriteMode] = {"append": "append", "replace": "replace", "section": "section"}


@dataclass(slots=True)
class _Refusals:
    """Why a conversation never ended: how often the model called the ending tool and was refused, and the
    last refusal (of that tool, else of any call), so the failure names the real cause, not only the limit."""

    ending: str
    ending_refused: int = 0
    last_ending: str = ""
    last_other: str = ""

    def note(self, name: str, result: ToolResult) -> None:
        """Count ``result`` of a call to ``name`` if it was refused."""
        if not result.is_error:
            return
        reason = result.content.removeprefix("error: ")
        if name == self.ending:
            self.ending_refused += 1
            self.last_ending = reason
        else:
            self.last_other = f"`{name}`: {reason}"

    def cause(self) -> str:
        """The cause, in a clause: the last refusal of the ending call, else of any call."""
        if self.ending_refused:
            times = "once" if self.ending_refused == 1 else f"{self.ending_refused} times"
            return f"it called `{self.ending}` {times} and was refused, last: {self.last_ending}"
        if self.last_other:
            return f"it never called `{self.ending}`; the last refused call was {self.last_other}"
        return f"it never called `{self.ending}`"

    def hint(self, provider: str) -> str:
        """The fix: the step's choices when the ending call was refused, else more turns or clearer text."""
        if self.ending_refused:
            return ("the model's answer does not fit the step (see the refusal): make the step's menu or choices "
                    "clearer, or look at the conversation with `stepline show RUN --prompt STEP`")
        return f"raise executors.{provider}.max_turns or make the step's instructions clearer"


class _BadCall(Exception):
    """A tool call the model got wrong; its message goes back to the model."""


def _text(args: dict[str, Any], key: str) -> str:
    value = args[key]
    if not isinstance(value, str):
        raise _BadCall(f"{key} must be a string")
    return value


def _opt_text(args: dict[str, Any], key: str) -> str | None:
    return None if args.get(key) is None else _text(args, key)
