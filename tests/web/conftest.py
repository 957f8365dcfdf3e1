"""Fixtures of the dashboard tests: a project with runs of every kind, and clients of its app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from web.dashboard_project import TOKEN, Project, build_project, client_for


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """One project for the tests that only read (built once)."""
    return build_project(tmp_path_factory.mktemp("web") / "project")


@pytest.fixture
def fresh(tmp_path: Path) -> Project:
    """A project of this test's own, for tests that decide gates."""
    return build_project(tmp_path / "project")


@pytest.fixture
def anonymous(shared: Project) -> Iterator[TestClient]:
    """A client with no token."""
    with client_for(shared) as client:
        yield client


@pytest.fixture
def api(shared: Project) -> Iterator[TestClient]:
    """A client sending the token as a bearer header."""
    with client_for(shared) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        yield client


