"""The step chain's state in a document's frontmatter: ``stepsCompleted`` grows once per step, ``lastStep``
follows, every other byte of the document stays."""

from __future__ import annotations

import pytest

from stepline.errors import ReaderError
from stepline.formats._frontmatter import read_frontmatter
from stepline.stepchain._state import mark_step_completed

TEMPLATE = """---
stepsCompleted: []
inputDocuments: []
date: { system-date }
author: { user }
# a comment the writer must keep
title: 'Café'
---

# Body {{project_name}}
"""


def test_numbered_steps() -> None:
    """Numbered stepsCompleted grow as a flow list of integers."""
    text = mark_step_completed(mark_step_completed(TEMPLATE, 1), 2)
    assert "stepsCompleted: [1, 2]\n" in text
    assert read_frontmatter(text).data["stepsCompleted"] == [1, 2]


def test_named_steps() -> None:
    """Named stepsCompleted are written quoted and read back as the same names."""
    text = mark_step_completed(TEMPLATE, "step-01-init")
    text = mark_step_completed(text, "step-02-vision")
    assert "stepsCompleted: ['step-01-init', 'step-02-vision']\n" in text
    assert read_frontmatter(text).data["stepsCompleted"] == ["step-01-init", "step-02-vision"]


def test_block_list_style_is_kept() -> None:
    """A block-style list stays block style, with its indentation, and the next key is untouched."""
    text = "---\nstepsCompleted:\n  - 'step-01'\nlastStep: 1\n---\nbody\n"
    out = mark_step_completed(text, "step-02", last_step=2)
    assert out == "---\nstepsCompleted:\n  - 'step-01'\n  - 'step-02'\nlastStep: 2\n---\nbody\n"


def test_marking_twice_is_idempotent() -> None:
    """Completing a step that is already listed changes nothing."""
    once = mark_step_completed(TEMPLATE, 1)
    assert mark_step_completed(once, 1) == once


def test_last_step_follows_when_present() -> None:
    """``lastStep`` is updated when the document already tracks it."""
    text = "---\nstepsCompleted: [1]\nlastStep: 1\n---\n"
    assert "lastStep: 2\n" in mark_step_completed(text, 2)


def test_crlf_is_preserved() -> None:
    """Windows line endings stay Windows line endings."""
    out = mark_step_completed("---\r\nstepsCompleted: []\r\n---\r\nbody\r\n", 1)
    assert out == "---\r\nstepsCompleted: [1]\r\n---\r\nbody\r\n"


def test_broken_steps_completed_is_an_error() -> None:
    """A ``stepsCompleted`` that is not a list cannot be extended and says where it is."""
    with pytest.raises(ReaderError, match=r":2: stepsCompleted is a str"):
        mark_step_completed("---\nstepsCompleted: 'one'\n---\n", 2)
