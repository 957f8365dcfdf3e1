"""A file a step wrote before it waited for a person is recorded as the step's artifact when it completes."""

from __future__ import annotations

import json
from pathlib import Path

from stepline.interfaces.cli._app import run_cli

WORKFLOW = """\
id: ask-after-writing
steps:
  - id: draft
    body: Write the draft, then ask whether it may go out.
    outputs: [notes/draft.md]
"""

SCRIPT = """\
steps:
  draft:
    - write_output: {content: "# Draft\\n", mode: replace}
    - ask: {question: "May it go out?", choices: ["yes", "no"]}
    - finish: {summary: asked}
"""


def test_an_output_written_before_a_question_is_an_artifact_after_the_resume(tmp_path: Path) -> None:
    """The step blocks on its question after writing; answered and resumed, artifacts.json names the draft."""
    (tmp_path / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    at = ["-C", str(tmp_path)]
    assert run_cli(["run", "flow.yaml", "--script", "script.yaml", "--non-interactive", "-q", *at]) == 9
    run_id = next((tmp_path / ".stepline" / "runs").iterdir()).name
    assert run_cli(["answer", run_id, "yes", "--by", "ada", *at]) == 0
    assert run_cli(["resume", run_id, "--script", "script.yaml", "-q", *at]) == 0
    artifacts = json.loads((tmp_path / ".stepline" / "runs" / run_id / "artifacts.json").read_text())
    assert [a["path"] for a in artifacts] == ["notes/draft.md"]
