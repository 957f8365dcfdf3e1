"""How many modules of a source tree sit in import circles (issue 38's figure; tests/test_layering.py keeps it at 0).

Every ``import`` of a stepline module is read with ast, those inside functions included; imports under ``if
TYPE_CHECKING:`` are type-only and left out. ``from pkg import name`` is an import of ``pkg.name`` when that is a
module, else of ``pkg``. The circles are the strongly connected components of more than one module.

Usage: python bench/import_circles.py [SRC]   (default: this checkout's src/; any checkout's src/ to compare)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def modules(src: Path) -> dict[str, Path]:
    found = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for part in block.body for node in ast.walk(part)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def circles(src: Path) -> list[list[str]]:
    """The import circles of the tree (Tarjan's strongly connected components of more than one module)."""
    known = modules(src)
    graph = {name: imports(name, path, known) for name, path in known.items()}
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
