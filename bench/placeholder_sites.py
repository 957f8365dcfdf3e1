"""Where a source tree writes the ``{x}``/``{{x}}`` placeholder language (issue 38's figure: one module owns it).

Read with ast, per module of the tree, in the patterns of ``re.compile``, ``re.sub``, ``re.search``… :

* a *grammar regex* matches placeholders by their shape: a brace (or two) before any name (a group or a class of
  name characters: ``\\{([A-Za-z_]…``, ``\\{\\{\\s*([\\w.-]+)…``), or a ``[[bmad-snapshot:…]]`` link;
* a *token mention* names one token as text in a regex that recognizes something else (a path starting
  ``\\{skill-root\\}/``, prose naming ``{user_name}``);
* a *substitute function* replaces placeholders: it calls ``.sub(`` with either kind of regex (a name bound to one,
  or what a call returns in a module holding a grammar regex),
  ``.replace(`` with a literal placeholder (``"{project-root}"``), or scans for ``"{"`` by hand (``.find("{")``).

A brace before anything else (a JSON object, a code block) is none of these. CCW's ``[var]`` (a task's
pre_analysis outputs in its commands) is another language and is not counted.

Usage: python bench/placeholder_sites.py [SRC]   (default: this checkout's src/; any checkout's src/ to compare)
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

_RE_CALLS = {"compile", "sub", "subn", "search", "match", "fullmatch", "findall", "finditer", "split"}
_PLACEHOLDER_LITERAL = re.compile(r"^\{\{?[\w.-]+\}?\}$")
#: In a pattern's text: ``\{`` (``\{\{``, ``\{\{?``, ``\{\{\s*``, ``\{\{?\.?``) then a group or a class of names.
_GRAMMAR = re.compile(r"\\\{(?:\\\{)?\??(?:\\s\*)?(?:\\\.\??)?(?:\((?!\?:\s)|\[(?!\^)|\\w)|\\\[\\\[bmad-snapshot:[(\[]")
#: ``\{`` then a literal name: ``\{skill-root\}``, ``\{user_name\}``.
_MENTION = re.compile(r"\\\{[A-Za-z_][\w-]*\\\}|\\\[\\\[bmad-snapshot")


def _pattern_text(node: ast.AST) -> str:
    """The literal text of a pattern expression (the constants of a concatenation or an f-string, joined)."""
    parts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str | bytes)]
    return "".join(p.decode("latin-1") if isinstance(p, bytes) else p for p in parts)


def _re_call(node: ast.AST) -> ast.Call | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _RE_CALLS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args):
        return node
    return None


def scan(path: Path) -> tuple[list[int], list[int], list[str]]:
    """A module's grammar regexes and token mentions (their lines), and its substitute functions (names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    grammar: list[int] = []
    mentions: list[int] = []
    bound: set[str] = set()
    for node in ast.walk(tree):
        call = _re_call(node)
        if call is None:
            continue
        text = _pattern_text(call.args[0])
        if _GRAMMAR.search(text):
            grammar.append(call.lineno)
        elif _MENTION.search(text):
            mentions.append(call.lineno)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and (value := _re_call(node.value)) is not None \
                and value.lineno in grammar + mentions:
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def substitutes(function: ast.AST) -> bool:
        for node in ast.walk(function):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            attr, owner, args = node.func.attr, node.func.value, node.args
            if attr in ("sub", "subn") and ((_re_call(node) is not None and node.lineno in grammar + mentions)
                                            or (isinstance(owner, ast.Name) and owner.id in bound)
                                            or (isinstance(owner, ast.Call) and bool(grammar))):
                return True
            first = args[0].value if args and isinstance(args[0], ast.Constant) else None
            if attr == "replace" and isinstance(first, str) and _PLACEHOLDER_LITERAL.match(first):
                return True
            if attr == "find" and first == "{":
                return True
        return False

    defs = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    # a function counts once: the innermost one doing the replacing, not also each function around it
    functions = [node.name for node in defs if substitutes(node) and not any(
        inner is not node and inner in defs and substitutes(inner) for inner in ast.walk(node))]
    return sorted(set(grammar)), sorted(set(mentions)), functions


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src"
    totals = {"grammar": [0, 0], "mentions": [0, 0], "functions": [0, 0]}
    holding = 0
    for path in sorted(src.rglob("*.py")):
        grammar, mentions, functions = scan(path)
        if not (grammar or mentions or functions):
            continue
        for name, found in (("grammar", grammar), ("mentions", mentions), ("functions", functions)):
            totals[name][0] += len(found)
            totals[name][1] += bool(found)
        holding += bool(grammar or functions)
        print(f"{path.relative_to(src)}: grammar regexes at {grammar or '-'}; token mentions at {mentions or '-'}; "
              f"substitute functions: {', '.join(functions) or '-'}")
    print(f"\ngrammar regexes: {totals['grammar'][0]} in {totals['grammar'][1]} modules; token mentions: "
          f"{totals['mentions'][0]} in {totals['mentions'][1]} modules; substitute functions: "
          f"{totals['functions'][0]} in {totals['functions'][1]} modules")
    print(f"modules holding a grammar regex or a substitute function: {holding}")


if __name__ == "__main__":
    main()
