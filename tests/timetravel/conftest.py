"""Fixtures for the time-travel tests: the fake OpenAI server with a model whose writing depends on its prompt,
installed corpus projects (BMAD v6.0.0-alpha.23 micro-file, v6.11.0 skills), a CCW session."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import fake_openai
from fakes.policy import Call, Policy, Request
from stepline.bmad import install_bmad
from stepline.interfaces.cli._app import run_cli
from stepline.store import read_journal

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad"
ALPHA23 = CORPUS / "v6.0.0-alpha.23"
V611 = CORPUS / "v6.11.0"
NOTES = "_bmad-output/model-notes.md"
_STEP = re.compile(r"# Step (?P<step>\S+?):")
CCW_SESSION = Path(__file__).resolve().parents[1] / "fixtures" / "ccw_run" / "WFS-phased"


class PromptEcho(Policy):
    """The fake model; what it writes names the digest of the step's instructions and variables, so a changed
    prompt changes the artifact and an unchanged one reproduces it."""

    def _first(self, request: Request, tools: dict[str, dict[str, Any]]) -> list[Call]:
        calls = super()._first(request, tools)
        seen = request.parts.get("Step instructions", "") + request.parts.get("Variables", "")
        digest = hashlib.sha256(seen.encode("utf-8")).hexdigest()[:12]
        if request.kind == "work" and "write_output" in tools and not any(n == "write_output" for n, _ in calls):
            # a step that names no output file: the model keeps its notes in one file of its own
            calls.append(("write_output", {"content": f"{request.step_id}\n", "path": NOTES, "mode": "append"}))
        return [(name, {**args, "content": f"{args['content']}prompt {digest}\n"}) if name == "write_output"
                else (name, args) for name, args in calls]


@pytest.fixture(scope="session")
def server() -> Iterator[fake_openai.FakeOpenAI]:
    """The fake OpenAI server (127.0.0.1), started once."""
    with fake_openai.FakeOpenAI().running() as running:
        yield running


@pytest.fixture
def model(server: fake_openai.FakeOpenAI) -> fake_openai.FakeOpenAI:
    """The server, its requests cleared, answering as :class:`PromptEcho`."""
    server.reset()
    server.responder = fake_openai.responder(PromptEcho())
    return server


def _installed(factory: pytest.TempPathFactory, source: Path, name: str) -> Path:
    if not source.is_dir():
        pytest.skip(f"{source} is not available")
    project = factory.mktemp(name) / "project"
    install_bmad(source, project, {})
    return project


@pytest.fixture(scope="session")
def _alpha23(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _installed(tmp_path_factory, ALPHA23, "alpha23")


@pytest.fixture(scope="session")
def _v611(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _installed(tmp_path_factory, V611, "v611")


@pytest.fixture
def alpha23(_alpha23: Path, tmp_path: Path) -> Path:
    """A project with BMAD v6.0.0-alpha.23 installed (a fresh copy per test)."""
    return Path(shutil.copytree(_alpha23, tmp_path / "project")).resolve()


@pytest.fixture
def v611(_v611: Path, tmp_path: Path) -> Path:
    """A project with BMAD v6.11.0 installed (a fresh copy per test)."""
    return Path(shutil.copytree(_v611, tmp_path / "project")).resolve()


@pytest.fixture
def ccw_project(tmp_path: Path) -> Path:
    """A project holding a CCW session (``.workflow/active/WFS-phased``)."""
    project = tmp_path / "project"
    shutil.copytree(CCW_SESSION, project / ".workflow" / "active" / CCW_SESSION.name)
    return project.resolve()


def use_fake_model(project: Path, server: fake_openai.FakeOpenAI) -> None:
    """Point the project's openai executor at the fake server (config/runtime.yaml)."""
    (project / "config").mkdir(exist_ok=True)
    (project / "config" / "runtime.yaml").write_text(
        f"executors:\n  openai:\n    base_url: {server.base_url}\n    api_key: test\n    model: fake\n",
        encoding="utf-8")


def cli(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> tuple[int, str]:
    """Run ``stepline ARGS -C PROJECT``; return the exit code and what it printed."""
    capsys.readouterr()
    code = run_cli([*args, "-C", str(project)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def record(capsys: pytest.CaptureFixture[str], project: Path, path: str, *args: str) -> str:
    """Run the workflow at ``path`` with the fake model (#yolo); return the run id."""
    code, out = cli(capsys, project, "run", path, "-e", "openai", "--yolo", *args)
    assert code == 0, out
    return re.search(r"run (run-\S+) completed", out).group(1)  # type: ignore[union-attr]


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run_path(project: Path, run_id: str) -> Path:
    return project / ".stepline" / "runs" / run_id


def records(project: Path, run_id: str) -> list[tuple[Any, ...]]:
    """The run's journal records without their run id (what a fork copies must be equal in all else)."""
    return [(e.seq, e.type, e.time, e.step_id, json.dumps(e.data, sort_keys=True))
            for e in read_journal(run_path(project, run_id) / "journal.jsonl")]


def requested_steps(server: fake_openai.FakeOpenAI, since: int = 0) -> list[str]:
    """The step of each request the fake server received (from the ``# Step <id>:`` header it was sent)."""
    steps = []
    for body in server.requests[since:]:
        # the request's own header, in its first user message (the system text shows the header's shape)
        user = next(m for m in body["messages"] if m["role"] == "user")
        found = _STEP.search(json.dumps(user["content"]).replace("\\n", "\n"))
        assert found, body
        steps.append(found.group("step"))
    return steps


def child_of(out: str) -> str:
    return re.search(r"^fork (run-\S+) of", out, re.M).group(1)  # type: ignore[union-attr]


def first_index(project: Path, run_id: str, step: str) -> int:
    return next(i for i, r in enumerate(records(project, run_id)) if r[3] == step)
