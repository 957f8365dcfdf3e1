"""The step protocol over the Ray backend's TCP channel, without Ray: an executor that talks to the journaled
session through :class:`RemoteSession` (as an executor host does) must leave the run exactly as when it talks to
it directly, errors included."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import ray_agents
import yaml

from stepline import Engine
from stepline.distributed._channel import RemoteSession, SessionServer, original_failure, serve_calls
from stepline.engine import RuntimeConfig
from stepline.errors import OutsideRootError
from stepline.executors import Executor, StepRequest, StepSession
from stepline.model import Run
from stepline.store import read_journal


class Loopback(Executor):
    """``inner`` run as on a worker: its calls cross a real socket to the coordinator's serve loop."""

    name = "loopback"

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Serve the channel here while ``inner`` works through a RemoteSession, then raise as the backend does."""
        server = SessionServer("127.0.0.1")
        await server.start()
        channel = server.open()

        async def worker() -> None:
            remote = await RemoteSession.connect(server.host, server.port, channel.token)
            try:
                await self.inner.perform(request, remote)
            finally:
                await remote.aclose()

        done = asyncio.ensure_future(worker())
        try:
            await serve_calls(channel, session, done)
            await done
        except Exception as exc:
            raise (original_failure(channel, exc) or exc) from None
        finally:
            server.close_channel(channel)
            await server.aclose()


class Outside(Executor):
    """Writes outside the project (refused), noting the class of the error it got; lets it end the step."""

    name = "outside"

    def __init__(self) -> None:
        self.caught: list[type[BaseException]] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Try the write."""
        try:
            await session.write_output("x\n", path="../outside.txt")
        except Exception as exc:
            self.caught.append(type(exc))
            raise


class Asker(Executor):
    """Asks the person a question."""

    name = "asker"

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Ask, then finish with the answer."""
        answer = await session.ask("Which database?", ["postgres", "sqlite"])
        await session.finish(summary=answer)


class FailingModel(Executor):
    """A model call that fails: the executor gets its own exception back."""

    name = "failing-model"

    def __init__(self) -> None:
        self.error = RuntimeError("the model is down")
        self.caught: list[BaseException] = []

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Call the model through memo."""

        async def compute() -> dict[str, Any]:
            raise self.error

        try:
            await session.memo("model", {}, compute)
        except Exception as exc:
            self.caught.append(exc)
            raise


def _project(tmp_path: Path, name: str, steps: list[dict[str, Any]]) -> Path:
    project = tmp_path / name
    project.mkdir()
    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "flow", "steps": steps}), encoding="utf-8")
    (project / "brief.md").write_text("do the step\n", encoding="utf-8")
    return project


def _run(project: Path, executor: Executor, mode: str = "normal") -> Run:
    from stepline.families import load_workflow

    engine = Engine(project_root=project, executor=executor, mode=mode,  # type: ignore[arg-type]
                    config=RuntimeConfig.model_validate({"hitl": {"mode": "non-interactive"}}))
    return asyncio.run(engine.start(load_workflow(project / "flow.yaml", project_root=project)))


def _shape(project: Path, run: Run) -> list[tuple[str | None, str, Any]]:
    journal = read_journal(project / ".stepline" / "runs" / run.run_id / "journal.jsonl")
    return [(e.step_id, e.type, e.data.get("op")) for e in journal]


@pytest.mark.parametrize("steps", [[{"id": f"s{i}", "depends_on": [f"s{i - 1}"] if i else []} for i in range(4)]])
def test_a_step_over_the_channel_journals_what_a_step_done_here_does(tmp_path: Path, steps: list[Any]) -> None:
    """Reads, a model call (memo), appends and finish over the socket: the same files and the same records."""
    here, there = _project(tmp_path, "here", steps), _project(tmp_path, "there", steps)
    local = _run(here, ray_agents.FileAgent())
    remote = _run(there, Loopback(ray_agents.FileAgent()))
    assert local.status.value == remote.status.value == "completed"
    assert _shape(here, local) == _shape(there, remote)
    for name in ("all.log", "s0.txt", "s3.txt"):
        assert (here / "out" / name).read_text(encoding="utf-8") == (there / "out" / name).read_text(encoding="utf-8")
    memos = [e for e in read_journal(there / ".stepline" / "runs" / remote.run_id / "journal.jsonl")
             if e.data.get("op") == "memo:model"]
    assert [m.data["result"] for m in memos] == [{"text": f"answer-for-s{i}"} for i in range(4)]


def test_a_refused_call_reaches_the_worker_as_the_same_error_and_fails_the_step_as_here(tmp_path: Path) -> None:
    """A write outside the project is an OutsideRootError on the worker too; the step fails with the local message."""
    here, there = _project(tmp_path, "here", [{"id": "w"}]), _project(tmp_path, "there", [{"id": "w"}])
    agent = Outside()
    local = _run(here, Outside())
    remote = _run(there, Loopback(agent))
    assert agent.caught == [OutsideRootError]
    assert remote.status.value == "failed"
    assert remote.steps["w"].error == local.steps["w"].error.replace(str(here), str(there))  # type: ignore[union-attr]
    assert not (tmp_path / "outside.txt").exists()


def test_a_question_nobody_can_answer_blocks_the_run_as_here(tmp_path: Path) -> None:
    """An ask in a non-interactive run blocks the step (a signal, not an error) across the channel too."""
    here, there = _project(tmp_path, "here", [{"id": "q"}]), _project(tmp_path, "there", [{"id": "q"}])
    local = _run(here, Asker(), "non-interactive")
    remote = _run(there, Loopback(Asker()), "non-interactive")
    assert local.status.value == remote.status.value == "blocked"
    assert remote.steps["q"].blocked_reason == local.steps["q"].blocked_reason


def test_a_model_call_that_fails_on_the_worker_raises_its_own_error_there_and_journals_nothing(
        tmp_path: Path) -> None:
    """memo's compute runs on the worker: its exception is the executor's own, and no result is journaled."""
    project = _project(tmp_path, "there", [{"id": "m"}])
    agent = FailingModel()
    run = _run(project, Loopback(agent))
    assert agent.caught == [agent.error]
    assert run.status.value == "failed" and "the model is down" in (run.steps["m"].error or "")
    journal = read_journal(project / ".stepline" / "runs" / run.run_id / "journal.jsonl")
    assert not [e for e in journal if e.data.get("op") == "memo:model"]


def test_a_worker_that_cannot_reach_the_coordinator_says_which_address(tmp_path: Path) -> None:
    """The executor host's first act is to connect back; a closed port is one ExecutorError naming it."""
    import socket

    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'stepline[ray]')")
    from stepline.distributed._ray import ExecutorHost
    from stepline.errors import ExecutorError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    host = ExecutorHost(ray.cloudpickle.dumps(ray_agents.FileAgent()))
    request = StepRequest(kind="work", run_id="r", step_id="s", title="s")
    with pytest.raises(ExecutorError, match=f"cannot reach the coordinator at 127.0.0.1:{port}"):
        asyncio.run(host.perform(request, "127.0.0.1", port, "token"))


class EndsEarly(Executor):
    """A worker whose ``perform`` returned and said ``end``, then lingers (Ray not yet back with its result)."""

    name = "ends-early"

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Serve the channel until the end is said: the step is over although the worker's task is not."""
        from stepline.distributed._ray import _first_of

        server = SessionServer("127.0.0.1")
        await server.start()
        channel = server.open()
        release = asyncio.Event()

        async def worker() -> None:
            remote = await RemoteSession.connect(server.host, server.port, channel.token)
            try:
                await remote.write_output("written\n", path="out.txt")
                await remote.finish(summary="did it")
                await remote.end()
                await release.wait()  # what Ray's reply would still be doing
            finally:
                await remote.aclose()

        task = asyncio.ensure_future(worker())
        try:
            # Without the end line this would wait for the task, which waits for the release: a bounded wait.
            await asyncio.wait_for(serve_calls(channel, session, _first_of(channel.ended, task)), 30)
            assert channel.ended.done() and not task.done()  # ended on the worker's line, not on its task's end
        finally:
            release.set()
            await task
            server.close_channel(channel)
            await server.aclose()


def test_a_step_ends_when_its_worker_says_end_without_waiting_for_the_task(tmp_path: Path) -> None:
    """The ``end`` line: every call before it is done and journaled, and the step completes on it."""
    project = _project(tmp_path, "there", [{"id": "e"}])
    run = _run(project, EndsEarly())
    assert run.status.value == "completed", run.error
    assert (project / "out.txt").read_text(encoding="utf-8") == "written\n"
    assert run.steps["e"].summary == "did it"
