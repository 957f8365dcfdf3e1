"""How many modules of a source tree sit in import circles (issue 38's figure; tests/test_layering.py keeps it at 0).

The graph is bench/import_graph.py's: what each module loads at run time (imports inside functions included,
type-only ones left out; a name taken from a package loads that package and the module defining the name). The
circles are the strongly connected components of more than one module.

Usage: python bench/import_circles.py [SRC]   (default: this checkout's src/; any checkout's src/ to compare)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_graph import read_tree


def circles(src: Path) -> list[list[str]]:
    """The import circles of the tree (Tarjan's strongly connected components of more than one module)."""
    graph = read_tree(src).graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found, key=len, reverse=True)


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src"
    found = circles(src)
    print(f"{sum(map(len, found))} files in {len(found)} import circle(s) under {src}")
    for circle in found:
        print(f"  {len(circle)}: {' '.join(circle)}")


if __name__ == "__main__":
    main()
