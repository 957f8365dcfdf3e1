"""Closeout (``closeout:`` in config/sprint.yaml): after each story, a push to a git remote (a local bare
repository here) and a command per story whose output and exit code are journaled; a failure is tried again,
then a person decides — never dropped without a word."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sprint_kit import BMAD, add_config, git, make_project

from stepline.interfaces.cli._app import run_cli

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

SCRIPT = """\
import sys
from pathlib import Path
story, commit, fails = sys.argv[1], sys.argv[2], Path(sys.argv[3])
left = int(fails.read_text()) if fails.is_file() else 0
print(f"closing out {story} at {commit[:12]}")
with open(sys.argv[4], "a") as log:
    log.write(f"{story} {commit}\\n")
if left:
    fails.write_text(str(left - 1))
    print("CI is red", file=sys.stderr)
    sys.exit(3)
"""


def _project(tmp_path: Path, fails: int, *, isolation: str = "none") -> tuple[Path, Path, Path]:
    root = make_project(tmp_path / "calc", isolation=isolation)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    script, log, counter = tmp_path / "closeout.py", tmp_path / "closeout.log", tmp_path / "fails"
    script.write_text(SCRIPT)
    counter.write_text(str(fails))
    add_config(root, f"closeout:\n  remote: {remote}\n  command: '{sys.executable} {script} {{story}} {{commit}} "
               f"{counter} {log}'\n  retries: 1\n  retry_wait_seconds: 0\n", "closeout")
    return root, remote, log


def test_each_story_is_pushed_and_its_command_journaled_a_failure_tried_again(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, remote, log = _project(tmp_path, fails=1)
    assert run_cli(["sprint", "run", "--max-stories", "2", "-C", str(root), "--json", "-q"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["outcome"] for r in results] == ["committed", "committed"]
    assert git(remote, "rev-parse", "main").strip() == git(root, "rev-parse", "HEAD").strip()
    lines = log.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["1-1-add", "1-1-add", "1-2-sub"]  # the red CI tried again
    journal = (root / ".stepline" / "runs" / results[0]["run_id"] / "journal.jsonl").read_text()
    assert "CI is red" in journal and '"exit":3' in journal and "closing out 1-1-add" in journal
    assert '"step_id":"closeout"' in journal and '"choice":"closed-out"' in journal


def test_a_closeout_that_keeps_failing_waits_for_a_person_who_may_skip_it(
        tmp_path: Path, agent_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, remote, log = _project(tmp_path, fails=5, isolation="worktree")
    assert run_cli(["sprint", "run", "--max-stories", "1", "-C", str(root), "--json", "-q"]) == 9  # blocked
    results = json.loads(capsys.readouterr().out)
    assert results[0]["outcome"] == "blocked" and "closeout failed" in results[0]["summary"]
    assert git(root, "log", "-1", "--format=%(trailers:key=Stepline-Story,valueonly)").strip() == "1-1-add"
    assert git(remote, "rev-parse", "main").strip() == git(root, "rev-parse", "HEAD").strip()  # pushed; CI red
    assert run_cli(["answer", results[0]["run_id"], "skip", "-C", str(root)]) == 0
    assert run_cli(["sprint", "resume", "-C", str(root), "--json", "-q"]) == 0
    assert len(log.read_text().splitlines()) == 2  # tried twice, then a person said skip: not run again
    journal = (root / ".stepline" / "runs" / results[0]["run_id"] / "journal.jsonl").read_text()
    assert "closeout skipped by a person" in journal
