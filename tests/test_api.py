"""The public Python API: its surface, the shipped schema, running and resuming, plugins, the clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import stepline
from stepline.executors import Executor, StepRequest, StepSession
from stepline.model import build_workflow_schema, workflow_schema
from stepline.time import frozen


def test_public_surface_matches_all() -> None:
    """Every name in stepline.__all__ resolves, and __all__ is sorted (the package root is the public API)."""
    assert stepline.__all__ == sorted(stepline.__all__)
    for name in stepline.__all__:
        assert getattr(stepline, name) is not None
    with pytest.raises(AttributeError):
        _ = stepline.not_a_name  # type: ignore[attr-defined]


def test_shipped_schema_is_the_generated_one() -> None:
    """workflow.schema.json in the package matches the models (regenerate it when they change)."""
    assert workflow_schema() == json.loads(json.dumps(build_workflow_schema()))


def test_example_workflow_validates_against_the_schema() -> None:
    """The bundled example is a valid native workflow by the published schema."""
    example = Path(__file__).resolve().parents[1] / "examples" / "release-notes" / "workflow.yaml"
    jsonschema.validate(yaml.safe_load(example.read_text()), workflow_schema())


def test_run_workflow_and_resume_run(project: Path, write_workflow: Callable[..., Path]) -> None:
    """run_workflow blocks at a gate in non-interactive mode; resume_run after approval completes it."""
    path = write_workflow([{"id": "a"}, {"id": "b", "human_gate": "required"}])
    run = stepline.run_workflow(path, project_root=project, mode="non-interactive")
    assert run.status.value == "blocked"
    engine = stepline.Engine(project_root=project)
    engine.decide_gate(run.run_id, None, approved=True, by="ada")
    resumed = stepline.resume_run(run.run_id, project_root=project)
    assert resumed.status.value == "completed" and resumed.steps["a"].attempts == 1


class Shouter(Executor):
    """A third-party executor: writes the step title in capitals."""

    name = "shouter"
    pure = True

    def __init__(self, options: dict[str, Any]) -> None:
        self.suffix = options.get("suffix", "!")

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        await session.write_output(request.title.upper() + self.suffix + "\n", path="shout.txt")
        await session.finish()


def test_third_party_executor_registers_by_name(project: Path, write_workflow: Callable[..., Path]) -> None:
    """register_executor makes an executor usable by name, from the API and the CLI."""
    from stepline.interfaces.cli._app import run_cli

    stepline.register_executor("shouter", Shouter)
    path = write_workflow([{"id": "a", "name": "hello"}])
    assert run_cli(["run", str(path), "--executor", "shouter", "-C", str(project), "-q"]) == 0
    assert (project / "shout.txt").read_text() == "HELLO!\n"


def test_every_timestamp_comes_from_the_time_provider(project: Path, write_workflow: Callable[..., Path]) -> None:
    """With the clock frozen, run ids, events and RunStep times all carry the frozen instant."""
    path = write_workflow([{"id": "a"}])
    with frozen("2030-05-06T07:08:09+00:00"):
        run = stepline.run_workflow(path, project_root=project)
    assert run.run_id.startswith("run-20300506070809-")
    assert run.steps["a"].started_at == run.steps["a"].ended_at == "2030-05-06T07:08:09.000000+00:00"
    journal = project / ".stepline" / "runs" / run.run_id / "journal.jsonl"
    times = {json.loads(line)["time"] for line in journal.read_text().splitlines()}
    assert times == {"2030-05-06T07:08:09.000000+00:00"}
