"""A planted fake key never appears in any file under the run directory (R-S1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
