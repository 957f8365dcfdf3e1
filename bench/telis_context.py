"""TELIS context over a generated 1,000-document project: index build time and warm per-step latency.

The project is made here, deterministically (seeded): ``--docs`` markdown documents under ``docs/``, each a
title and 3-6 sections of 2-4 paragraphs (≈4 KB a document), plus a shards file of 50 shards. Words are drawn
as prose has them (Zipf over ``--vocabulary`` words, 5,000 by default, English's function words first);
``--vocabulary 90`` draws ~90 domain words evenly, so every word is in nearly every document: the worst case,
since BM25 scores every match. Figures, all from this one invocation:

* the baseline: reading every document's bytes (the I/O any index must do);
* the index build: the first resolution of a step (globbing, reading, splitting into shards at three tiers,
  hashing, FTS5 insertion), and its ratio to the baseline;
* warm per-step resolution: ``ContextResolver.resolve`` for ``--queries`` different queries after the build
  (p50, p95, max);
* per step in a run: a ``--steps``-step native workflow with a ``telis_query`` on every step against the same
  workflow without one (dry-run executor): the median time from a step's start to its completion, the first
  step of the run with context left out (it builds the run's index); the difference is what TELIS adds to a
  step (resolution, journaling the context, handing it to the executor).

Targets (issue 18): index < 2 s, per step < 50 ms warm.

Usage: python bench/telis_context.py [--docs 1000] [--queries 200] [--steps 200] [--vocabulary 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_VOCABULARY = ("journal snapshot resume retry backoff jitter gate approval person policy phase workflow step executor "
         "model prompt token budget shard tier index query score drift fingerprint server hover signature "
         "deploy release branch commit review story epic sprint backlog acceptance criteria test coverage "
         "database schema migration table column index cache ttl latency throughput queue worker process "
         "timeout signal crash recovery durable atomic rename fsync disk storage folder file path secret "
         "redaction guardrail validation template section output artifact evidence claim source reliability "
         "congruence weakest link expiry dashboard session task wave dependency graph concurrency lock")
WORDS = _VOCABULARY.split()


#: English's most frequent words, which head any prose's ranking (a query drops them: see stepline.context._index).
_FUNCTION_TEXT = "the of and to a in is that for it as with was on be by this are from or at an which have not"
_FUNCTION = _FUNCTION_TEXT.split()


class Vocabulary:
    """Words drawn as prose has them (Zipf: the word of rank r is drawn with weight 1/r): English's function
    words first, then the domain words above among made-up ones, at random ranks, ``size`` in all.
    ``size`` = len(WORDS) draws the domain words alone, evenly: every word in nearly every document, the
    worst case for BM25, which scores every match."""

    def __init__(self, size: int, seed: int = 3) -> None:
        rng = random.Random(seed)
        made = [f"{rng.choice('bcdfghklmnprstvz')}{rng.choice('aeiou')}{i:x}{rng.choice('aeiou')}"
                for i in range(max(0, size - len(WORDS)))]
        self.words = list(WORDS) + made
        rng.shuffle(self.words)
        even = size <= len(WORDS)
        if not even:
            self.words = _FUNCTION + self.words
        self.weights = [1.0] * len(self.words) if even else [1.0 / (rank + 1) for rank in range(len(self.words))]
        total = 0.0
        self.cumulative = []
        for weight in self.weights:
            total += weight
            self.cumulative.append(total)

    def draw(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cumulative, k=k)


def sentence(rng: random.Random, vocabulary: Vocabulary) -> str:
    return " ".join(vocabulary.draw(rng, rng.randint(8, 18))).capitalize() + "."


def generate(root: Path, docs: int, vocabulary: Vocabulary, seed: int = 18) -> None:
    """Write ``docs`` markdown documents and a 50-shard shards file under ``root``."""
    rng = random.Random(seed)
    (root / "docs").mkdir(parents=True)
    for i in range(docs):
        topic = " ".join(vocabulary.draw(rng, 2))
        lines = [f"# Document {i}: {topic}", "", " ".join(sentence(rng, vocabulary) for _ in range(3)), ""]
        for s in range(rng.randint(3, 6)):
            lines += [f"## {vocabulary.draw(rng, 1)[0].capitalize()} {s}", ""]
            for _ in range(rng.randint(2, 4)):
                lines += [" ".join(sentence(rng, vocabulary) for _ in range(rng.randint(2, 4))), ""]
        folder = root / "docs" / f"area-{i % 20:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"doc-{i:04d}.md").write_text("\n".join(lines), encoding="utf-8")
    (root / "config").mkdir()
    entries = "".join(f"  - id: rule-{k}\n    title: Rule {k} {rng.choice(WORDS)}\n    tags: [{rng.choice(WORDS)}]\n"
                      f"    text: {sentence(rng, vocabulary)} {sentence(rng, vocabulary)}\n" for k in range(50))
    (root / "config" / "shards.yaml").write_text("shards:\n" + entries, encoding="utf-8")


def queries(n: int, vocabulary: Vocabulary, seed: int = 7) -> list[str]:
    """Queries of 2-5 words drawn as the documents' words are (common words in them too, as people write)."""
    rng = random.Random(seed)
    return [" ".join(vocabulary.draw(rng, rng.randint(2, 5))) for _ in range(n)]


async def measure_resolver(root: Path, n_queries: int, vocabulary: Vocabulary) -> dict[str, float]:
    from stepline.context import ContextResolver, TelisConfig, TelisRequest

    resolver = ContextResolver(root, TelisConfig(cache_ttl_seconds=300))
    start = time.perf_counter()
    first = await resolver.resolve(TelisRequest(query=" ".join(WORDS[:3] + vocabulary.words[:3])))
    build = time.perf_counter() - start
    assert first["shards"], "the generated project gave no shards"
    timings = []
    for query in queries(n_queries, vocabulary):
        start = time.perf_counter()
        await resolver.resolve(TelisRequest(query=query, shard_limit=5, budget_tokens=4000))
        timings.append(time.perf_counter() - start)
    shards = len(resolver._corpus.index) if resolver._corpus else 0  # a figure for the report
    await resolver.aclose()
    timings.sort()
    return {"build": build, "p50": statistics.median(timings), "p95": timings[int(len(timings) * 0.95) - 1],
            "max": timings[-1], "shards": shards}


def run_workflow(root: Path, steps: int, with_context: bool, vocabulary: Vocabulary) -> tuple[float, list[float]]:
    import yaml

    from stepline import Engine
    from stepline.families import load_workflow, register_drivers

    register_drivers()
    qs = queries(steps, vocabulary, seed=11)
    spec = [{"id": f"s{i:03d}", "name": f"Step {i}", "body": "Do it.",
             **({"inputs": {"telis_query": qs[i]}} if with_context else {})} for i in range(steps)]
    name = "with.yaml" if with_context else "without.yaml"
    (root / name).write_text(yaml.safe_dump({"id": name.split(".")[0], "steps": spec}), encoding="utf-8")
    workflow = load_workflow(root / name, project_root=root)
    started: dict[str, float] = {}
    durations: list[float] = []

    def listen(event: Any) -> None:  # each step's time, from its start to its completion
        if event.type == "WorkflowStepStarted":
            started[event.step_id] = time.perf_counter()
        elif event.type == "WorkflowStepCompleted":
            durations.append(time.perf_counter() - started[event.step_id])

    engine = Engine(project_root=root, executor="dry-run", mode="yolo", listeners=[listen])
    start = time.perf_counter()
    run = asyncio.run(engine.start(workflow))
    elapsed = time.perf_counter() - start
    assert run.status.value == "completed", run.error
    return elapsed, durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--vocabulary", type=int, default=5000,
                        help=f"distinct words, drawn Zipf-like; {len(WORDS)} or less: the domain words alone, evenly "
                             "(every word in nearly every document: the worst case)")
    args = parser.parse_args()
    vocabulary = Vocabulary(args.vocabulary)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        generate(root, args.docs, vocabulary)
        files = sorted((root / "docs").rglob("*.md"))
        size = sum(p.stat().st_size for p in files)
        start = time.perf_counter()
        for path in files:
            path.read_bytes()
        baseline = time.perf_counter() - start
        figures = asyncio.run(measure_resolver(root, args.queries, vocabulary))
        plain, plain_steps = run_workflow(root, args.steps, False, vocabulary)
        with_context, context_steps = run_workflow(root, args.steps, True, vocabulary)
    # Warm: every step but the first, which builds the run's index.
    per_step = statistics.median(context_steps[1:]) - statistics.median(plain_steps)
    print(f"project: {len(files)} documents, {size / 1e6:.1f} MB, {figures['shards']:.0f} shards, "
          f"{len(vocabulary.words)} distinct words")
    print(f"baseline, reading every document:        {baseline * 1000:8.1f} ms")
    print(f"index build (first resolution):           {figures['build'] * 1000:8.1f} ms   "
          f"{figures['build'] / baseline:5.1f}x the baseline   target < 2000 ms: "
          f"{'met' if figures['build'] < 2 else 'NOT met'}")
    print(f"warm resolution, {args.queries} queries:  p50 {figures['p50'] * 1000:6.2f} ms   "
          f"p95 {figures['p95'] * 1000:6.2f} ms   max {figures['max'] * 1000:6.2f} ms")
    print(f"run of {args.steps} steps: without context {plain:6.2f} s, with context {with_context:6.2f} s "
          f"(its first step builds the index: {context_steps[0] * 1000:.0f} ms)")
    print(f"per step (median, warm) with context {statistics.median(context_steps[1:]) * 1000:6.2f} ms, without "
          f"{statistics.median(plain_steps) * 1000:6.2f} ms -> TELIS adds {per_step * 1000:6.2f} ms per step   "
          f"target < 50 ms: {'met' if per_step < 0.05 else 'NOT met'}")


if __name__ == "__main__":
    main()
