"""`stepline sprint run --backend ray`: the sprint loop's executor calls (the build, each review layer) run on the
loopback cluster of conftest.py, its state — the story's run, the checks, the commit, the board — stays in this
process. The project and the fake agent CLI are the sprint tests' own (tests/sprint/sprint_kit.py)."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'stepline[ray]'): the Ray backend's "
                                        "tests need a local Ray cluster")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sprint"))
from sprint_kit import ARTIFACTS, BMAD, git, make_project  # noqa: E402

from stepline.interfaces.cli._app import run_cli  # noqa: E402
from stepline.store import read_journal  # noqa: E402

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.slow, pytest.mark.corpus,
              pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]


def test_a_sprint_loop_on_the_cluster_commits_its_story(
        tmp_path: Path, ray_cluster: str, ray_cluster_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """One honest story, two review layers: the agent runs on the nodes (it notes its calls in the nodes' log,
    never in this process's), the checks run here, the story is committed once, with its files, and the board
    says done."""
    root = make_project(tmp_path / "calc", layers=2)
    here_log = tmp_path / "agents-here.jsonl"  # what an agent started by this process would write to
    here_log.touch()
    monkeypatch.setenv("FAKE_LOG", str(here_log))
    monkeypatch.setenv("CHECKS_LOG", str(tmp_path / "checks.log"))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    nodes_log = ray_cluster_dir / "agents.jsonl"
    code = run_cli(["sprint", "run", "--story", "1-1", "--backend", "ray", "--ray-address", ray_cluster,
                    "-C", str(root), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    [result] = json.loads(out.out)
    assert (result["key"], result["outcome"]) == ("1-1-add", "committed"), result

    calls = [c for c in map(json.loads, nodes_log.read_text().splitlines()) if c["run"] == result["run_id"]]
    assert Counter((c["stage"], c["layer"]) for c in calls) == Counter(
        {("build", None): 1, ("review", "layer-1"): 1, ("review", "layer-2"): 1})
    assert here_log.read_text() == ""  # no agent ran in this process
    assert (tmp_path / "checks.log").read_text().strip()  # the verify commands ran here, in the project

    trailers = git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)").split()
    assert trailers == ["1-1-add"]
    assert git(root, "show", "--format=", "--name-only", "HEAD").split() == [
        f"{ARTIFACTS}/1-1-add.md", "calc_add.py", "tests/test_add.py"]
    board = (root / ARTIFACTS / "sprint-status.yaml").read_text()
    assert "1-1-add: done" in board and "1-2-sub: ready-for-dev" in board
    journal = read_journal(root / ".stepline" / "runs" / result["run_id"] / "journal.jsonl")
    completed = [e.step_id for e in journal if e.type == "WorkflowStepCompleted"]
    assert completed[:3] == ["baseline", "build", "verify"] and completed[-1] == "advance"


def test_parallel_stories_build_on_the_cluster_and_merge_here(
        tmp_path: Path, ray_cluster: str, ray_cluster_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`-j 2 --backend ray` (issue 31): two stories' builds and reviews on the nodes, their merges here, one after
    the other, each story committed once on the integration branch."""
    root = make_project(tmp_path / "calc", layers=1, isolation="worktree")
    here_log = tmp_path / "agents-here.jsonl"
    here_log.touch()
    monkeypatch.setenv("FAKE_LOG", str(here_log))
    monkeypatch.setenv("CHECKS_LOG", str(tmp_path / "checks.log"))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    code = run_cli(["sprint", "run", "-j", "2", "--max-stories", "2", "--backend", "ray", "--ray-address",
                    ray_cluster, "-C", str(root), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    results = json.loads(out.out)
    assert sorted((r["key"], r["outcome"]) for r in results) == [("1-1-add", "committed"), ("1-2-sub", "committed")]
    runs = {r["run_id"] for r in results}
    calls = [c for c in map(json.loads, (ray_cluster_dir / "agents.jsonl").read_text().splitlines())
             if c["run"] in runs]
    assert Counter(c["stage"] for c in calls) == Counter({"build": 2, "review": 2})
    assert here_log.read_text() == ""  # no agent ran in this process
    trailers = git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)").split()
    assert Counter(trailers) == Counter({"1-1-add": 1, "1-2-sub": 1})
    assert git(root, "rev-list", "--count", "--merges", "HEAD").strip() == "0"
