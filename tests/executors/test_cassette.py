"""Record a run's executor calls to a cassette and replay it offline, byte for byte (R-X6)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the shared fakes package

from fakes.fake_openai import FakeOpenAI, completion, fault
from fakes.runs import OUTPUT, greeting_workflow, memo_records, outputs_digest
from stepline import Engine
from stepline.errors import ExecutorError, ReaderError
from stepline.executors import ScriptedExecutor, create_executor
from stepline.executors._cassette import ReplayExecutor, wrap_recording
from stepline.executors._openai import OpenAIExecutor
from stepline.model import StepSpec, WorkflowSpec

TOKEN = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"


def two_step_workflow() -> WorkflowSpec:
    """A greeting step, then a step that reads it back and records a note."""
    workflow = greeting_workflow()
    workflow.variables["deploy_token"] = TOKEN
    workflow.steps.append(StepSpec(id="review", name="Review", outputs=["out/review.md"],
                                   body="Read out/greeting.md and write a one-line review."))
    return workflow


def record(tmp_path: Path, cassette: Path) -> tuple[Engine, Any]:
    """Run the two-step workflow against a fake server that is stopped when this returns."""
    with FakeOpenAI().running() as server:
        server.queue(
            completion(("write_output", {"content": "Hello, Ada!\n"})),
            completion(("finish", {"summary": "greeted"})),
            completion(("read", {"path": OUTPUT}), ("read", {"path": "../escape.md"})),
            completion(("write_output", {"content": "Friendly and short.\n"}), ("set_var", {"name": "score",
                                                                                            "value": 9})),
            completion(("finish", {"summary": "reviewed"})),
        )
        inner = OpenAIExecutor({"base_url": server.base_url, "api_key": "sk-test-abcdefghijklmnopqrstuvwx",
                                "model": "fake-gpt"})
        engine = Engine(project_root=tmp_path, executor=wrap_recording(inner, cassette), mode="yolo")
        run = asyncio.run(engine.start(two_step_workflow()))
    assert run.status.value == "completed"
    return engine, run


def test_replay_reproduces_outputs_byte_for_byte(tmp_path: Path) -> None:
    """A run recorded against the fake server replays with the server gone, with identical outputs."""
    cassette = tmp_path / "run.cassette.json"
    recorded_root, replay_root = tmp_path / "recorded", tmp_path / "replayed"
    recorded_root.mkdir()
    replay_root.mkdir()
    engine, run = record(recorded_root, cassette)

    replay_engine = Engine(project_root=replay_root, executor="replay", executor_options={"cassette": str(cassette)},
                           mode="yolo")
    replayed = asyncio.run(replay_engine.start(two_step_workflow()))
    assert replayed.status.value == "completed"
    assert outputs_digest(replay_root, replay_engine, replayed) == outputs_digest(recorded_root, engine, run)
    assert replayed.variables["score"] == 9
    assert [r["result"] for r in memo_records(replay_engine, replayed, "openai")] == [
        r["result"] for r in memo_records(engine, run, "openai")]


def test_cassette_holds_requests_and_calls_without_secrets(tmp_path: Path) -> None:
    """The cassette keys requests by step, kind and invocation, notes each call, and redacts secrets."""
    cassette = tmp_path / "run.cassette.json"
    record(tmp_path, cassette)
    text = cassette.read_text()
    assert TOKEN not in text and "sk-test-abcdefghijklmnopqrstuvwx" not in text
    data = json.loads(text)
    assert data["executor"] == "openai"
    assert [i["key"] for i in data["interactions"]] == ["write/work/0", "review/work/0"]
    ops = [c["op"] for c in data["interactions"][1]["calls"]]
    assert ops == ["memo", "read", "read", "memo", "write_output", "set_var", "memo", "finish"]
    escape = data["interactions"][1]["calls"][2]
    assert escape["error"]["type"] == "OutsideRootError"


def test_replay_of_an_unrecorded_request_names_step_and_request(tmp_path: Path) -> None:
    """A request the cassette does not hold fails the step with an error naming both."""
    cassette = tmp_path / "c.json"
    (tmp_path / "rec").mkdir()
    record(tmp_path / "rec", cassette)
    other = WorkflowSpec(id="other", format="native", steps=[StepSpec(id="summarize", outputs=["s.md"])])
    engine = Engine(project_root=tmp_path, executor="replay", executor_options={"cassette": str(cassette)})
    result = asyncio.run(engine.start(other))
    assert result.status.value == "failed"
    assert "has no work request #1 for step 'summarize'" in (result.steps["summarize"].error or "")


def test_any_executor_can_be_recorded_yaml_cassette(tmp_path: Path) -> None:
    """A scripted run recorded to a YAML cassette replays to the same output."""
    script = {"steps": {"write": [{"write_output": {"content": "Scripted hello\n"}}, {"finish": {"choice": "C"}}]}}
    cassette = tmp_path / "scripted.yaml"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = Engine(project_root=tmp_path / "a", executor=wrap_recording(ScriptedExecutor({"script": script}),
                                                                          cassette))
    asyncio.run(first.start(greeting_workflow()))
    second = Engine(project_root=tmp_path / "b", executor=create_executor("replay", {"cassette": str(cassette)}))
    replayed = asyncio.run(second.start(greeting_workflow()))
    assert replayed.steps["write"].choice == "C"
    assert (tmp_path / "b" / OUTPUT).read_bytes() == (tmp_path / "a" / OUTPUT).read_bytes() == b"Scripted hello\n"
    assert cassette.read_text().startswith("version: 1")


def test_a_recorded_failure_replays_as_the_same_failure(tmp_path: Path) -> None:
    """A request that failed while recording fails the same way on replay, without a server."""
    cassette = tmp_path / "fail.json"
    (tmp_path / "rec").mkdir()
    with FakeOpenAI().running() as server:
        server.queue(fault(400, "context too long"))
        inner = OpenAIExecutor({"base_url": server.base_url, "api_key": "k", "model": "fake-gpt"})
        engine = Engine(project_root=tmp_path / "rec", executor=wrap_recording(inner, cassette), mode="yolo")
        assert asyncio.run(engine.start(greeting_workflow())).status.value == "failed"
    replay = Engine(project_root=tmp_path, executor="replay", executor_options={"cassette": str(cassette)})
    result = asyncio.run(replay.start(greeting_workflow()))
    assert result.status.value == "failed"
    assert "HTTP 400: context too long" in (result.steps["write"].error or "")


def test_replay_needs_a_readable_cassette(tmp_path: Path) -> None:
    """No cassette option, a missing file and a malformed file are clear errors."""
    with pytest.raises(ExecutorError, match="needs a cassette"):
        ReplayExecutor({})
    with pytest.raises(ReaderError, match="cassette not found"):
        ReplayExecutor({"cassette": str(tmp_path / "none.json")})
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ReaderError, match="interactions"):
        ReplayExecutor({"cassette": str(tmp_path / "bad.json")})
