"""The source's own text: comments and docstrings say why, not which issue asked for it, and a module's docstring
stays short (its detail belongs in the docstring of the function or class it describes, or in docs/)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
#: "issue 21", "issues 16.8", "Issue #3", "(#21)": a tracker's number, which says nothing to a reader of the code.
ISSUE = re.compile(r"\bissues?[\s#-]*\d|\(#\d+\)", re.IGNORECASE)
MAX_MODULE_DOCSTRING_LINES = 20


def _docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))]
    found = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=False)
        if doc is not None:
            found.append((node.body[0].lineno, doc))
    return found


def issue_numbers(text: str) -> list[tuple[int, str]]:
    """Each comment or docstring of the Python source ``text`` that names an issue number: (line, the words)."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and (match := ISSUE.search(token.string)):
            found.append((token.start[0], match.group(0)))
    for line, doc in _docstrings(ast.parse(text)):
        for offset, doc_line in enumerate(doc.splitlines()):
            if match := ISSUE.search(doc_line):
                found.append((line + offset, match.group(0)))
    return sorted(found)


def module_docstring_lines(text: str) -> int:
    doc = ast.get_docstring(ast.parse(text), clean=False)
    return len(doc.strip("\n").splitlines()) if doc else 0


SOURCES = sorted(SRC.rglob("*.py"))


def test_the_sources_are_found() -> None:
    assert len(SOURCES) > 100


def test_no_issue_number_in_comments_or_docstrings() -> None:
    found = [f"{path.relative_to(SRC.parent)}:{line} names {words!r}" for path in SOURCES
             for line, words in issue_numbers(path.read_text(encoding="utf-8"))]
    assert not found, f"{found}: say why in words (the commit message may name the issue)"


def test_module_docstrings_are_short() -> None:
    found = [f"{path.relative_to(SRC.parent)}: {lines} lines" for path in SOURCES
             if (lines := module_docstring_lines(path.read_text(encoding="utf-8"))) > MAX_MODULE_DOCSTRING_LINES]
    assert not found, (f"{found}: a module docstring has at most {MAX_MODULE_DOCSTRING_LINES} lines; move the detail "
                       "to the function or class it describes, or to docs/")


@pytest.mark.parametrize("text", [
    '"""A reader (issue 21)."""\n',
    '"""Fine."""\n\n\ndef f() -> None:\n    """Done for Issue #3."""\n',
    "x = 1  # see issue 16.8\n",
    "class A:\n    '''As asked (#21).'''\n",
])
def test_an_issue_number_is_found(text: str) -> None:
    assert issue_numbers(text)


def test_words_about_issues_are_not_issue_numbers() -> None:
    assert not issue_numbers('"""Problems become issues; one issue per line."""\nissues = 3  # the issues found\n')


def test_a_long_module_docstring_is_counted() -> None:
    assert module_docstring_lines('"""' + "line\n" * 21 + '"""\n') == 21 > MAX_MODULE_DOCSTRING_LINES
