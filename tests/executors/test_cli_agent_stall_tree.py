"""The stall watch's view of the agent's folder: what counts as the agent's work."""
from __future__ import annotations

from pathlib import Path

from stepline.executors.cli_agents._process import _tree_state


def test_a_file_the_agent_writes_changes_the_fingerprint(tmp_path: Path) -> None:
    before = _tree_state(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print('hi')\n")
    assert _tree_state(tmp_path) != before


def test_the_runtimes_own_writes_are_not_the_agents_work(tmp_path: Path) -> None:
    # The loop's journal and the agent's output log grow under .stepline/ while the agent runs; an agent that
    # hangs in the project root must still be seen to stall (it was not: every journal line looked like work).
    runs = tmp_path / ".stepline" / "runs" / "r1"
    runs.mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    before = _tree_state(tmp_path)
    (runs / "journal.jsonl").write_text('{"seq": 1}\n')
    (runs / "agent.log").write_text("working\n")
    (tmp_path / ".git" / "index").write_bytes(b"x")
    assert _tree_state(tmp_path) == before
