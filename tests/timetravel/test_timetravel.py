"""stepline fork / replay / diff on corpus workflows (issue 32), recorded with the openai executor against the
fake OpenAI server, whose model writes what its prompt says (conftest.PromptEcho)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fakes import fake_openai
from stepline.engine import Engine
from stepline.timetravel import prepare_fork, read_run

from .conftest import child_of, cli, first_index, record, records, requested_steps, run_path, tree_bytes, use_fake_model

pytestmark = pytest.mark.corpus

MICROFILE = "_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md"
SKILL = "_bmad/bmm/plan/bmad-create-epics-and-stories"


def test_fork_a_microfile_workflow_at_a_middle_step_with_a_changed_variable(
        alpha23: Path, model: fake_openai.FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    """alpha.23 create-product-brief: the fork copies the records before step-03 byte for byte (its model is
    not asked for them again), puts the brief back as step-02 left it, and diverges from step-03 on; the
    parent's directory is not changed by a byte."""
    use_fake_model(alpha23, model)
    parent = record(capsys, alpha23, MICROFILE)
    before = tree_bytes(run_path(alpha23, parent))
    sent = len(model.requests)

    code, out = cli(capsys, alpha23, "fork", parent, "--at", "step-03-users", "--set", "user_name=Zed")
    assert code == 0, out
    child = child_of(out)
    assert "restored" in out and "product-brief" in out

    assert tree_bytes(run_path(alpha23, parent)) == before
    cut = first_index(alpha23, parent, "step-03-users")
    assert records(alpha23, child)[:cut] == records(alpha23, parent)[:cut]
    asked = requested_steps(model, sent)
    assert asked and asked[0] == "step-03-users"
    assert not {"step-01-init", "step-02-vision"} & set(asked)
    manifest = json.loads((run_path(alpha23, child) / "manifest.json").read_text())
    assert (manifest["parent_run_id"], manifest["forked_at"]) == (parent, "step-03-users")

    code, out = cli(capsys, alpha23, "diff", parent, child)
    assert code == 12, out
    # user_name is first named by step-06's file: its request is the first that differs, and its artifact
    assert "model requests changed: step-06-complete\n" in out
    assert "+\"🎉 **Product Brief Complete, Zed!**" in out
    assert re.search(r"^\+\+\+ B/_bmad-output/planning-artifacts/product-brief-\S+\.md$", out, re.M)
    assert re.search(r"^-prompt [0-9a-f]{12}$", out, re.M) and re.search(r"^\+prompt [0-9a-f]{12}$", out, re.M)


def test_replay_a_skill_unchanged_then_with_one_step_file_edited(
        v611: Path, model: fake_openai.FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    """v6.11.0 bmad-create-epics-and-stories: replayed unchanged, every model request is answered from the record
    (none reaches the model) and nothing differs (exit 0); with step-02's file edited, only step-02 asks the model
    (the later steps' requests are unchanged), and the report shows the prompt's new line and the artifact's diff
    (exit 12)."""
    use_fake_model(v611, model)
    recorded = record(capsys, v611, SKILL)
    sent = len(model.requests)

    code, out = cli(capsys, v611, "replay", recorded, "--against", SKILL)
    assert code == 0, out
    assert len(model.requests) == sent
    assert re.search(r"^replay run-\S+ of " + recorded + r" \(completed\): [1-9]\d* model requests answered from "
                     r"the record, 0 sent$", out, re.M), out
    assert "model requests changed: none" in out and "artifacts: 1 the same, 0 differ" in out

    step_file = next((v611 / SKILL).rglob("step-02-*.md"))
    text = step_file.read_text(encoding="utf-8")
    step_file.write_text(text.replace("## STEP GOAL:\n", "## STEP GOAL:\n\nAlso name each epic's risk.\n", 1),
                         encoding="utf-8")
    code, out = cli(capsys, v611, "replay", recorded, "--against", SKILL)
    asked = requested_steps(model, sent)
    assert asked and asked[0].startswith("step-02")
    assert not any(step.startswith("step-01") for step in asked)
    assert re.search(r"^\+Also name each epic's risk\.$", out, re.M)
    assert code == 12, out
    assert re.search(r"^-prompt [0-9a-f]{12}$", out, re.M) and re.search(r"^\+prompt [0-9a-f]{12}$", out, re.M)
    assert "artifacts: 0 the same, 1 differ" in out


def test_fork_a_ccw_session_at_a_middle_task_with_a_new_variable(
        ccw_project: Path, model: fake_openai.FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    """A CCW session (five tasks in phases): the fork at IMPL-3 copies the records before it, asks the model for
    IMPL-3 on only, and its tasks' prompts (which list the run's variables) and artifacts diverge."""
    use_fake_model(ccw_project, model)
    session = ".workflow/active/WFS-phased"
    parent = record(capsys, ccw_project, session)
    before = tree_bytes(run_path(ccw_project, parent))
    sent = len(model.requests)

    code, out = cli(capsys, ccw_project, "fork", parent, "--at", "IMPL-3", "--set", "reviewer=Ann")
    assert code == 0, out
    child = child_of(out)
    assert tree_bytes(run_path(ccw_project, parent)) == before
    cut = first_index(ccw_project, parent, "IMPL-3")
    assert records(ccw_project, child)[:cut] == records(ccw_project, parent)[:cut]
    asked = requested_steps(model, sent)
    assert asked and set(asked) <= {"IMPL-3", "IMPL-4", "IMPL-5"}, asked
    # CCW's own files were put back as they were before IMPL-3 completed: the fork's agent is asked for a pending
    # task, and completing it again records one pass pending -> completed
    assert f"restored  {session}/.task/IMPL-3.json" in out
    assert f"removed   {session}/.summaries/IMPL-3-summary.md" in out
    request = json.dumps(model.requests[sent + asked.index("IMPL-3")]["messages"])
    assert '\\"status\\": \\"pending\\"' in request and '\\"status\\": \\"completed\\"' not in request, request
    task = json.loads((ccw_project / session / ".task" / "IMPL-3.json").read_text(encoding="utf-8"))
    assert task["status"] == "completed"
    assert [(h["from"], h["to"]) for h in task["status_history"]] == [("pending", "in_progress"),
                                                                       ("in_progress", "completed")]

    code, out = cli(capsys, ccw_project, "diff", parent, child)
    assert code == 12, out
    assert "model requests changed: IMPL-3" in out

    # put back (without running on): TODO_LIST.md as IMPL-3 found it, IMPL-1 and -2 ticked, then the later tasks
    prepare_fork(Engine(project_root=ccw_project), read_run(Engine(project_root=ccw_project), child), "IMPL-3", {})
    todo = (ccw_project / session / "TODO_LIST.md").read_text(encoding="utf-8")
    assert re.findall(r"^- \[(.)\] \*\*(IMPL-\d)", todo, re.M) == [
        ("x", "IMPL-1"), ("x", "IMPL-2"), (" ", "IMPL-3"), (" ", "IMPL-4"), (" ", "IMPL-5")], todo
    for task, status in (("IMPL-2", "completed"), ("IMPL-3", "pending"), ("IMPL-4", "pending")):
        found = json.loads((ccw_project / session / ".task" / f"{task}.json").read_text(encoding="utf-8"))
        assert found["status"] == status, (task, found)
    assert not (ccw_project / session / ".summaries" / "IMPL-3-summary.md").exists()


@pytest.mark.parametrize(("project_fixture", "path", "step"), [
    ("alpha23", "_bmad/bmm/workflows/testarch/nfr-assess/workflow.yaml", "step-4"),  # legacy (workflow.yaml)
    ("v611", SKILL, "step-03-create-stories"),  # Agent Skill with step files
])
def test_fork_legacy_and_skill_runs(project_fixture: str, path: str, step: str, request: pytest.FixtureRequest,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A legacy BMAD workflow and an Agent Skill (dry-run): the fork keeps the records before the step, runs the
    rest, leaves the parent as it was, and ends with the same artifacts as the parent (the legacy run's
    document; the dry-run writes none in the skill)."""
    project: Path = request.getfixturevalue(project_fixture)
    code, out = cli(capsys, project, "run", path, "--yolo")
    assert code == 0, out
    parent = re.search(r"run (run-\S+) completed", out).group(1)  # type: ignore[union-attr]
    before = tree_bytes(run_path(project, parent))
    code, out = cli(capsys, project, "fork", parent, "--at", step)
    assert code == 0, out
    child = child_of(out)
    assert tree_bytes(run_path(project, parent)) == before
    cut = first_index(project, parent, step)
    assert records(project, child)[:cut] == records(project, parent)[:cut]
    assert next(r[3] for r in records(project, child)[cut:] if r[1] == "WorkflowStepStarted") == step
    code, out = cli(capsys, project, "diff", parent, child)
    assert code == 0 and re.search(r"^artifacts: \d+ the same, 0 differ$", out, re.M), out


def test_replay_reads_the_changed_workflow_in_the_mode_the_run_was_started_with(
        alpha23: Path, model: fake_openai.FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    """alpha.23 prd, a router (steps-c, steps-v, steps-e) run with ``--mode validate``: its replay takes the
    validate steps again, every request answered from the record, nothing differs."""
    use_fake_model(alpha23, model)
    prd = "_bmad/bmm/workflows/2-plan-workflows/prd/workflow.md"
    recorded = record(capsys, alpha23, prd, "--mode", "validate")
    sent = len(model.requests)
    assert requested_steps(model)[0].startswith("step-v-")

    code, out = cli(capsys, alpha23, "replay", recorded, "--against", prd)
    assert code == 0, out
    assert len(model.requests) == sent, requested_steps(model, sent)
    assert "model requests changed: none" in out
