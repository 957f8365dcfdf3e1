"""Fixtures for tool tests."""

from __future__ import annotations

import pytest
from tool_test_support import Events


@pytest.fixture
def events() -> Events:
    """A fresh event recorder."""
    return Events()
