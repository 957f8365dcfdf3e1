"""Validation gates, evidence requirements, guardrails and interactive gates, through real runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import yaml

from stepline import Engine
from stepline.engine import HumanChannel, RuntimeConfig
from stepline.families import load_workflow
from stepline.time import frozen


def _run(project: Path, steps: list[dict[str, Any]], script: dict[str, Any], **engine: Any) -> Any:
    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "w", "steps": steps}), encoding="utf-8")
    (project / "script.yaml").write_text(yaml.safe_dump({"steps": script}), encoding="utf-8")
    eng = Engine(project_root=project, executor="scripted", executor_options={"script": str(project / "script.yaml")},
                 **engine)
    return eng, asyncio.run(eng.start(load_workflow(project / "flow.yaml")))


def _evidence(level: str, **extra: Any) -> dict[str, Any]:
    return {"id": f"ev-{level}", "claim": "the notes match the change log", "level": level, "source": "review",
            "date": "2026-01-01", "valid_until": "2026-12-31", "congruence": "CL2", "reliability": 0.9,
            "wlnk": None, "carrier_ref": "docs/notes.md", **extra}


def test_evidence_requirement_met_records_wlnk_and_links_artifacts(project: Path) -> None:
    """A step needing L1 evidence completes when it records L1; evidence.json has WLNK and the artifact."""
    with frozen("2026-06-01T00:00:00+00:00"):
        engine, run = _run(project, [{"id": "s", "evidence": "L1", "outputs": ["docs/notes.md"]}], {"s": [
            {"write_output": {"content": "notes\n"}},
            {"call_tool": {"name": "recordEvidence", "args": _evidence("L1")}}, {"finish": {}}]})
    assert run.status.value == "completed"
    records = json.loads((engine.store.root / run.run_id / "evidence.json").read_text())
    assert records[0]["wlnk"] == 0.9 * 0.8 and records[0]["step_id"] == "s"
    assert "docs/notes.md" in records[0]["artifacts"]
    events = [e.type for e in engine.store.open(run.run_id).events()]
    assert "EvidenceRecorded" in events and "ValidationPassed" in events


def test_too_weak_or_expired_evidence_fails_validation_after_retries(project: Path) -> None:
    """L0 evidence (or L1 past valid_until) does not meet L1: the gate fails, the step retries, then fails."""
    with frozen("2026-06-01T00:00:00+00:00"):
        engine, run = _run(project, [{"id": "s", "evidence": "L1", "retries": {"max": 1}}], {"s": [
            {"call_tool": {"name": "recordEvidence", "args": _evidence("L1", valid_until="2026-02-01")}},
            {"call_tool": {"name": "recordEvidence", "args": _evidence("L0")}}, {"finish": {}}]})
    assert run.status.value == "failed" and run.steps["s"].attempts == 2
    assert "validation failed" in (run.steps["s"].error or "") and "'L1' not met" in (run.steps["s"].error or "")
    failed = [e for e in engine.store.open(run.run_id).events() if e.type == "ValidationFailed"]
    assert len(failed) == 2 and failed[0].data["gate"] == "evidence"


def test_template_gate_rejects_unfilled_placeholders(project: Path) -> None:
    """An output that still holds {{placeholders}} fails the template gate and the step."""
    (project / "tpl.md").write_text("# Doc\n\n## Summary\n\n{{summary}}\n", encoding="utf-8")
    _, run = _run(project, [{"id": "s", "outputs": ["doc.md"], "templates": ["template:tpl.md"]}], {"s": [
        {"write_output": {"content": "# Doc\n\n## Summary\n\n{{summary}}\n", "mode": "replace"}}, {"finish": {}}]})
    assert run.status.value == "failed"
    assert "unfilled placeholder {{summary}}" in (run.steps["s"].error or "")


def test_json_output_must_parse(project: Path) -> None:
    """A .json output that is not JSON fails validation, naming the file."""
    _, run = _run(project, [{"id": "s", "outputs": ["out.json"]}], {"s": [
        {"write_output": {"content": "{not json", "mode": "replace"}}, {"finish": {}}]})
    assert run.status.value == "failed" and "out.json" in (run.steps["s"].error or "")


def test_checklist_items_are_judged_one_by_one(project: Path) -> None:
    """Each checklist item is a decide request; a 'no' fails validation with the item and the reason."""
    (project / "checklist.md").write_text("- [ ] Has a title\n- [ ] Names the version\n", encoding="utf-8")
    steps = [{"id": "s", "outputs": ["doc.md"], "meta": {"checklist": "checklist.md"}}]
    script = {"s": {"turns": [
        [{"write_output": {"content": "# Title\n", "mode": "replace"}}, {"finish": {}}],
        [{"decide": {"value": True, "reason": "title present"}}],
        [{"decide": {"value": False, "reason": "no version number"}}]]}}
    _, run = _run(project, steps, script)
    assert run.status.value == "failed"
    assert "Names the version — no version number" in (run.steps["s"].error or "")


def test_blocking_guardrail_fails_the_step(project: Path) -> None:
    """With block_on_secret, a key in a step's instructions fails it before any tool or executor runs."""
    config = RuntimeConfig.model_validate({"guardrails": {"block_on_secret": True}})
    _, run = _run(project, [{"id": "s", "body": "deploy with sk-proj-4f9XyZ8kLmN2pQ7rS3tUvW1x"}],
                  {"s": [{"write_output": {"content": "x", "path": "never.txt"}}, {"finish": {}}]}, config=config)
    assert run.status.value == "failed" and "guardrail failed on input" in (run.steps["s"].error or "")
    assert not (project / "never.txt").exists()


def test_interactive_terminal_approves_a_gate_in_place(project: Path) -> None:
    """In an interactive session the person is asked at the gate; 'y' is recorded as an approval."""
    asked: list[str] = []

    def prompt(question: str, choices: list[str] | None) -> str:
        asked.append(question)
        return "y"

    engine, run = _run(project, [{"id": "s", "human_gate": "required"}], {"s": [{"finish": {}}]},
                       human=HumanChannel(interactive=True, prompt=prompt))
    assert run.status.value == "completed" and asked == ["Approve step:s? (the step's human_gate is required)"]
    approvals = json.loads((engine.store.root / run.run_id / "approvals.json").read_text())
    assert approvals[0]["approver"] == "terminal" and approvals[0]["decision"] == "approved"
