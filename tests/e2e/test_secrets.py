"""A planted fake key never appears in any file under the run directory (R-S1); one a step writes into its own
output file is left there, and the user is told which file holds which kind (issue 14)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from stepline import Engine
from stepline.engine import RuntimeConfig
from stepline.families import load_workflow

FAKE_KEY = "sk-proj-4f9XyZ8kLmN2pQ7rS3tUvW1x"
FAKE_GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_planted_secrets_are_redacted_everywhere_in_the_run_directory(project: Path) -> None:
    """Secrets in variables, step bodies, set_var values, answers, tool args and summaries are all redacted."""
    workflow = {"id": "leaky", "variables": {"deploy_key": FAKE_KEY},
                "steps": [
                    {"id": "one", "body": f"Use the token {FAKE_GITHUB} to deploy.", "outputs": ["notes.md"],
                     "tools": [{"name": "getCurrentTime", "args": {"timezone": "UTC"}}]},
                    {"id": "two", "body": "Ask for the key."},
                ]}
    (project / "flow.yaml").write_text(yaml.safe_dump(workflow), encoding="utf-8")
    script = {"steps": {
        "one": [{"set_var": {"name": "api_key", "value": FAKE_KEY}},
                {"write_output": {"content": f"# notes\napi_key={FAKE_KEY}\n"}},
                {"call_tool": {"name": "getCurrentTime", "args": {"timezone": "UTC"}}},
                {"finish": {"summary": f"used {FAKE_GITHUB}"}}],
        "two": [{"ask": {"question": f"Is {FAKE_KEY} right?"}}, {"finish": {"summary": "asked"}}],
    }}
    (project / "script.yaml").write_text(yaml.safe_dump(script), encoding="utf-8")
    engine = Engine(project_root=project, executor="scripted", mode="yolo",
                    executor_options={"script": str(project / "script.yaml")}, config=RuntimeConfig())
    run = asyncio.run(engine.start(load_workflow(project / "flow.yaml"), {"cli_var": FAKE_GITHUB}))
    assert run.status.value == "completed"
    run_dir = engine.store.root / run.run_id
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"journal.jsonl", "manifest.json", "timeline.json", "tool_results.json"}
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert FAKE_KEY not in text and FAKE_GITHUB not in text, path.name
    assert "[REDACTED:openai]" in (run_dir / "journal.jsonl").read_text()
    # The step's own output file is the user's document, written as the executor produced it.
    assert FAKE_KEY in (project / "notes.md").read_text()


def test_a_question_quoting_a_secret_is_redacted_in_gates_json(project: Path) -> None:
    """A blocked question that quotes a key is recorded in gates.json without it."""
    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "q", "steps": [{"id": "s"}]}), encoding="utf-8")
    script = {"steps": {"s": [{"ask": {"question": f"Rotate {FAKE_KEY}?"}}, {"finish": {}}]}}
    (project / "script.yaml").write_text(yaml.safe_dump(script), encoding="utf-8")
    engine = Engine(project_root=project, executor="scripted", mode="non-interactive",
                    executor_options={"script": str(project / "script.yaml")})
    run = asyncio.run(engine.start(load_workflow(project / "flow.yaml")))
    assert run.status.value == "blocked"
    gates = (engine.store.root / run.run_id / "gates.json").read_text()
    assert "Rotate [REDACTED:openai]?" in gates and FAKE_KEY not in gates


FAKE_AWS = "AKIA" + "Q2W3E4R5T6Y7U8I9"


def _leaky_project(project: Path, mode: str | None = None) -> None:
    """Two steps that write planted keys into the files they produce (the executor's doing, not stepline's)."""
    workflow = {"id": "leaky-files", "steps": [{"id": "one", "outputs": ["notes.md"]},
                                               {"id": "two", "outputs": ["keys/aws.txt"]}]}
    (project / "flow.yaml").write_text(yaml.safe_dump(workflow), encoding="utf-8")
    script = {"steps": {
        "one": [{"write_output": {"content": f"# notes\nthe key is {FAKE_KEY}\n"}}, {"finish": {"summary": "one"}}],
        "two": [{"write_output": {"content": f"{FAKE_AWS}\n{FAKE_KEY}\n"}}, {"finish": {"summary": "two"}}],
    }}
    (project / "script.yaml").write_text(yaml.safe_dump(script), encoding="utf-8")
    if mode is not None:
        (project / "config").mkdir()
        (project / "config" / "runtime.yaml").write_text(f"guardrails:\n  secrets_in_artifacts: {mode}\n")


def _no_secret_in(*texts: str) -> None:
    for text in texts:
        assert FAKE_KEY not in text and FAKE_AWS not in text


def _no_secret_under(folder: Path) -> None:
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        _no_secret_in(path.read_text(encoding="utf-8", errors="replace"))


def test_a_secret_in_an_artifact_is_named_by_file_and_kind_in_run_and_show(
        project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """By default (warn) the run completes, the files keep what the step wrote, and the user is told which file
    holds which kind: in the run's summary, its --json, `stepline show` and `status`, never with the secret."""
    from stepline.interfaces.cli._app import run_cli

    monkeypatch.setenv("COLUMNS", "200")
    _leaky_project(project)
    assert run_cli(["run", "flow.yaml", "--script", "script.yaml", "-C", str(project)]) == 0
    run_out = capsys.readouterr()
    assert "NOT redacted" in run_out.out
    assert "notes.md: 1 openai secret (step one)" in run_out.out
    assert "keys/aws.txt: 1 aws secret, 1 openai secret (step two)" in run_out.out
    assert FAKE_KEY in (project / "notes.md").read_text() and FAKE_AWS in (project / "keys" / "aws.txt").read_text()

    run_id = next((project / ".stepline" / "runs").iterdir()).name
    assert run_cli(["show", run_id, "-C", str(project)]) == 0
    show_out = capsys.readouterr()
    assert "notes.md: 1 openai secret (step one)" in show_out.out
    assert "keys/aws.txt: 1 aws secret, 1 openai secret (step two)" in show_out.out
    assert run_cli(["status", run_id, "-C", str(project), "--json"]) == 0
    status_out = capsys.readouterr()
    assert json.loads(status_out.out)["secrets_in_artifacts"] == [
        {"step_id": "one", "path": "notes.md", "kinds": {"openai": 1}, "redacted": False, "blocked": False},
        {"step_id": "two", "path": "keys/aws.txt", "kinds": {"aws": 1, "openai": 1}, "redacted": False,
         "blocked": False}]
    _no_secret_in(run_out.out, run_out.err, show_out.out, show_out.err, status_out.out)
    _no_secret_under(project / ".stepline")


def test_the_step_report_says_the_artifact_was_not_redacted(project: Path) -> None:
    """The step's output guardrail report: failed, not blocking, 'NOT redacted' per file, never 'found, redacted'."""
    _leaky_project(project)
    engine = Engine(project_root=project, executor="scripted", mode="yolo",
                    executor_options={"script": str(project / "script.yaml")}, config=RuntimeConfig())
    run = asyncio.run(engine.start(load_workflow(project / "flow.yaml")))
    assert run.status.value == "completed"
    [report] = [g for g in run.steps["two"].guardrails if g["guardrail"] == "secrets" and g["stage"] == "output"]
    assert report["passed"] is False and report["blocking"] is False
    assert report["artifacts"] == {"keys/aws.txt": {"aws": 1, "openai": 1}}
    assert report["details"] == ["keys/aws.txt holds 1 aws secret, 1 openai secret, NOT redacted: the file keeps "
                                 "what the step wrote (guardrails.secrets_in_artifacts: warn)"]
    assert "found, redacted" not in json.dumps(run.steps["one"].guardrails)
    reloaded = engine.load(engine.store.open(run.run_id))  # the same report after a fold of the journal
    assert reloaded.steps["two"].guardrails == run.steps["two"].guardrails


def test_with_the_switch_on_block_the_step_fails_naming_file_and_kind(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`guardrails.secrets_in_artifacts: block`: the first leaky step fails for good (no retry), its error names
    the file and the kind, the next step never runs, and no output or run file holds the secret."""
    from stepline.interfaces.cli._app import run_cli

    _leaky_project(project, mode="block")
    assert run_cli(["run", "flow.yaml", "--script", "script.yaml", "-C", str(project), "-q"]) == 8
    out = capsys.readouterr()
    assert "notes.md holds 1 openai secret, NOT redacted" in " ".join(out.out.split())
    assert "the step fails (guardrails.secrets_in_artifacts: block)" in " ".join(out.out.split())
    run_id = next((project / ".stepline" / "runs").iterdir()).name
    assert run_cli(["status", run_id, "-C", str(project), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    one, two = status["steps"]
    assert one["status"] == "failed" and one["attempts"] == 1 and two["status"] == "pending"
    assert "notes.md holds 1 openai secret" in one["error"]
    assert status["secrets_in_artifacts"][0]["blocked"] is True
    assert run_cli(["show", run_id, "-C", str(project)]) == 0
    show = capsys.readouterr()
    assert "notes.md: 1 openai secret (step one; the step failed)" in show.out
    _no_secret_in(out.out, out.err, show.out, show.err, json.dumps(status))
    _no_secret_under(project / ".stepline")
