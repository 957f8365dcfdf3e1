"""Shared fixtures: a scratch project, native workflow writers, the corpus location, the prompt-economy bench."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from fakes.fake_anthropic import FakeAnthropic
from fakes.fake_gemini import FakeGemini
from fakes.fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def prompt_economy() -> ModuleType:
    """bench/prompt_economy.py as a module: its simulated prompt-run, and its count of what a provider serves from
    its cache (the one the tests of the prompt economy use too)."""
    spec = importlib.util.spec_from_file_location("prompt_economy_under_test", REPO / "bench" / "prompt_economy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project folder."""
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
def write_workflow(project: Path) -> Callable[..., Path]:
    """Write a native workflow file into the project and return its path."""

    def write(steps: list[dict[str, Any]], name: str = "flow.yaml", **top: Any) -> Path:
        path = project / name
        path.write_text(yaml.safe_dump({"id": top.pop("id", "flow"), **top, "steps": steps}, sort_keys=False),
                        encoding="utf-8")
        return path

    return write


@pytest.fixture
def write_script(project: Path) -> Callable[[dict[str, Any]], Path]:
    """Write a scripted-executor script into the project and return its path."""

    def write(steps: dict[str, Any], **top: Any) -> Path:
        path = project / "script.yaml"
        path.write_text(yaml.safe_dump({**top, "steps": steps}, sort_keys=False), encoding="utf-8")
        return path

    return write


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A fake Anthropic Messages server on 127.0.0.1 for the test; set its ``responder`` (see tests/fakes/agents.py
    for pointing the real ``claude`` at it)."""
    with FakeAnthropic().running() as server:
        yield server


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A fake OpenAI server (Chat Completions and Responses) on 127.0.0.1 for the test; set its ``responder``."""
    with FakeOpenAI().running() as server:
        yield server


@pytest.fixture
def fake_gemini() -> Iterator[FakeGemini]:
    """A fake Gemini API server on 127.0.0.1 for the test; set its ``responder``."""
    with FakeGemini().running() as server:
        yield server
