"""`stepline run` and `resume` as a user starts them, sending spans over OTLP/HTTP to a receiver in the test when
the OTEL_* variables say so: every attribute as received, the resumed run's spans in the trace its journal
names; nothing of OpenTelemetry imported when the variables are unset; a plain install (no `stepline[otel]`)
runs the workflow and says so in one line, as does a run whose collector is not there."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .receiver import Receiver

SPAN_CLIENT, SPAN_INTERNAL, STATUS_OK, STATUS_UNSET = 3, 1, 1, 0
#: Run stepline's CLI with the OpenTelemetry SDK and OTLP exporter unimportable: what a plain install has.
WITHOUT_EXTRA = """\
import sys
from importlib.abc import MetaPathFinder

class NoExtra(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ImportError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoExtra())
from stepline.interfaces.cli import main
sys.argv = ["stepline", *sys.argv[1:]]
main()
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver().running() as running:
        yield running


@pytest.fixture
def gated(project: Path, write_workflow: Callable[..., Path], write_script: Callable[..., Path]) -> Path:
    """A workflow that calls a tool, then waits at a human gate; its script beside it."""
    write_workflow([{"id": "gather", "name": "Gather", "body": "Note the time."},
                    {"id": "publish", "name": "Publish", "body": "Publish.", "human_gate": "required"}], id="notes")
    write_script({"gather": [{"call_tool": {"name": "getCurrentTime", "args": {}}}, {"finish": {"summary": "ok"}}],
                  "publish": [{"finish": {"summary": "published"}}]})
    return project


def _stepline(project: Path, *args: str, env: dict[str, str] | None = None, python: list[str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    plain = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACEPARENT"))}
    command = [*(python or [sys.executable, "-m", "stepline.interfaces.cli"]), *args]
    return subprocess.run(command, cwd=project, env={**plain, **(env or {})}, capture_output=True, text=True,
                          timeout=120, check=False)


def _run_id(project: Path) -> str:
    (run,) = (project / ".stepline" / "runs").iterdir()
    return run.name


def test_a_run_and_its_resume_reach_an_otlp_endpoint_as_one_trace(gated: Path, receiver: Receiver) -> None:
    done = _stepline(gated, "run", "flow.yaml", "--script", "script.yaml", "-q",
                     env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    assert done.returncode == 9, done.stderr  # blocked at the gate
    assert done.stderr.count("note:") == 0, done.stderr
    run_id = _run_id(gated)
    (first,) = receiver.named("invoke_workflow notes")
    assert set(receiver.paths) == {"/v1/traces"}
    assert first.resource["service.name"] == "stepline" and first.parent_id is None and first.kind == SPAN_INTERNAL
    assert first.attributes == {
        "stepline.run.id": run_id, "stepline.workflow.family": "native", "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": "notes", "stepline.executor": "scripted", "stepline.run.status": "blocked",
        "stepline.run.blocked_reason": "publish: waiting for approval of gate step:publish (the step's human_gate is "
                                       "required)"}
    journal = (gated / ".stepline" / "runs" / run_id / "journal.jsonl").read_bytes().rstrip(b"\0").splitlines()
    started = json.loads(journal[0])
    assert started["type"] == "WorkflowStarted"
    assert started["data"]["trace"] == {"trace_id": first.trace_id, "span_id": first.span_id, "run_id": run_id}
    (tool,) = receiver.named("execute_tool getCurrentTime")
    (gather,) = receiver.named("step gather")
    assert tool.parent_id == gather.span_id and gather.parent_id == first.span_id
    assert tool.attributes == {"stepline.run.id": run_id, "stepline.workflow.family": "native",
                               "stepline.step.id": "gather", "gen_ai.operation.name": "execute_tool",
                               "gen_ai.tool.name": "getCurrentTime", "gen_ai.tool.type": "function",
                               "stepline.tool.risk": "low"}
    assert first.start <= gather.start <= tool.start <= tool.end <= gather.end <= first.end

    approved = _stepline(gated, "approve", run_id, "--by", "ada", "--notes", "ship it")  # no variables: no spans
    assert approved.returncode == 0, approved.stderr
    resumed = _stepline(gated, "resume", run_id, "-q", env={
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url + "/v1/traces", "OTEL_SERVICE_NAME": "notes-bot"})
    assert resumed.returncode == 0, resumed.stderr
    again = [span for span in receiver.named("invoke_workflow notes") if span.span_id != first.span_id]
    assert len(again) == 1
    assert (again[0].trace_id, again[0].parent_id) == (first.trace_id, first.span_id)
    assert again[0].resource["service.name"] == "notes-bot" and again[0].status == STATUS_OK
    assert again[0].attributes["stepline.run.resumed"] is True
    assert again[0].events == [("gen_ai.evaluation.result", {
        "gen_ai.evaluation.name": "human_approval", "gen_ai.evaluation.score.label": "approved",
        "gen_ai.evaluation.score.value": 1.0, "gen_ai.evaluation.explanation": "ship it",
        "stepline.gate.id": "step:publish", "stepline.gate.decided_by": "ada"})]
    publish = [span for span in receiver.named("step publish") if span.parent_id == again[0].span_id]
    assert len(publish) == 1 and publish[0].attributes["stepline.step.status"] == "completed"


def test_without_the_variables_nothing_of_opentelemetry_is_imported(gated: Path) -> None:
    for env in ({}, {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
                {"OTEL_SERVICE_NAME": "notes-bot"}, {"OTEL_TRACES_EXPORTER": "none"}):
        done = _stepline(gated, "run", "flow.yaml", "--script", "script.yaml", "-q", env=env,
                         python=[sys.executable, "-X", "importtime", "-m", "stepline.interfaces.cli"])
        assert done.returncode == 9, done.stderr
        imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "import time:" in line]
        assert "stepline.engine" in imported  # importtime was on
        assert not [m for m in imported if m.startswith("opentelemetry")], env


def test_a_plain_install_runs_the_workflow_and_says_it_sends_no_traces(gated: Path, receiver: Receiver) -> None:
    done = _stepline(gated, "run", "flow.yaml", "--script", "script.yaml", "-q",
                     env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url},
                     python=[sys.executable, "-c", WITHOUT_EXTRA])
    assert done.returncode == 9, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed, so this "
                     "run sends no traces: pip install 'stepline[otel]'"]
    assert receiver.spans == []
    run_dir = gated / ".stepline" / "runs" / _run_id(gated)
    assert json.loads(run_dir.joinpath("manifest.json").read_text())["status"] == "blocked"
    assert b'"trace"' not in run_dir.joinpath("journal.jsonl").read_bytes()


def test_a_collector_that_is_not_there_is_said_in_one_line(gated: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _stepline(gated, "run", "flow.yaml", "--script", "script.yaml", "-q",
                     env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_TIMEOUT": "3"})
    assert done.returncode == 9  # the run is what it is: blocked at its gate
    assert done.stderr.splitlines() == [f"note: spans could not be sent to http://127.0.0.1:{port}/v1/traces "
                                        "(Connection refused): is the collector running there? "
                                        "(OTEL_EXPORTER_OTLP_ENDPOINT)"]
