"""Executors the Ray backend's tests send to the cluster (pickled by value: workers need not import this file).

Each does its work through the step protocol, so its effects are the coordinator's; ``trace`` is the one
thing it writes itself, straight to the shared filesystem: a line per time the work *started* on a worker, which
is how a test tells that a killed task really was dispatched again.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from stepline.executors import Executor, StepRequest, StepSession


class FileAgent(Executor):
    """Reads the step's brief, appends a line per step to a shared log and writes the step's own file, waits
    ``delay`` seconds (a model's latency) and finishes; ``memo`` stands for a model call."""

    name = "file-agent"

    def __init__(self, trace: str | None = None, delay: float = 0.0) -> None:
        self.trace = trace
        self.delay = delay

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Do the step's work through the protocol."""
        if self.trace:
            with open(self.trace, "a", encoding="utf-8") as handle:
                handle.write(f"{request.step_id} {os.getpid()}\n")
        await session.read("brief.md")
        answer = await session.memo("model", {"step": request.step_id},
                                    lambda: _model(request.step_id))
        await session.write_output(f"{request.step_id} {answer['text']}\n", path="out/all.log", mode="append")
        if self.delay:
            await asyncio.sleep(self.delay)
        name = request.step_id.replace("/", "_")
        await session.write_output(f"{request.step_id} done\n", path=f"out/{name}.txt", mode="append")
        await session.finish(summary=f"did {request.step_id}")


async def _model(step_id: str) -> dict[str, str]:
    return {"text": f"answer-for-{step_id}"}


class Sleeper(Executor):
    """Sleeps ``seconds`` on the worker; marks in ``marks`` that it started, and whether it was cancelled there or
    ran to its end."""

    name = "sleeper"

    def __init__(self, marks: str, seconds: float) -> None:
        self.marks = marks
        self.seconds = seconds

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Sleep, then finish; a cancel on the cluster is written down as it happens."""
        marks = Path(self.marks)
        (marks / f"{request.step_id}.started").write_text(str(os.getpid()), encoding="utf-8")
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            (marks / f"{request.step_id}.cancelled").write_text(str(os.getpid()), encoding="utf-8")
            raise
        (marks / f"{request.step_id}.finished").write_text(str(os.getpid()), encoding="utf-8")
        await session.finish(summary="slept")

