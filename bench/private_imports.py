"""How many imports of a source tree take a name from another package's private module.

Every ``import`` and ``from … import`` of a stepline module counts (inside functions and under ``if TYPE_CHECKING:``
too), relative ones resolved, one per statement. The first segment of an imported module's path that starts with
``_`` (``stepline.store._journal``, or ``from stepline.store import _journal``) is a private module of the package
before it; the import counts when that package is neither the importer's own package nor one of its ancestors
(``stepline._yaml`` is everyone's; ``executors/cli_agents`` may use ``executors._usage``).

Usage: python bench/private_imports.py [SRC] [--list]   (default: this checkout's src/)
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_graph import Import, private_segment, read_tree


def foreign_private(found: Import, package: str) -> str | None:
    """The private module of another package that ``found`` imports, or None."""
    for written in found.written:
        owner = private_segment(written)
        if owner and not (package == owner[0] or package.startswith(owner[0] + ".")):
            return owner[1]
    return None


def private_imports(src: Path) -> list[tuple[Import, str]]:
    """Each import of another package's private module, with that module."""
    tree = read_tree(src)
    return [(found, private) for module, imports in sorted(tree.imports.items()) for found in imports
            if (private := foreign_private(found, tree.package_of(module)))]


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "src"
    found = private_imports(src)
    by_target = Counter(private for _, private in found)
    print(f"{len(found)} imports of another package's private module under {src} "
          f"({len(by_target)} private modules)")
    for private, count in by_target.most_common(10 if "--list" not in sys.argv else None):
        print(f"  {count:4d}  {private}")
    if "--list" in sys.argv:
        for where, private in found:
            print(f"  {where.module}:{where.line} -> {private}")


if __name__ == "__main__":
    main()
