"""TELIS context (SPEC R-C1): before a step's executor runs, the runtime resolves what the step should know —
shards of the project's knowledge retrieved by relevance within a token budget, and a language server's
hover or signature help — and attaches it to the RunStep as ``telis_context``.

This package knows no workflow family and no engine: the engine calls :class:`ContextResolver` (one per run)
with the :class:`TelisRequest` made by :func:`request_for_step`, journals the result and hands it to the
executor, which may show it with :func:`render_context`. Names are loaded on first use: the runtime config
imports only ``_config``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from stepline.context._cache import TtlCache
    from stepline.context._config import TelisConfig, TelisInputRule, TelisRequest, request_for_step
    from stepline.context._fingerprint import fingerprint
    from stepline.context._index import ShardIndex
    from stepline.context._lsp import LspAnswer, LspPool
    from stepline.context._render import render_context
    from stepline.context._resolver import ContextResolver
    from stepline.context._select import Selection, select_within_budget
    from stepline.context._shards import (
        Shard,
        build_shards_schema,
        load_shards_file,
        shards_from_markdown,
        shards_from_text_file,
        shards_schema,
    )
    from stepline.context._tiers import TIERS, Tier
    from stepline.context._tokens import estimate_tokens

__all__ = [
    "TIERS",
    "ContextResolver",
    "LspAnswer",
    "LspPool",
    "Selection",
    "Shard",
    "ShardIndex",
    "TelisConfig",
    "TelisInputRule",
    "TelisRequest",
    "Tier",
    "TtlCache",
    "build_shards_schema",
    "estimate_tokens",
    "fingerprint",
    "load_shards_file",
    "render_context",
    "request_for_step",
    "select_within_budget",
    "shards_from_markdown",
    "shards_from_text_file",
    "shards_schema",
]

_EXPORTS: dict[str, str] = {
    "TIERS": "_tiers",
    "ContextResolver": "_resolver",
    "LspAnswer": "_lsp",
    "LspPool": "_lsp",
    "Selection": "_select",
    "Shard": "_shards",
    "ShardIndex": "_index",
    "TelisConfig": "_config",
    "TelisInputRule": "_config",
    "TelisRequest": "_config",
    "Tier": "_tiers",
    "TtlCache": "_cache",
    "build_shards_schema": "_shards",
    "estimate_tokens": "_tokens",
    "fingerprint": "_fingerprint",
    "load_shards_file": "_shards",
    "render_context": "_render",
    "request_for_step": "_config",
    "select_within_budget": "_select",
    "shards_from_markdown": "_shards",
    "shards_from_text_file": "_shards",
    "shards_schema": "_shards",
}

__getattr__, __dir__ = _lazy_exports("stepline.context", globals(), {k: "." + v for k, v in _EXPORTS.items()})
