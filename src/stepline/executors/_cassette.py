"""Record and replay executor calls (R-X6): a run's judgement, saved to a cassette, replayed without a model.

:func:`wrap_recording` wraps any executor in a :class:`RecordingExecutor`, which saves every request the runtime
made and every session call the executor made back — with its arguments and result, secrets redacted — to a
cassette file (JSON, or YAML when the name ends in ``.yaml``/``.yml``), rewritten after each request so a
crashed run still leaves one. :class:`ReplayExecutor` (``--executor replay``, option ``cassette``) makes the
same session calls again, in the same order, for the same requests: model answers come back through
``session.memo`` exactly as recorded (usage included), so a bug report becomes an offline, deterministic test.

Requests are matched by step id, request kind and invocation index (and, for a step that is retried, the
occurrence of that key). A request the cassette does not hold is an :class:`~stepline.errors.ExecutorError`
naming the step and the request.

:class:`ServingExecutor` (``stepline replay``) wraps a live executor instead: a model request whose text a
recorded run made is answered with that run's answer, any other goes to the model.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from stepline._yaml import YamlLoader, describe_yaml_error, yaml_errors
from stepline.errors import ExecutorError, ReaderError, SteplineError
from stepline.executors._base import Executor
from stepline.executors._protocol import StepRequest, StepSession, WriteMode
from stepline.formats import read_text

__all__ = ["RecordingExecutor", "ReplayExecutor", "ServingExecutor", "load_cassette", "memo_digest", "request_key",
           "wrap_recording"]

CASSETTE_VERSION = 1


def request_key(request: StepRequest) -> str:
    """``<step id>/<kind>/<invocation>``: what identifies a request within a run."""
    return f"{request.step_id}/{request.kind}/{int(request.hints.get('invocation', 0))}"


def _redact(value: Any) -> Any:
    from stepline.guardrails import redact_obj

    return redact_obj(value)


def _dump(path: Path, cassette: dict[str, Any]) -> None:
    from stepline.store import atomic_write_bytes

    if path.suffix.lower() in (".yaml", ".yml"):
        text = yaml.safe_dump(cassette, sort_keys=False, allow_unicode=True)
    else:
        text = json.dumps(cassette, indent=2, ensure_ascii=False, default=str) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode("utf-8"))


def load_cassette(path: Path) -> dict[str, Any]:
    """Read a cassette; a missing or malformed file is a :class:`ReaderError` naming it."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise ReaderError("cassette not found", path=str(path), hint="record one with the record option") from None
    try:
        data = yaml.load(text, Loader=YamlLoader)  # YAML is a superset of JSON: one parser for both
    except yaml_errors as exc:
        problem, line = describe_yaml_error(exc, text)
        raise ReaderError(f"cassette is not JSON/YAML: {problem}", path=str(path), line=line) from None
    if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
        raise ReaderError("a cassette is a mapping with an 'interactions' list", path=str(path))
    return data


# -- recording -----------------------------------------------------------------------------------------------
class _RecordingSession(StepSession):
    """Passes every call to the real session and notes it (arguments, result or error) in ``calls``."""

    def __init__(self, inner: StepSession, calls: list[dict[str, Any]]) -> None:
        self.inner = inner
        self.calls = calls

    async def _note(self, op: str, args: dict[str, Any], call: Awaitable[Any],
                    shown: Callable[[Any], Any] = lambda result: result) -> Any:
        entry: dict[str, Any] = {"op": op, "args": _redact(args)}
        self.calls.append(entry)
        try:
            result = await call
        except BaseException as exc:
            entry["error"] = _error(exc)
            raise
        entry["result"] = _redact(shown(result))
        return result

    async def read(self, path: str) -> str:
        """Read; the cassette keeps the text's hash, not the text (the file is read again on replay)."""
        result: str = await self._note("read", {"path": path}, self.inner.read(path),
                                       lambda text: {"sha256": hashlib.sha256(text.encode()).hexdigest()})
        return result

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        """Ask (the answer comes from the human channel on replay too)."""
        result: str = await self._note("ask", {"question": question, "choices": choices},
                                       self.inner.ask(question, choices))
        return result

    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: WriteMode = "append") -> str:
        """Write, noting the content."""
        result: str = await self._note("write_output", {"content": content, "path": path, "section": section,
                                                        "mode": mode},
                                       self.inner.write_output(content, path=path, section=section, mode=mode))
        return result

    async def set_var(self, name: str, value: Any) -> None:
        """Set a variable."""
        await self._note("set_var", {"name": name, "value": value}, self.inner.set_var(name, value))

    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool (it runs again on replay, through the pipeline)."""
        result: dict[str, Any] = await self._note("call_tool", {"name": name, "args": args or {}},
                                                  self.inner.call_tool(name, args))
        return result

    async def decide(self, value: bool, reason: str) -> None:
        """Decide."""
        await self._note("decide", {"value": value, "reason": reason}, self.inner.decide(value, reason))

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        """Finish."""
        await self._note("finish", {"choice": choice, "summary": summary}, self.inner.finish(choice, summary))

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Memo: the result (a model's answer and its usage) is what replay hands back."""
        result: dict[str, Any] = await self._note("memo", {"label": label, "payload": payload},
                                                  self.inner.memo(label, payload, compute))
        return result

    def output_log(self) -> Path | None:
        """The real session's: a recorded run is watched as any other."""
        return self.inner.output_log()


def _error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": _redact(str(exc)),
            "retryable": bool(getattr(exc, "retryable", False))}


class RecordingExecutor(Executor):
    """Wraps ``inner`` and records each request and the session calls it makes to the cassette at ``path``."""

    def __init__(self, inner: Executor, path: Path | str) -> None:
        self.inner = inner
        self.path = Path(path)
        # The run is recorded under the wrapped executor's name so a later resume rebuilds the same executor.
        self.name = inner.name  # type: ignore[misc]
        self.pure = inner.pure  # type: ignore[misc]
        self.speaks_for_user = inner.speaks_for_user  # type: ignore[misc]
        self.cassette: dict[str, Any] = {"version": CASSETTE_VERSION, "executor": inner.name, "interactions": []}

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Let the wrapped executor do the request; note everything, then rewrite the cassette."""
        calls: list[dict[str, Any]] = []
        interaction: dict[str, Any] = {"key": request_key(request), "request": _redact(request.to_dict()),
                                       "calls": calls}
        self.cassette["interactions"].append(interaction)
        try:
            await self.inner.perform(request, _RecordingSession(session, calls))
        except BaseException as exc:
            interaction["error"] = _error(exc)
            raise
        finally:
            _dump(self.path, self.cassette)

    async def aclose(self) -> None:
        """Close the wrapped executor."""
        await self.inner.aclose()


def wrap_recording(executor: Executor, path: Path | str) -> RecordingExecutor:
    """Record ``executor``'s requests and calls to the cassette at ``path`` (what ``--record FILE`` does)."""
    return RecordingExecutor(executor, path)


# -- replaying -----------------------------------------------------------------------------------------------
class ReplayExecutor(Executor):
    """Replays a cassette: the same session calls for the same requests, without the recorded executor."""

    name = "replay"
    pure = True

    def __init__(self, options: dict[str, Any]) -> None:
        cassette = options.get("cassette")
        if not cassette:
            raise ExecutorError("the replay executor needs a cassette", hint="pass the cassette option (a file "
                                "recorded with the record option)")
        self.path = Path(str(cassette))
        data = load_cassette(self.path)
        self.interactions: dict[str, list[dict[str, Any]]] = {}
        for interaction in data["interactions"]:
            self.interactions.setdefault(str(interaction.get("key")), []).append(interaction)
        self.seen: Counter[str] = Counter()

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Make the recorded calls through ``session``; re-raise the recorded failure, if the request failed."""
        key = request_key(request)
        occurrence = self.seen[key]
        recorded = self.interactions.get(key, [])
        if occurrence >= len(recorded):
            what = f"{request.kind} request #{int(request.hints.get('invocation', 0)) + 1}"
            if occurrence:
                what += f" (occurrence {occurrence + 1})"
            raise ExecutorError(f"cassette {self.path} has no {what} for step {request.step_id!r}",
                                hint="the workflow changed since the recording; record the run again")
        self.seen[key] += 1
        interaction = recorded[occurrence]
        for call in interaction.get("calls") or []:
            await _replay_call(session, call)
        error = interaction.get("error")
        if error:
            raise ExecutorError(f"(replayed) {error.get('message')}", retryable=bool(error.get("retryable")))


async def _replay_call(session: StepSession, call: dict[str, Any]) -> None:
    op, args, error = call["op"], dict(call.get("args") or {}), call.get("error")
    if op == "memo":
        async def compute() -> dict[str, Any]:
            if error:
                raise ExecutorError(f"(replayed) {error.get('message')}", retryable=bool(error.get("retryable")))
            result: dict[str, Any] = call["result"]
            return result

        await session.memo(str(args["label"]), dict(args.get("payload") or {}), compute)
        return
    try:
        if op == "read":
            await session.read(str(args["path"]))
        elif op == "ask":
            await session.ask(str(args["question"]), args.get("choices"))
        elif op == "write_output":
            await session.write_output(str(args["content"]), path=args.get("path"), section=args.get("section"),
                                       mode=args.get("mode") or "append")
        elif op == "set_var":
            await session.set_var(str(args["name"]), args.get("value"))
        elif op == "call_tool":
            await session.call_tool(str(args["name"]), dict(args.get("args") or {}))
        elif op == "decide":
            await session.decide(bool(args["value"]), str(args.get("reason") or ""))
        elif op == "finish":
            await session.finish(args.get("choice"), args.get("summary"))
        else:
            raise ExecutorError(f"cassette call {op!r} is not a protocol call", hint="the cassette is damaged")
    except SteplineError:
        # The recorded call failed the same way and the recorded executor went on; so does the replay.
        if not error:
            raise


# -- serving a recorded run's model answers ------------------------------------------------------------------
def memo_digest(step_id: str, label: str, payload: dict[str, Any]) -> tuple[str, str, str]:
    """What identifies a model request across runs: its step, its executor's label and the request's text."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return step_id, label, hashlib.sha256(text.encode("utf-8")).hexdigest()


class _ServingSession(_RecordingSession):
    """A session whose model requests (``memo``) are answered from a recorded run when their text is unchanged."""

    def __init__(self, inner: StepSession, owner: ServingExecutor, step_id: str) -> None:
        super().__init__(inner, [])
        self.owner = owner
        self.step_id = step_id

    async def _note(self, op: str, args: dict[str, Any], call: Awaitable[Any],
                    shown: Callable[[Any], Any] = lambda result: result) -> Any:
        return await call  # passed through, not noted: the run's own journal records every call

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """The recorded answer to the same request, else ``compute`` (refused with ``strict``)."""
        recorded = self.owner.recorded.get(memo_digest(self.step_id, label, payload))
        if recorded:
            answer = recorded.pop(0)
            self.owner.served.append(self.step_id)

            async def served() -> dict[str, Any]:
                return answer

            return await super().memo(label, payload, served)
        if self.owner.strict:
            self.owner.refused = (self.step_id, label, payload)
            raise ExecutorError(f"step {self.step_id!r}: its {label} request differs from the recorded run's "
                                "(--strict: not sent)", retryable=False,
                                hint="see the prompt diff below; replay without --strict to send it")
        result = await super().memo(label, payload, compute)
        self.owner.sent.append((self.step_id, result))
        return result


class ServingExecutor(Executor):
    """Wraps ``inner``: a model request whose text a recorded run made is answered with the recorded answer;
    any other goes to ``inner``'s model (or, ``strict``, stops the step). ``recorded`` maps
    :func:`memo_digest` to the recorded answers, in the order they were given."""

    def __init__(self, inner: Executor, recorded: dict[tuple[str, str, str], list[dict[str, Any]]], *,
                 strict: bool = False) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.pure = inner.pure  # type: ignore[misc]
        self.speaks_for_user = inner.speaks_for_user  # type: ignore[misc]
        self.recorded = {key: list(answers) for key, answers in recorded.items()}
        self.strict = strict
        self.served: list[str] = []  # the step of each request answered from the record
        self.sent: list[tuple[str, dict[str, Any]]] = []  # the step of each request sent to the model, its answer
        self.refused: tuple[str, str, dict[str, Any]] | None = None  # the request ``strict`` did not send

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Let ``inner`` do the request, its model requests served where the record has them."""
        await self.inner.perform(request, _ServingSession(session, self, request.step_id))

    async def aclose(self) -> None:
        """Close the wrapped executor."""
        await self.inner.aclose()
