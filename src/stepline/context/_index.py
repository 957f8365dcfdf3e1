"""The retrieval index: SQLite FTS5 (the standard library's sqlite3) ranking shards by BM25.

Each shard is one row: its title (weight 4), its tags (weight 3) and its full text (weight 1), tokenized by
``unicode61`` with Porter stemming, so "retries" finds "retry". A query is the OR of its words; English stop
words ("how", "the", "is") are left out unless the query has no other word (they match nearly every shard,
so they only cost time). A shard's score is FTS5's BM25 negated (higher is more relevant; a shard that shares
no word with the query is not returned at all). Scores are absolute BM25 values, comparable between queries
over the same index, which is what ``telis_min_score`` is compared with. Ties keep the order shards were
added in, so a search is deterministic.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

from stepline.context._shards import Shard

__all__ = ["ShardIndex", "query_words"]

_WORD = re.compile(r"\w+", re.UNICODE)
_WEIGHTS = "4.0, 3.0, 1.0"  # title, tags, body: see the module docstring


_STOP_TEXT = ("a an and are as at be but by can do does for from has have how i if in into is it its may must not "
              "of on or our should so than that the their then there these this those to was we were what when "
              "where which who why will with would you your")
_STOP_WORDS = frozenset(_STOP_TEXT.split())


def query_words(query: str) -> list[str]:
    """The distinct words of ``query``, lowercased, in order, stop words left out (what the index is searched
    with); all of them when the query has nothing else."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        seen.setdefault(word, None)
    words = [word for word in seen if word not in _STOP_WORDS]
    return words or list(seen)


class ShardIndex:
    """An in-memory FTS5 index of shards; build once, search many times."""

    def __init__(self, shards: Iterable[Shard]) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE shard USING fts5(title, tags, body, tokenize='porter unicode61')")
        self.shards: list[Shard] = list(shards)
        with self._db:
            self._db.executemany("INSERT INTO shard(rowid, title, tags, body) VALUES (?, ?, ?, ?)",
                                 ((i, s.title, " ".join(s.tags), s.full) for i, s in enumerate(self.shards)))

    def __len__(self) -> int:
        return len(self.shards)

    def search(self, query: str, *, limit: int, min_score: float = 0.0) -> list[tuple[Shard, float]]:
        """The ``limit`` shards most relevant to ``query`` whose score is at least ``min_score``, best first."""
        words = query_words(query)
        if not words or limit <= 0 or not self.shards:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        rows = self._db.execute(
            f"SELECT rowid, -bm25(shard, {_WEIGHTS}) AS score FROM shard WHERE shard MATCH ? "
            "ORDER BY score DESC, rowid LIMIT ?", (match, limit)).fetchall()
        # Rounded: the score is part of the context's fingerprint, and the last bits of a float are noise.
        return [(self.shards[rowid], round(score, 4)) for rowid, score in rows if round(score, 4) >= min_score]

    def close(self) -> None:
        """Free the index."""
        self._db.close()
