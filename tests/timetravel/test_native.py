"""fork / replay / diff on a native workflow: answers, lineage in `show`, runs recorded without blobs, --strict."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fakes import fake_openai
from stepline.engine import Engine, RuntimeConfig
from stepline.interfaces.web import create_app
from stepline.timetravel import prepare_fork, read_run

from .conftest import child_of, cli, record, requested_steps, run_path, tree_bytes, use_fake_model

WORKFLOW = """id: demo
name: Demo
steps:
  - id: one
    outputs: [out/one.md]
    body: "Write part one."
  - id: two
    outputs: [out/two.md]
    body: "Write part two."
  - id: three
    outputs: [out/three.md]
    body: "Write part three."
"""
SCRIPT = """steps:
  one:
    - write_output: {content: "one\\n"}
    - finish: {summary: one}
  two:
    - ask: {question: "Which color?"}
    - write_output: {content: "two\\n"}
    - finish: {summary: two}
  three:
    - set_var: {name: reviewer, value: Ann}
    - write_output: {content: "three\\n"}
    - finish: {summary: three}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "wf.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    return tmp_path.resolve()


def scripted_run(capsys: pytest.CaptureFixture[str], project: Path) -> str:
    """The scripted run, its question answered 'red' by a person (blocked, answered, resumed)."""
    code, out = cli(capsys, project, "run", "wf.yaml", "--script", "script.yaml")
    assert code == 9, out
    run_id = re.search(r"run (run-\S+) blocked", out).group(1)  # type: ignore[union-attr]
    assert cli(capsys, project, "answer", run_id, "red")[0] == 0
    code, out = cli(capsys, project, "resume", run_id)
    assert code == 0, out
    return run_id


def test_fork_with_an_answer_leaves_the_parent_alone_and_show_links_them(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = scripted_run(capsys, project)
    before = tree_bytes(run_path(project, parent))

    code, out = cli(capsys, project, "fork", parent, "--at", "two", "--answer", "blue")
    assert code == 0, out
    assert "removed   out/two.md" in out and "removed   out/three.md" in out
    child = child_of(out)
    assert tree_bytes(run_path(project, parent)) == before
    code, out = cli(capsys, project, "diff", parent, child)
    assert code == 0, out  # the same files: only the answer differs
    assert "ask:two/1/0/1: answered 'red' in A, 'blue' in B" in out

    code, out = cli(capsys, project, "fork", parent, "--at", "three")  # the question is before: answered 'red'
    assert code == 0, out
    again = child_of(out)
    assert "decisions: the same" in cli(capsys, project, "diff", parent, again)[1]

    shown = cli(capsys, project, "show", parent)[1]
    forks = next(line for line in shown.splitlines() if line.startswith("forks: "))
    # listed by run id: two forks made in the same second come in either order
    assert sorted(forks.removeprefix("forks: ").split(", ")) == sorted([f"{child} at step two",
                                                                         f"{again} at step three"]), shown
    assert f"forked from {parent} at step two" in cli(capsys, project, "show", child)[1]


def test_a_fork_starts_with_the_variables_of_its_step(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A variable the parent's later step set is not set where the fork starts (its manifest holds the parent's
    final variables); one set before the step is."""
    parent = scripted_run(capsys, project)
    engine = Engine(project_root=project)
    recorded = read_run(engine, parent)
    assert recorded.run.variables["reviewer"] == "Ann"
    early, _ = prepare_fork(engine, recorded, "two", {"tone": "dry"})
    assert "reviewer" not in engine.load(early).variables and engine.load(early).variables["tone"] == "dry"
    late, _ = prepare_fork(engine, read_run(engine, parent), "three", {})
    assert "reviewer" not in engine.load(late).variables  # step three sets it again when the fork runs it


def test_a_run_recorded_without_blobs(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run an older stepline recorded (no blobs/): a fork works while the files it needs are as recorded, and
    otherwise names the record it cannot read, in one line (exit 6)."""
    parent = scripted_run(capsys, project)
    shutil.rmtree(run_path(project, parent) / "blobs")
    code, out = cli(capsys, project, "fork", parent, "--at", "three")
    assert code == 0, out
    code, out = cli(capsys, project, "diff", parent, child_of(out))
    assert code == 0 and "artifacts: 3 the same, 0 differ" in out, out  # the same versions: no copy needed

    (project / "out" / "two.md").write_text("edited by hand\n", encoding="utf-8")
    code, out = cli(capsys, project, "fork", parent, "--at", "three")
    assert code == 6
    assert re.fullmatch(r"error: \S+/journal\.jsonl:\d+: record \d+ \(ArtifactReady out/two\.md\) has no stored "
                        r"copy of its content: .*\n", out), out
    assert (project / "out" / "two.md").read_text() == "edited by hand\n"  # nothing was changed


def test_fork_at_a_step_the_run_never_started(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = scripted_run(capsys, project)
    code, out = cli(capsys, project, "fork", parent, "--at", "four")
    assert code == 3
    assert out.startswith(f"error: step 'four' never started in run {parent}") and "one, two, three" in out


def test_replay_strict_stops_at_the_changed_request(
        project: Path, model: fake_openai.FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    """An edited step body: --strict stops there without asking the model (exit 8); without it, only that step
    and the artifact it writes differ (exit 12)."""
    use_fake_model(project, model)
    recorded = record(capsys, project, "wf.yaml")
    sent = len(model.requests)
    (project / "wf.yaml").write_text(WORKFLOW.replace("Write part two.", "Write part two, briefly."),
                                     encoding="utf-8")

    code, out = cli(capsys, project, "replay", recorded, "--against", "wf.yaml", "--strict")
    assert code == 8, out
    assert "stopped at step two: its request changed (--strict)" in out
    assert "model requests changed: two" in out and "+Write part two, briefly." in out
    assert len(model.requests) == sent

    code, out = cli(capsys, project, "replay", recorded, "--against", "wf.yaml")
    assert code == 12, out
    assert requested_steps(model, sent) == ["two"]
    assert "2 the same, 1 differ" in out and "+++ B/out/two.md" in out


def test_the_dashboard_links_parent_and_fork(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = scripted_run(capsys, project)
    child = child_of(cli(capsys, project, "fork", parent, "--at", "two", "--answer", "blue")[1])
    token = "test-token-0123456789abcdef"
    with TestClient(create_app(project, RuntimeConfig(), token), base_url="http://127.0.0.1:8765") as client:
        client.headers["Authorization"] = f"Bearer {token}"
        assert client.get(f"/api/runs/{child}").json()["parent_run_id"] == parent
        login = client.post("/login", data={"token": token, "next": "/"},
                            headers={"Origin": "http://127.0.0.1:8765"}, follow_redirects=False)
        assert login.status_code == 303
        page = client.get(f"/runs/{child}").text
        assert f'Forked from <a href="/runs/{parent}">{parent}</a> at step two' in page
        assert f'href="/runs/{child}"' in client.get(f"/runs/{parent}").text
