"""Token counts by a documented estimate, so budgets need no tokenizer download.

The estimate is ``ceil(characters / 4)`` (characters counted as Unicode code points), the rule of thumb the
OpenAI and Anthropic docs give for English text (one token ≈ 4 characters). It errs on the generous side
for code and non-English text; budgets are limits on what is *sent*, so an estimate that is a little high
keeps a step inside its model's window. The same function counts every tier and every budget, so the
relative sizes (nano ≈ 50, micro ≈ 500, full ≥ 2000) hold whatever the model's real tokenizer does.
"""

from __future__ import annotations

__all__ = ["CHARS_PER_TOKEN", "clip_to_tokens", "estimate_tokens"]

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: ``ceil(len(text) / 4)``; 0 for an empty text."""
    return -(-len(text) // CHARS_PER_TOKEN)


def clip_to_tokens(text: str, tokens: int) -> str:
    """``text`` cut to at most ``tokens`` estimated tokens, at a word boundary where there is one, marked ``…``."""
    limit = tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"
