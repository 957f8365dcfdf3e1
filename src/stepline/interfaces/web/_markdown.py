"""Markdown to HTML for artifacts and task summaries, safe to put in a page.

markdown-it-py (CommonMark, with GFM tables and strikethrough) with raw HTML turned off: an ``<script>`` in a
document is shown as text, never run, and its link validator refuses ``javascript:``, ``vbscript:``, ``file:``
and ``data:`` URLs (except images).
"""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup

__all__ = ["render_markdown"]


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
        ["table", "strikethrough"])


def render_markdown(text: str) -> Markup:
    """``text`` (Markdown) as HTML; raw HTML in it is escaped."""
    return Markup(_parser().render(text))  # html is off: the parser has escaped every raw tag
