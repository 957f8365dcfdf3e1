"""stepline's import graph, read from the source with ast: what each module loads when it runs.

Every ``import`` of a stepline module counts, those inside functions included; those under ``if TYPE_CHECKING:``
are type-only (kept apart: they load nothing). ``from pkg import name`` loads ``pkg`` (its ``__init__``) and the
module that defines ``name``: a submodule of that name, or where ``pkg``'s ``__init__`` takes it from (its
imports, the lazy ones' type-only lines included, followed through packages that re-export it). Importing
``pkg._mod`` loads ``pkg`` first too. A package the importer sits in is already loading and is left out.

Used by bench/import_circles.py, bench/private_imports.py and tests/test_layering.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Import", "Tree", "private_segment", "read_tree"]


@dataclass(frozen=True)
class Import:
    """One ``import`` statement of a stepline module."""

    module: str  #: the importing module
    line: int
    written: tuple[str, ...]  #: each module path as written (``from a import b``: ``a.b`` when that is a module)
    loads: frozenset[str]  #: the modules it loads
    typing_only: bool


@dataclass
class Tree:
    src: Path
    paths: dict[str, Path]  #: module name -> file
    packages: set[str]
    imports: dict[str, list[Import]]

    def graph(self, *, typing: bool = False) -> dict[str, set[str]]:
        """Each module -> the modules it loads at run time (and for types too with ``typing``)."""
        return {m: {t for i in found if typing or not i.typing_only for t in i.loads} - {m}
                for m, found in self.imports.items()}

    def package_of(self, module: str) -> str:
        return module if module in self.packages else module.rpartition(".")[0]


def private_segment(module: str) -> tuple[str, str] | None:
    """``(package, private module)`` for the first ``_x`` segment of ``module``'s path, or None when all is public."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index]), ".".join(parts[: index + 1])
    return None


def _name_of(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _typing_only(tree: ast.Module) -> set[int]:
    return {id(node) for block in ast.walk(tree) if isinstance(block, ast.If) and "TYPE_CHECKING" in
            ast.unparse(block.test) for part in block.body for node in ast.walk(part)}


def _base(node: ast.ImportFrom, package: str) -> str:
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    return base


def read_tree(src: Path) -> Tree:
    """Read every module under ``src`` (a folder holding the ``stepline`` package)."""
    paths = {_name_of(src, p): p for p in sorted(src.rglob("*.py"))}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    parsed = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in paths.items()}

    # What each package's __init__ takes from where: name -> the module it comes from.
    exports: dict[str, dict[str, str]] = {}
    for package in packages:
        taken: dict[str, str] = {}
        for node in ast.walk(parsed[package]):
            if isinstance(node, ast.ImportFrom):
                base = _base(node, package)
                for alias in node.names:
                    taken[alias.asname or alias.name] = base
        exports[package] = taken

    def defining(module: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        if f"{module}.{name}" in paths:
            return f"{module}.{name}"
        source = exports.get(module, {}).get(name)
        if source is None or source not in paths or source in seen:
            return module
        return defining(source, name, seen | {module}) if source in packages else source

    def with_parents(target: str, importer_package: str) -> set[str]:
        loads = set()
        while target:
            if not (importer_package == target or importer_package.startswith(target + ".")):
                loads.add(target)
            target = target.rpartition(".")[0]
        return {t for t in loads if t in paths}

    imports: dict[str, list[Import]] = {}
    for name, tree in parsed.items():
        package = name if name in packages else name.rpartition(".")[0]
        typing_only = _typing_only(tree)
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                written = tuple(a.name for a in node.names if a.name.split(".")[0] == "stepline")
                targets = set(written)
            elif isinstance(node, ast.ImportFrom):
                base = _base(node, package)
                if base.split(".")[0] != "stepline":
                    continue
                written = tuple(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names)
                targets = {base} | {defining(base, a.name) for a in node.names}
            else:
                continue
            if not written:
                continue
            loads = set().union(*(with_parents(t, package) for t in targets)) - {name}
            found.append(Import(name, node.lineno, written, frozenset(loads), id(node) in typing_only))
        imports[name] = found
    return Tree(src, paths, packages, imports)
