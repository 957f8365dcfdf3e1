"""Tests for the tolerant frontmatter reader and the key-preserving writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline.errors import NotFoundError
from stepline.formats._frontmatter import (
    read_frontmatter,
    read_frontmatter_file,
    update_frontmatter,
)

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


class TestRead:
    def test_mapping_body_and_lines(self) -> None:
        """A well-formed block gives its mapping, the body after it and the line of every key."""
        fm = read_frontmatter("---\nname: x\nnext: './b.md'\n---\n# Title\n", path="a.md")
        assert fm.present
        assert fm.data == {"name": "x", "next": "./b.md"}
        assert fm.body == "# Title\n"
        assert (fm.start_line, fm.end_line, fm.body_line) == (1, 4, 5)
        assert fm.key_lines == {"name": 2, "next": 3}
        assert fm.diagnostics == []

    def test_no_frontmatter(self) -> None:
        """Text without a leading fence has no frontmatter and is all body."""
        fm = read_frontmatter("# Step\n\nload `./step-02.md`\n")
        assert not fm.present
        assert fm.data == {}
        assert fm.body.startswith("# Step")
        assert fm.body_line == 1

    def test_unterminated_block_is_a_diagnostic(self) -> None:
        """An opening fence that is never closed is reported at line 1, not raised."""
        fm = read_frontmatter("---\nname: x\n# no closing fence\n", path="u.md")
        assert not fm.present
        assert [d.code for d in fm.diagnostics] == ["frontmatter-unterminated"]
        assert fm.diagnostics[0].line == 1

    def test_odd_but_valid_yaml_is_kept(self) -> None:
        """``date: { system-date }`` is valid YAML (a mapping) and must not be reported."""
        fm = read_frontmatter(TEMPLATE)
        assert fm.data["date"] == {"system-date": None}
        assert fm.diagnostics == []

    def test_escaped_quote_is_a_diagnostic_with_line(self) -> None:
        """A ``\\'`` inside single quotes is a YAML error on its line; the other keys still parse."""
        text = "---\nname: 'v-07'\ndescription: 'Ensure FRs don\\'t leak'\nnextStepFile: './v-08.md'\n---\n"
        fm = read_frontmatter(text, path="v07.md")
        assert fm.data["nextStepFile"] == "./v-08.md"
        assert fm.data["description"] == "Ensure FRs don't leak"
        (diag,) = fm.diagnostics
        assert (diag.code, diag.line, diag.path) == ("yaml-syntax", 3, "v07.md")
        assert "description" in diag.message

    def test_unquoted_braces_keep_raw_text(self) -> None:
        """An unquoted ``{x}/file.md`` value is reported and kept as its raw text for variable resolution."""
        text = "---\nname: s\n\noutputFile: {out}/agent-{agent_name}.md\nnext: './n.md'\n---\n"
        fm = read_frontmatter(text, path="s.md")
        assert fm.data["outputFile"] == "{out}/agent-{agent_name}.md"
        assert fm.data["next"] == "./n.md"
        assert [(d.code, d.line) for d in fm.diagnostics] == [("yaml-syntax", 4)]

    def test_broken_flow_list_becomes_items(self) -> None:
        """A flow list with a missing comma is reported and read as the list of its quoted items."""
        text = "---\nsteps: ['./a.md', './b.md' './c.md']\n---\n"
        fm = read_frontmatter(text)
        assert fm.data["steps"] == ["./a.md", "./b.md", "./c.md"]
        assert fm.diagnostics[0].code == "yaml-syntax"

    def test_non_mapping_frontmatter(self) -> None:
        """A block that is a list, not a mapping, is a diagnostic and yields no data."""
        fm = read_frontmatter("---\n- a\n- b\n---\nbody\n")
        assert fm.data == {}
        assert fm.diagnostics[0].code == "frontmatter-not-mapping"

    def test_missing_file(self, tmp_path: Path) -> None:
        """Reading a file that does not exist is a NotFoundError naming it."""
        with pytest.raises(NotFoundError, match=r"nope\.md"):
            read_frontmatter_file(tmp_path / "nope.md")


class TestWrite:
    def test_round_trip_preserves_untouched_text(self) -> None:
        """Updating one key keeps every other line byte for byte, odd YAML and comments included."""
        out = update_frontmatter(TEMPLATE, {"stepsCompleted": [1]})
        assert out == TEMPLATE.replace("stepsCompleted: []", "stepsCompleted: [1]")

    def test_no_change_is_identity(self) -> None:
        """An empty update returns the text unchanged."""
        assert update_frontmatter(TEMPLATE, {}) == TEMPLATE

    def test_new_key_goes_before_closing_fence(self) -> None:
        """A key the document lacks is appended at the end of the block."""
        out = update_frontmatter("---\na: 1\n---\nbody\n", {"inputDocuments": ["docs/x.md"]})
        assert out == "---\na: 1\ninputDocuments: ['docs/x.md']\n---\nbody\n"

    def test_document_without_frontmatter_gets_one(self) -> None:
        """Updating a document without frontmatter creates the block on top."""
        out = update_frontmatter("# Doc\n", {"stepsCompleted": [1]})
        assert out == "---\nstepsCompleted: [1]\n---\n# Doc\n"

    def test_scalars_that_need_quotes(self) -> None:
        """Strings that YAML would misread (``true``, ``a: b``) are quoted; plain names are not."""
        out = update_frontmatter("---\n---\n", {"a": "true", "b": "x: y", "c": "step-01", "d": None})
        data = read_frontmatter(out).data
        assert data == {"a": "true", "b": "x: y", "c": "step-01", "d": None}
        assert "c: step-01\n" in out

