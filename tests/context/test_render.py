"""A context as a prompt shows it: shards best first at their tiers, the server's answer, warnings."""

from __future__ import annotations

from stepline.context import render_context


def test_a_context_renders_shards_the_signature_and_warnings() -> None:
    """Each shard under its title and source; a signature with its documentation and parameters; warnings."""
    context = {
        "fingerprint": "sha256:" + "ab" * 32, "phase": 2, "tokens": 120,
        "request": {"query": "area", "budget_tokens": 500},
        "shards": [{"title": "Shapes › Rectangles", "source": "docs/shapes.md", "tier": "micro", "score": 2.5,
                    "text": "Shapes › Rectangles\n- A rectangle's area is width times height."}],
        "lsp": {"method": "signatureHelp", "document": "geometry.py", "line": 5, "character": 11, "server": "pylsp",
                "result": {"signatures": [{"label": "area(width, height)", "documentation": "Area.\n\nIn m².",
                                           "parameters": [{"label": "width", "documentation": "metres"},
                                                          {"label": "height", "documentation": ""}]}]}},
        "warnings": ["language server 'x' for yaml is not installed"],
    }
    text = render_context(context)
    assert "1 shard(s), phase 2, 120 of 500 tokens." in text and "Query: area" in text
    assert "### Shapes › Rectangles (docs/shapes.md; micro, score 2.5)" in text
    assert "### signatureHelp at geometry.py:5:11 (pylsp)" in text
    assert "- `area(width, height)`\n  Area.\n\n  In m².\n  - `width`: metres\n  - `height`" in text
    assert text.endswith("Warnings:\n- language server 'x' for yaml is not installed")
    assert render_context(None) == ""
