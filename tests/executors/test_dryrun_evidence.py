"""The dry-run executor meets a step's evidence requirement with a placeholder marked as dry-run (issue 14.5).

The placeholder goes through the same ``recordEvidence`` tool call a real executor makes, so it is validated,
scored and journaled the same way; an executor that records nothing still fails the requirement.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from stepline import Engine, load_workflow
from stepline.evidence import validate_evidence
from stepline.executors import DryRunExecutor, StepRequest, StepSession
from stepline.executors._dryrun import DRY_RUN_SOURCE, placeholder_evidence
from stepline.time import frozen

#: A native workflow: a plain step, a step that writes an output and needs L0, and one that needs L2.
STEPS: list[dict[str, Any]] = [
    {"id": "plan", "name": "Plan"},
    {"id": "notes", "name": "Write the notes", "outputs": ["docs/notes.md"], "evidence": "L0"},
    {"id": "verify", "name": "Verify the release", "evidence": "QUINT L2"},
]


def _run(project: Path, executor: str, options: dict[str, Any] | None = None) -> tuple[Engine, Any]:
    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "w", "steps": STEPS}, sort_keys=False),
                                       encoding="utf-8")
    engine = Engine(project_root=project, executor=executor, executor_options=options or {})
    with frozen("2026-06-01T00:00:00+00:00"):
        return engine, asyncio.run(engine.start(load_workflow(project / "flow.yaml")))


def _evidence(engine: Engine, run: Any) -> list[dict[str, Any]]:
    path = engine.store.root / run.run_id / "evidence.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def test_dry_run_completes_with_placeholder_evidence_marked_dry_run(project: Path) -> None:
    """Each step with a requirement gets one placeholder at the required level, marked dry-run, worth nothing."""
    engine, run = _run(project, "dry-run")
    assert run.status.value == "completed", [(s.step_id, s.error) for s in run.steps.values()]
    records = {r["step_id"]: r for r in _evidence(engine, run)}
    assert set(records) == {"notes", "verify"}  # a step without a requirement gets none
    assert records["notes"]["level"] == "L0" and records["verify"]["level"] == "L2"
    for step_id, record in records.items():
        assert record["id"] == f"dry-run:{step_id}" and record["source"] == DRY_RUN_SOURCE == "dry-run"
        assert record["claim"].startswith("[dry-run placeholder]") and "nothing was checked" in record["claim"]
        assert record["reliability"] == 0.0 and record["wlnk"] == 0.0 and record["valid_until"] is None
        assert record["date"].startswith("2026-06-01")
        validate_evidence(record)
    assert "docs/notes.md" in records["notes"]["artifacts"]  # recorded after the output, so it links it
    events = list(engine.store.open(run.run_id).events())
    # journaled like a real executor's evidence: a recordEvidence tool call, then EvidenceRecorded
    recorded = [e for e in events if e.type == "EvidenceRecorded"]
    assert sorted((e.step_id, e.data["level"], e.data["wlnk"]) for e in recorded) == [
        ("notes", "L0", 0.0), ("verify", "L2", 0.0)]
    tools = json.loads((engine.store.root / run.run_id / "tool_results.json").read_text(encoding="utf-8"))
    assert sorted(t["step_id"] for t in tools if t["name"] == "recordEvidence") == ["notes", "verify"]
    assert [e for e in events if e.type == "ValidationFailed"] == []


def test_scripted_executor_recording_no_evidence_still_fails_the_requirement(project: Path) -> None:
    """The check is not disabled: a step whose executor records nothing fails its requirement."""
    script = {"steps": {"notes": [{"write_output": {"content": "notes\n"}}, {"finish": {}}]}}
    engine, run = _run(project, "scripted", {"script": script})
    assert run.status.value == "failed"
    assert run.steps["notes"].status.value == "failed"
    assert "requirement 'L0' not met by 0 record(s)" in (run.steps["notes"].error or "")
    assert _evidence(engine, run) == []


def test_scripted_fallback_to_dry_run_does_not_meet_the_requirement(project: Path) -> None:
    """A step the script leaves to its dry-run fallback is not given placeholder evidence: it still fails."""
    engine, run = _run(project, "scripted", {"script": {"steps": {}}})
    assert run.status.value == "failed"
    assert "requirement 'L0' not met by 0 record(s)" in (run.steps["notes"].error or "")
    assert _evidence(engine, run) == []


def test_dry_run_without_placeholder_evidence_checks_the_requirement(project: Path) -> None:
    """``placeholder_evidence: false`` makes a dry run check evidence requirements like any other run."""
    engine, run = _run(project, "dry-run", {"placeholder_evidence": False})
    assert run.status.value == "failed"
    assert "requirement 'L0' not met" in (run.steps["notes"].error or "")
    assert _evidence(engine, run) == []


class _Session(StepSession):
    """Notes the calls an executor makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def read(self, path: str) -> str:
        raise AssertionError("not expected")

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        raise AssertionError("not expected")

    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: Any = "append") -> str:
        self.calls.append(("write_output", section))
        return path or "out.md"

    async def set_var(self, name: str, value: Any) -> None:
        raise AssertionError("not expected")

    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append(("call_tool", (name, args)))
        return {"status": "ok"}

    async def decide(self, value: bool, reason: str) -> None:
        self.calls.append(("decide", value))

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        self.calls.append(("finish", choice))

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        raise AssertionError("not expected")


def _perform(request: StepRequest, **options: Any) -> list[tuple[str, Any]]:
    session = _Session()
    asyncio.run(DryRunExecutor(options).perform(request, session))
    return session.calls


def test_work_and_generate_requests_record_the_placeholder_after_the_output() -> None:
    """``work`` and ``generate`` requests with a requirement record it between the output and ``finish``."""
    work = StepRequest(kind="work", run_id="r", step_id="s", title="S", hints={"output": True}, evidence="L1")
    calls = _perform(work)
    assert [c[0] for c in calls] == ["write_output", "call_tool", "finish"]
    name, record = calls[1][1]
    expected = placeholder_evidence(work)
    assert expected is not None and name == "recordEvidence" and record == {**expected, "date": record["date"]}
    assert record["level"] == "L1" and record["source"] == "dry-run"
    validate_evidence(record)
    generate = StepRequest(kind="generate", run_id="r", step_id="s", title="S", section="intro", evidence="L0")
    assert [c[0] for c in _perform(generate)] == ["write_output", "call_tool", "finish"]


def test_no_placeholder_without_a_requirement_or_for_questions() -> None:
    """No requirement, a requirement naming no level, decide/answer/choose requests, or the option off: no call."""
    requests = [StepRequest(kind="work", run_id="r", step_id="s", title="S"),
                StepRequest(kind="work", run_id="r", step_id="s", title="S", evidence="reviewed"),
                StepRequest(kind="decide", run_id="r", step_id="s", title="S", evidence="L1"),
                StepRequest(kind="answer", run_id="r", step_id="s", title="S", question="Q?", evidence="L1"),
                StepRequest(kind="choose", run_id="r", step_id="s", title="S", choices=["a"], evidence="L1")]
    for request in requests:
        assert all(c[0] != "call_tool" for c in _perform(request)), request.kind
    work = StepRequest(kind="work", run_id="r", step_id="s", title="S", evidence="L1")
    assert all(c[0] != "call_tool" for c in _perform(work, placeholder_evidence=False))
