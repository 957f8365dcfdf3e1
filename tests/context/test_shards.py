"""Shards: markdown split at headings, a shards file, code files; tiers made deterministically within size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepline.context import (
    build_shards_schema,
    estimate_tokens,
    load_shards_file,
    shards_from_markdown,
    shards_from_text_file,
    shards_schema,
)
from stepline.errors import ConfigError

GUIDE = """---
title: ignored front matter
---
# Guide

Stepline runs workflows. It keeps a journal of every event.

## Install

Use pip to install it. Python 3.11 is required.

```bash
# not a heading: a comment in a fenced block
pip install stepline
```

### On Linux

Nothing special is needed.

## Retries

A failing step is retried with exponential backoff. The delay doubles each time.
"""


def test_markdown_is_split_at_headings_with_title_paths_and_fences_kept_whole() -> None:
    """Each heading up to the split level starts a shard titled by its heading path; a '#' line in a fenced block
    is code, and the front matter is left out."""
    shards = shards_from_markdown(GUIDE, "docs/guide.md")
    assert [s.title for s in shards] == ["Guide", "Guide › Install", "Guide › Install › On Linux", "Guide › Retries"]
    assert [s.id for s in shards] == ["docs/guide.md#guide", "docs/guide.md#install", "docs/guide.md#on-linux",
                                      "docs/guide.md#retries"]
    install = shards[1]
    assert "# not a heading" in install.full and "pip install stepline" in install.full
    assert all("front matter" not in s.full for s in shards)
    assert {s.source for s in shards} == {"docs/guide.md"}


def test_split_level_keeps_deeper_headings_inside_their_section_as_its_outline() -> None:
    """With split_level 2 the level-3 heading stays in its section, and the micro tier outlines it."""
    shards = shards_from_markdown(GUIDE, "docs/guide.md", split_level=2)
    assert [s.title for s in shards] == ["Guide", "Guide › Install", "Guide › Retries"]
    assert "# On Linux" in shards[1].micro and "Use pip to install it." in shards[1].micro


def test_tiers_are_first_sentences_outlines_and_the_text_within_their_sizes() -> None:
    """nano: title + first sentence (≤ 50 tokens); micro: first sentence of each paragraph (≤ 500); full: the text,
    never cut below 2000 tokens."""
    paragraphs = "\n\n".join(f"Paragraph {i} starts here. " + "filler words " * 60 for i in range(40))
    text = f"# Big\n\n{paragraphs}\n"
    (big,) = shards_from_markdown(text, "big.md", full_tokens=2000)
    assert big.nano.startswith("Big: Paragraph 0 starts here.") and estimate_tokens(big.nano) <= 50
    assert "- Paragraph 1 starts here." in big.micro and "filler" not in big.micro
    assert estimate_tokens(big.micro) <= 500
    assert 2000 - 1 <= estimate_tokens(big.full) <= 2000 and big.full.endswith("…")
    (small,) = shards_from_markdown("# Small\n\nShort. Text.\n", "s.md")
    assert small.full == "# Small\n\nShort. Text." and small.nano == "Small: Short."


def test_shards_are_the_same_for_the_same_text() -> None:
    """No model and no randomness: the same document gives the same shards."""
    assert shards_from_markdown(GUIDE, "g.md") == shards_from_markdown(GUIDE, "g.md")


def test_a_code_file_is_one_shard_outlined_by_its_declarations() -> None:
    """A file that is not markdown: its micro tier lists its def/class lines."""
    code = "import os\n\n\nclass Store:\n    def get(self, key):\n        return 1\n\n\ndef helper():\n    pass\n"
    (shard,) = shards_from_text_file(code, "src/store.py")
    assert shard.nano == "src/store.py: import os"
    assert shard.micro.splitlines() == ["src/store.py", "class Store:", "    def get(self, key):", "def helper():"]


def test_a_shards_file_gives_shards_with_hand_written_or_made_tiers(project: Path) -> None:
    """Inline text or a project file; hand-written nano kept, the others made."""
    (project / "notes.md").write_text("# Notes\n\nThe deploy runs on Fridays. Never on Mondays.\n", encoding="utf-8")
    path = project / "shards.yaml"
    path.write_text("shards:\n"
                    "  - id: auth\n    title: Authentication\n    tags: [login]\n    nano: Tokens expire.\n"
                    "    text: Sessions use signed tokens. They expire after an hour.\n"
                    "  - id: deploy\n    path: notes.md\n", encoding="utf-8")
    shards, sources = load_shards_file(path, project)
    auth, deploy = shards
    assert auth.nano == "Tokens expire." and auth.micro.startswith("Authentication\n- Sessions use signed tokens.")
    assert auth.tags == ("login",) and auth.source == "shards.yaml"
    assert deploy.source == "notes.md" and deploy.nano == "deploy: The deploy runs on Fridays."
    assert sources == [path, project / "notes.md"]


@pytest.mark.parametrize(("body", "line", "words"), [
    ("shards:\n  - id: a\n    text: x\n    colour: red\n", 4, "Extra inputs are not permitted"),
    ("shards:\n  - id: a\n  - id: a\n    text: y\n", 2, "neither text nor path"),
    ("shards:\n  - id: a\n    text: x\n  - id: a\n    text: y\n", 4, "used twice"),
    ("shards:\n  - id: a\n    path: missing.md\n", 2, "not found"),
])
def test_a_bad_shards_file_is_one_config_error_naming_its_line(project: Path, body: str, line: int,
                                                              words: str) -> None:
    """Unknown keys, a shard without text, a duplicate id, a missing file: file:line and what to fix."""
    path = project / "shards.yaml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_shards_file(path, project)
    assert caught.value.line == line and words in caught.value.message


def test_the_shipped_schema_is_the_one_the_model_builds_and_accepts_a_shards_file() -> None:
    """shards.schema.json is generated from the model (regenerate it when the model changes)."""
    import jsonschema

    assert shards_schema() == json.loads(json.dumps(build_shards_schema()))
    jsonschema.validate({"shards": [{"id": "a", "text": "x", "tags": ["t"]}]}, shards_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"shards": [{"title": "no id"}]}, shards_schema())
