"""Fixtures for the hostile-input tests: a project with the mini skills module installed."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepline.bmad import install_bmad

SKILLS = Path(__file__).resolve().parents[1] / "skills" / "fixtures" / "src"


@pytest.fixture(scope="session")
def _mini_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("mini") / "project"
    install_bmad(SKILLS, project, {})
    return project


@pytest.fixture
def mini(_mini_install: Path, tmp_path: Path) -> Iterator[Path]:
    """A project with the mini skills module installed (its skill ``_bmad/mini/tiny-build``), a fresh copy."""
    project = tmp_path / "project"
    shutil.copytree(_mini_install, project)
    yield project
