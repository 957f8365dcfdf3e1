"""Retrieval over docs written here: relevance order, limits, min_score, escalation within a budget, the cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stepline.context import (
    ContextResolver,
    ShardIndex,
    TelisConfig,
    TelisRequest,
    estimate_tokens,
    select_within_budget,
    shards_from_markdown,
)

DOCS = {
    "docs/retries.md": "# Retries\n\nA failing step is retried with exponential backoff. The delay doubles on "
                       "every retry, capped by max_backoff_seconds.\n\n## Jitter\n\nJitter spreads the retries "
                       "of many clients. " + "Backoff keeps servers alive. " * 300 + "\n",
    "docs/gates.md": "# Human gates\n\nA human gate blocks the run until a person approves it. Rejected gates "
                     "fail the step.\n\n## Policy\n\nThe HITL policy names the phases that always block.\n",
    "docs/journal.md": "# Journal\n\nEvery event is appended to journal.jsonl and fsynced. A resumed run folds "
                       "the journal.\n\n## Snapshots\n\nThe manifest is a snapshot of the run.\n",
    "docs/tools.md": "# Tools\n\nTools run in a worker process that is killed on timeout. Risky tools need an "
                     "approval gate.\n",
}


@pytest.fixture
def docs(project: Path) -> Path:
    for rel, text in DOCS.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text, encoding="utf-8")
    return project


def _resolve(project: Path, request: TelisRequest, config: TelisConfig | None = None) -> dict:
    async def go() -> dict:
        resolver = ContextResolver(project, config or TelisConfig())
        try:
            return await resolver.resolve(request)
        finally:
            await resolver.aclose()

    return asyncio.run(go())


def test_the_relevant_shard_ranks_first(docs: Path) -> None:
    """A question about approvals finds the gates doc first; one about backoff the retries doc."""
    context = _resolve(docs, TelisRequest(query="who approves a human gate", shard_limit=3))
    assert context["shards"][0]["id"] == "docs/gates.md#human-gates"
    context = _resolve(docs, TelisRequest(query="exponential backoff delay", shard_limit=3))
    assert context["shards"][0]["id"] == "docs/retries.md#retries"
    assert [s["score"] for s in context["shards"]] == sorted((s["score"] for s in context["shards"]), reverse=True)


def test_shard_limit_and_min_score_filter_the_hits(docs: Path) -> None:
    """shard_limit caps the count; min_score drops the weak hits that would otherwise come."""
    loose = _resolve(docs, TelisRequest(query="the run journal gate", shard_limit=10))
    assert len(loose["shards"]) >= 4
    assert len(_resolve(docs, TelisRequest(query="the run journal gate", shard_limit=2))["shards"]) == 2
    scores = [s["score"] for s in loose["shards"]]
    threshold = (scores[0] + scores[-1]) / 2
    strict = _resolve(docs, TelisRequest(query="the run journal gate", shard_limit=10, min_score=threshold))
    assert strict["shards"] and all(s["score"] >= threshold for s in strict["shards"])
    assert len(strict["shards"]) < len(loose["shards"])
    assert _resolve(docs, TelisRequest(query="zebra quantum", shard_limit=5))["shards"] == []


def test_escalation_raises_tiers_best_first_and_stops_at_the_budget(docs: Path) -> None:
    """A large budget reaches full for every shard; a small one stops where the next tier does not fit, and the
    context never passes its budget."""
    query = "retry backoff jitter"
    rich = _resolve(docs, TelisRequest(query=query, shard_limit=2, budget_tokens=100_000))
    assert rich["phase"] == 3 and rich["stopped"] == "max_phase"
    assert [s["tier"] for s in rich["shards"]] == ["full", "full"]
    full_tokens = sum(s["tokens"] for s in rich["shards"])
    budget = full_tokens - 1
    tight = _resolve(docs, TelisRequest(query=query, shard_limit=2, budget_tokens=budget))
    assert tight["stopped"] == "budget" and tight["tokens"] <= budget
    # The best shard got its full text; the second stayed at micro: raising it did not fit.
    assert [s["tier"] for s in tight["shards"]] == ["full", "micro"] and tight["phase"] == 3
    tiny = _resolve(docs, TelisRequest(query=query, shard_limit=2, budget_tokens=30))
    assert tiny["phase"] <= 1 and tiny["tokens"] <= 30
    assert all(s["tier"] == "nano" for s in tiny["shards"])


def test_max_phase_and_phase_tiers_cap_the_escalation(docs: Path) -> None:
    """max_phase 2 stops at micro; explicit tiers [micro, full] start at micro."""
    capped = _resolve(docs, TelisRequest(query="backoff", shard_limit=2, max_phase=2, budget_tokens=100_000))
    assert capped["phase"] == 2 and {s["tier"] for s in capped["shards"]} == {"micro"}
    custom = _resolve(docs, TelisRequest(query="backoff", shard_limit=1, max_phase=1, phase_tiers=["micro", "full"]))
    assert [s["tier"] for s in custom["shards"]] == ["micro"]


def test_selection_takes_the_best_shards_first_when_not_all_fit() -> None:
    """At phase 1 the shards go in rank order while they fit; the rest is counted as left out."""
    shards = shards_from_markdown("".join(f"# S{i}\n\n" + "word " * 50 + "\n\n" for i in range(5)), "d.md")
    hits = [(shard, float(10 - i)) for i, shard in enumerate(shards)]
    nano = estimate_tokens(shards[0].nano)
    chosen = select_within_budget(hits, ["nano", "micro", "full"], 3, nano * 2 + 1)
    assert [c.shard.title for c in chosen.chosen] == ["S0", "S1"] and chosen.left_out == 3
    assert chosen.stopped == "budget" and chosen.tokens <= nano * 2 + 1


def test_the_index_is_deterministic_and_stems_words() -> None:
    """Same query, same order; 'retries' finds 'retry'."""
    index = ShardIndex(shards_from_markdown(DOCS["docs/retries.md"] + DOCS["docs/gates.md"], "x.md"))
    first = index.search("retries", limit=5)
    assert first == index.search("retries", limit=5) and first and "Retries" in first[0][0].title
    assert index.search("retry", limit=5)


def test_the_context_has_a_fingerprint_of_its_content_and_the_sources_digests(docs: Path) -> None:
    """Same docs, same fingerprint; an edited doc changes the fingerprint and its sha256."""
    request = TelisRequest(query="journal snapshot", shard_limit=2)
    one, two = _resolve(docs, request), _resolve(docs, request)
    assert one["fingerprint"] == two["fingerprint"] and one["fingerprint"].startswith("sha256:")
    assert set(one["sources"]) == {"docs/journal.md"}
    (docs / "docs/journal.md").write_text(DOCS["docs/journal.md"] + "\nMore.\n", encoding="utf-8")
    three = _resolve(docs, request)
    assert three["fingerprint"] != one["fingerprint"]
    assert three["sources"]["docs/journal.md"] != one["sources"]["docs/journal.md"]


def test_the_corpus_is_reused_within_the_ttl_and_rebuilt_after_it_when_a_doc_changed(docs: Path) -> None:
    """Within the TTL an edit is not seen (the cache); after it, the edited doc is re-read."""
    now = [0.0]
    resolver = ContextResolver(docs, TelisConfig(cache_ttl_seconds=10), clock=lambda: now[0])
    request = TelisRequest(query="flamingo", shard_limit=2)

    async def go() -> list[dict]:
        found = [await resolver.resolve(request)]
        (docs / "docs/tools.md").write_text("# Tools\n\nA flamingo tool.\n", encoding="utf-8")
        now[0] = 5.0
        found.append(await resolver.resolve(request))
        now[0] = 11.0
        found.append(await resolver.resolve(request))
        await resolver.aclose()
        return found

    before, cached, after = asyncio.run(go())
    assert before["shards"] == [] and cached["shards"] == []
    assert [s["id"] for s in after["shards"]] == ["docs/tools.md#tools"]


def test_no_docs_is_a_warning_not_a_failure(project: Path) -> None:
    """A query in a project without shards or docs resolves to no shards and says why."""
    context = _resolve(project, TelisRequest(query="anything"))
    assert context["shards"] == [] and "no shards to search" in context["warnings"][0]


def test_a_shards_file_and_the_docs_are_searched_together(docs: Path) -> None:
    """config/shards.yaml is found by default and its shards compete with the docs'."""
    (docs / "config").mkdir()
    (docs / "config" / "shards.yaml").write_text(
        "shards:\n  - id: flags\n    title: Feature flags\n    tags: [toggles]\n    text: Flags are read at start.\n",
        encoding="utf-8")
    context = _resolve(docs, TelisRequest(query="toggles", shard_limit=3))
    assert [s["id"] for s in context["shards"]] == ["flags"]
    assert set(context["sources"]) == {"config/shards.yaml"}


def test_stop_words_are_left_out_of_a_query_unless_it_has_nothing_else() -> None:
    """'how are retries delayed' searches retries and delayed; 'to be or not' searches itself."""
    from stepline.context._index import query_words

    assert query_words("How are the retries delayed?") == ["retries", "delayed"]
    assert query_words("to be or not to be") == ["to", "be", "or", "not"]
