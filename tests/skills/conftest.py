"""Fixtures for the Agent Skills tests: installed projects (the mini fixture module, the v6.11.0 corpus) and an
executor that records what it was handed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stepline.bmad import install_bmad
from stepline.executors import StepRequest, StepSession
from stepline.executors._base import Executor

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "src"
CORPUS_V611 = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.11.0"


@pytest.fixture(scope="session")
def _mini_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("mini") / "project"
    install_bmad(FIXTURE, project, {})
    return project


@pytest.fixture
def mini(_mini_install: Path, tmp_path: Path) -> Path:
    """A project with the mini fixture module installed (a fresh copy per test)."""
    project = tmp_path / "project"
    shutil.copytree(_mini_install, project)
    return project


@pytest.fixture(scope="session")
def _corpus_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not CORPUS_V611.is_dir():
        pytest.skip("shared/corpus/bmad/v6.11.0 is not available")
    project = tmp_path_factory.mktemp("v611") / "project"
    install_bmad(CORPUS_V611, project, {})
    return project


@pytest.fixture
def v611(_corpus_install: Path, tmp_path: Path) -> Path:
    """A project with BMAD v6.11.0 installed by stepline (a fresh copy per test)."""
    project = tmp_path / "project"
    shutil.copytree(_corpus_install, project)
    return project


class Recorder(Executor):
    """Records every request; does the work like dry-run, answers ``decide`` from ``decisions`` (by step id,
    default False) and ``answer`` with the first choice; ``calls`` maps a step id to session calls to make."""

    name = "recorder"
    pure = True

    def __init__(self, decisions: dict[str, bool] | None = None,
                 calls: dict[str, Callable[[StepSession], Any]] | None = None) -> None:
        self.requests: list[StepRequest] = []
        self.decisions = decisions or {}
        self.calls = calls or {}

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        self.requests.append(request)
        if request.kind == "decide":
            value = self.decisions.get(request.step_id.split("@")[0] + ":" + str(request.title.split(" to ")[-1]),
                                       self.decisions.get(request.step_id, False))
            await session.decide(value, "recorded decision")
            return
        if request.kind == "answer":
            await session.finish(choice=(request.choices or ["ok"])[0], summary="answered")
            return
        action = self.calls.get(request.step_id.split("@")[0])
        if action is not None:
            await action(session)
        await session.finish(summary=f"did {request.step_id}")

    def work(self) -> list[StepRequest]:
        """The ``work`` requests, in order."""
        return [r for r in self.requests if r.kind == "work"]
