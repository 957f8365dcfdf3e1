"""End to end: a required gate and a high-risk tool block a non-interactive run twice; two approvals, each
given by a separate `stepline approve` process, let it complete; the audit files hold exactly that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

WORKFLOW = {
    "id": "release",
    "steps": [
        {"id": "step-1", "name": "prepare", "body": "Prepare the release."},
        {"id": "step-2", "name": "review", "body": "Review the plan.", "human_gate": "required",
         "phase": "Phase 2 Planning"},
        {"id": "step-3", "name": "build", "body": "Build it.",
         "tools": [{"name": "shell", "args": {"command": "echo built > build.txt"}, "required": True}]},
    ],
}


def stepline(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)],
                          capture_output=True, text=True, timeout=120)


def test_two_blocks_two_cli_approvals_then_completion(project: Path) -> None:
    """The run blocks at the gate, then at the risky tool; separate approve processes unblock it."""
    (project / "flow.yaml").write_text(yaml.safe_dump(WORKFLOW), encoding="utf-8")
    first = stepline(project, "run", "flow.yaml", "--non-interactive", "-q")
    assert first.returncode == 9, first.stderr
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    run_dir = project / ".stepline" / "runs" / run_id

    gates = json.loads(stepline(project, "gates", run_id, "--json").stdout)
    assert [g["gate_id"] for g in gates] == ["step:step-2"]
    assert stepline(project, "approve", run_id, "--by", "").returncode == 2  # an approval needs a name
    approved = stepline(project, "approve", run_id, "step:step-2", "--by", "alice", "--notes", "plan ok")
    assert approved.returncode == 0, approved.stderr
    assert "already approved" in stepline(project, "approve", run_id, "step:step-2", "--by", "bob").stderr
    assert "no gate 'step:nope'" in stepline(project, "approve", run_id, "step:nope", "--by", "bob").stderr

    second = stepline(project, "resume", run_id, "-q")
    assert second.returncode == 9, second.stderr
    assert not (project / "build.txt").exists()  # the high-risk tool did not run before its approval
    gates = json.loads(stepline(project, "gates", run_id, "--json").stdout)
    assert [g["gate_id"] for g in gates] == ["tool:shell:step-3"]
    assert stepline(project, "approve", run_id, "--by", "bob").returncode == 0  # the only pending gate

    third = stepline(project, "resume", run_id, "-q", "--json")
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["status"] == "completed"
    assert (project / "build.txt").read_text() == "built\n"
    assert "is completed" in stepline(project, "approve", run_id, "step:step-2", "--by", "eve").stderr

    approvals = json.loads((run_dir / "approvals.json").read_text())
    assert [(a["gate_id"], a["decision"], a["approver"]) for a in approvals] == [
        ("step:step-2", "approved", "alice"), ("tool:shell:step-3", "approved", "bob")]
    assert approvals[0]["notes"] == "plan ok" and approvals[0]["phase"] == "Phase 2 Planning"
    gates_file = json.loads((run_dir / "gates.json").read_text())
    assert [(g["gate_id"], g["kind"], g["status"]) for g in gates_file] == [
        ("step:step-2", "human", "approved"), ("tool:shell:step-3", "tool", "approved")]
    assert all(g["workflow"] == "release" and g["decided_at"] for g in gates_file)
    drr = json.loads((run_dir / "drr.json").read_text())
    assert [(d["gate_id"], d["signoff"]) for d in drr] == [("step:step-2", "alice"), ("tool:shell:step-3", "bob")]
    assert all((run_dir / "drr" / f"{d['id']}.md").is_file() for d in drr)
    tools = json.loads((run_dir / "tool_results.json").read_text())
    assert [(t["name"], t["status"], t["risk"]) for t in tools] == [("shell", "blocked", "high"),
                                                                   ("shell", "ok", "high")]
    timeline = json.loads((run_dir / "timeline.json").read_text())
    kinds = [e["type"] for e in timeline["events"]]
    for expected in ("HumanGateRequired", "HumanGateApproved", "ToolApprovalRequired", "ToolStarted",
                     "ToolCompleted", "WorkflowCompleted"):
        assert expected in kinds
    assert kinds.count("WorkflowBlocked") == 2 and kinds.count("WorkflowResumed") == 2
    assert len(timeline["approvals"]) == 2 and len(timeline["drr"]) == 2
