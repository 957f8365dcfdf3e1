"""Print the share of BMAD conditions the runtime can decide without a model (SPEC R-E2).

Usage: .venv/bin/python bench/conditions_share.py [CORPUS_DIR]

Every condition of the corpus (``<step if>``, ``<substep if>``, ``<action if>``, ``<check if>``, ``<ask if>``,
``<output if>``, ``<if selection|response>``) in the legacy instructions files and the micro-file step files is
parsed and classified; the share that :func:`stepline.bmad._conditions.classify` turns into a
structured, deterministic form is printed, overall and by kind, with the most common undecided ones.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from stepline.bmad._conditions import classify
from stepline.bmad._instructions import parse_instructions, walk

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"


def conditions(path: Path) -> list[tuple[str, str]]:
    """Return (condition, attribute) for every condition in one file."""
    found: list[tuple[str, str]] = []
    for node in walk(parse_instructions(path.read_text(encoding="utf-8"), path=str(path)).nodes):
        attribute = getattr(node, "attribute", None) or "if"
        for name in ("if_", "condition"):
            value = getattr(node, name, None)
            if isinstance(value, str) and value.strip():
                found.append((value, attribute))
    return found


def main() -> int:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CORPUS
    source = corpus / "bmad"
    if not source.is_dir():
        print(f"corpus not found at {source}", file=sys.stderr)
        return 2
    files = sorted(p for p in source.rglob("*") if p.suffix in (".md", ".xml") and "workflows" in p.parts)
    groups: dict[str, list[tuple[str, str]]] = {"legacy instructions": [], "micro-file steps and others": []}
    for path in files:
        group = "legacy instructions" if "instructions" in path.name else "micro-file steps and others"
        groups[group].extend(conditions(path))
    everything = [c for group in groups.values() for c in group]
    kinds: Counter[str] = Counter()
    undecided: Counter[str] = Counter()
    for text, attribute in everything:
        parsed = classify(text, attribute=attribute)
        if parsed is None:
            undecided[" ".join(text.split())] += 1
        else:
            kinds[parsed.kind] += 1
    for name, items in [*groups.items(), ("all", everything)]:
        decided = sum(classify(text, attribute=attr) is not None for text, attr in items)
        share = decided / len(items) if items else 0.0
        print(f"{name:28} {decided:4} / {len(items):4} decidable  = {share:6.1%}")
    print("by kind: " + ", ".join(f"{kind} {count}" for kind, count in kinds.most_common()))
    print("most common undecided:")
    for text, count in undecided.most_common(10):
        print(f"  {count:3} x {text[:100]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
