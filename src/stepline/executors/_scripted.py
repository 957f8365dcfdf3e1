"""The ``scripted`` executor: replays a YAML script of protocol calls per step (offline, deterministic runs).

Script format::

    default: dry-run            # requests the script does not cover: "dry-run" (placeholder) or "error"
    steps:
      step-01:                  # the calls for the step's one request …
        - write_output: {content: "Hello\\n", path: out.md}
        - set_var: {name: greeting, value: hello}
        - finish: {choice: C, summary: wrote the greeting}
      step-02:
        turns:                  # … or one list of calls per request, in the order the runtime makes them
          - [{decide: {value: true, reason: the file exists}}]
          - [{write_output: {content: "Overview\\n", section: overview}}, {finish: {}}]

A call is a one-key mapping from a protocol method to its keyword arguments. A turn that does not end with
``finish`` or ``decide`` is finished for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepline._yaml import load_yaml_text
from stepline.errors import ExecutorError, ReaderError
from stepline.executors._base import Executor
from stepline.executors._dryrun import DryRunExecutor
from stepline.executors._protocol import StepRequest, StepSession
from stepline.formats import read_text

__all__ = ["ScriptedExecutor", "load_script"]

_METHODS = ("read", "ask", "write_output", "set_var", "call_tool", "decide", "finish")


def load_script(path: Path) -> dict[str, Any]:
    """Read and check a script file; problems are :class:`ReaderError` with file:line."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise ReaderError("script file not found", path=str(path), hint="pass an existing --script FILE") from None
    data = load_yaml_text(text, path=str(path)) or {}
    if not isinstance(data, dict) or not isinstance(data.get("steps", {}), dict):
        raise ReaderError("a script is a mapping with a 'steps' mapping of step id -> calls", path=str(path))
    for step_id, entry in (data.get("steps") or {}).items():
        for turn in _turns(entry):
            for call in turn:
                if not (isinstance(call, dict) and len(call) == 1 and next(iter(call)) in _METHODS):
                    raise ReaderError(f"step {step_id!r}: {call!r} is not a call; use one of {', '.join(_METHODS)}",
                                      path=str(path))
    return data


def _turns(entry: Any) -> list[list[dict[str, Any]]]:
    if isinstance(entry, dict) and "turns" in entry:
        return [list(turn) for turn in entry["turns"]]
    return [list(entry or [])]


class ScriptedExecutor(Executor):
    """Plays the calls a script lists for each step; the request's ``invocation`` hint picks the turn."""

    name = "scripted"
    pure = True

    def __init__(self, options: dict[str, Any]) -> None:
        script = options.get("script")
        if isinstance(script, dict):
            self.script = script
        elif script:
            self.script = load_script(Path(str(script)))
        else:
            raise ExecutorError("the scripted executor needs a script", hint="pass --script FILE")
        self.fallback = DryRunExecutor({"placeholder_evidence": False})  # a script proves real evidence

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Play this request's turn of the script, or fall back as the script's ``default`` says."""
        entry = (self.script.get("steps") or {}).get(request.step_id)
        turns = _turns(entry) if entry is not None else []
        index = int(request.hints.get("invocation", 0))
        if index >= len(turns):
            if self.script.get("default", "dry-run") == "error":
                raise ExecutorError(f"the script has no turn {index + 1} for step {request.step_id!r} "
                                    f"({request.kind} request)", hint="add it to the script")
            await self.fallback.perform(request, session)
            return
        ended = False
        for call in turns[index]:
            method, args = next(iter(call.items()))
            args = dict(args or {})
            if method == "read":
                await session.read(str(args["path"]))
            elif method == "ask":
                await session.ask(str(args["question"]), args.get("choices"))
            elif method == "write_output":
                await session.write_output(str(args.pop("content")), **args)
            elif method == "set_var":
                await session.set_var(str(args["name"]), args.get("value"))
            elif method == "call_tool":
                await session.call_tool(str(args["name"]), dict(args.get("args") or {}))
            elif method == "decide":
                await session.decide(bool(args["value"]), str(args.get("reason", "scripted")))
                ended = True
            else:
                await session.finish(args.get("choice"), args.get("summary"))
                ended = True
        if not ended:
            await session.finish()
