"""Fixtures for the time-travel tests: the fake OpenAI server with a model whose writing depends on its prompt,
installed corpus projects (BMAD v6.0.0-alpha.23 micro-file, v6.11.0 skills), a CCW session."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import fake_openai
from fakes.policy import Call, Policy, Request
from stepline.bmad import install_bmad

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad"
ALPHA23 = CORPUS / "v6.0.0-alpha.23"
V611 = CORPUS / "v6.11.0"
NOTES = "_bmad-output/model-notes.md"
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
