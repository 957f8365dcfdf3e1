"""An in-memory :class:`StepSession` for executor tests: it records every call, plays a dict as the journal of
memoised results, and keeps the agent processes an executor journals (as the engine's session does, the one
journaled before is handed back)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from stepline.executors import StepSession


class RecordingSession(StepSession):
    """An in-memory session: records every call; ``memos`` plays the journal of memoised results."""

    def __init__(self, memos: dict[str, dict[str, Any]] | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.memos = {} if memos is None else memos
        self.processes: list[dict[str, Any]] = []
        #: What calls that ended without a result used, by label (:meth:`StepSession.record_usage`).
        self.usages: list[tuple[str, dict[str, Any]]] = []

    async def read(self, path: str) -> str:
        self.calls.append(("read", path))
        return ""

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        self.calls.append(("ask", question))
        return "yes"

    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: Any = "append") -> str:
        self.calls.append(("write_output", content))
        return path or "out.md"

    async def set_var(self, name: str, value: Any) -> None:
        self.calls.append(("set_var", name, value))

    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append(("call_tool", name))
        return {}

    async def decide(self, value: bool, reason: str) -> None:
        self.calls.append(("decide", value, reason))

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        self.calls.append(("finish", choice, summary))

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        if label not in self.memos:
            self.memos[label] = await compute()
        return self.memos[label]

    async def agent_process(self, process: dict[str, Any]) -> dict[str, Any] | None:
        self.processes.append(process)
        return self.processes[-2] if len(self.processes) > 1 else None


    async def record_usage(self, label: str, usage: dict[str, Any]) -> None:
        self.usages.append((label, usage))
