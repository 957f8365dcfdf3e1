"""The engine's side of a lost worker, without Ray: an attempt that fails with an error that ``replays_calls``
(what :class:`~stepline.distributed.WorkerLost` is) is retried by the step's policy, and the retry replays the
calls the lost attempt journaled — also when the retry itself is interrupted and the run resumed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from stepline import Engine
from stepline.distributed import WorkerLost
from stepline.engine import RuntimeConfig
from stepline.executors import Executor, StepRequest, StepSession
from stepline.model import Run
from stepline.store import read_journal


class Stopped(BaseException):
    """The coordinating process stops (a crash, as far as the run is concerned)."""


class Flaky(Executor):
    """Appends two lines with a wait between; its worker is 'lost' after the first line on attempt 1, and the
    process 'stops' after the second line on attempt 2 when ``stop`` is set."""

    name = "flaky"

    def __init__(self, *, stop: bool = False) -> None:
        self.stop = stop
        self.performed: list[int] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Write, maybe get lost, write, maybe stop, finish."""
        self.performed.append(request.attempt)
        await session.write_output("first\n", path="out.txt")
        if request.attempt == 1:
            raise WorkerLost("the Ray worker running the step died (ActorDiedError)")
        await session.write_output("second\n", path="out.txt")
        if self.stop:
            raise Stopped
        await session.finish(summary="wrote both")


def _project(tmp_path: Path) -> Path:
    (tmp_path / "flow.yaml").write_text(yaml.safe_dump({"id": "flow", "steps": [{"id": "w"}]}), encoding="utf-8")
    return tmp_path


def _engine(project: Path, executor: Executor) -> Engine:
    return Engine(project_root=project, executor=executor,
                  config=RuntimeConfig.model_validate({"runtime": {"max_retries": 1}}))


def _start(project: Path, executor: Executor) -> Run:
    from stepline.families import load_workflow

    return asyncio.run(_engine(project, executor).start(load_workflow(project / "flow.yaml", project_root=project)))


def test_the_retry_of_a_lost_attempt_replays_its_calls(tmp_path: Path) -> None:
    """The lost attempt's write is not done again by the retry: each line is in the file once."""
    project = _project(tmp_path)
    agent = Flaky()
    run = _start(project, agent)
    assert run.status.value == "completed" and agent.performed == [1, 2]
    assert (project / "out.txt").read_text(encoding="utf-8") == "first\nsecond\n"
    journal = read_journal(project / ".stepline" / "runs" / run.run_id / "journal.jsonl")
    started = [e.data for e in journal if e.type == "WorkflowStepStarted"]
    assert [s["attempt"] for s in started] == [1, 2] and started[1]["replays"] == 1
    writes = [e.data["key"] for e in journal if e.type == "CallRecorded" and e.data["op"] == "write_output"]
    assert writes == ["w/1/0/1", "w/1/0/2"]  # both under the lost attempt's keys


def test_a_retry_that_is_interrupted_is_resumed_replaying_the_same_calls(tmp_path: Path) -> None:
    """Stopped mid-retry, the run resumes that retry: it still replays the lost attempt's keys (read back from
    its StepStarted record), so neither line is written twice."""
    project = _project(tmp_path)
    try:
        _start(project, Flaky(stop=True))
    except Stopped:
        pass
    else:  # pragma: no cover - the executor always stops
        raise AssertionError("the run was expected to stop")
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    run = asyncio.run(_engine(project, Flaky()).resume(run_id))
    assert run.status.value == "completed"
    assert (project / "out.txt").read_text(encoding="utf-8") == "first\nsecond\n"


def test_an_ordinary_failure_is_retried_with_fresh_calls(tmp_path: Path) -> None:
    """Without ``replays_calls`` a retry is a new attempt that does its calls again (what a local step does)."""

    class Failing(Flaky):
        async def perform(self, request: StepRequest, session: StepSession) -> None:
            self.performed.append(request.attempt)
            await session.write_output("first\n", path="out.txt")
            if request.attempt == 1:
                raise RuntimeError("boom")
            await session.finish(summary="done")

    project = _project(tmp_path)
    run = _start(project, Failing())
    assert run.status.value == "completed"
    assert (project / "out.txt").read_text(encoding="utf-8") == "first\nfirst\n"
