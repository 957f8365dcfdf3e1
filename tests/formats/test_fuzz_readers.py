"""Damaged workflow files never end in a traceback: every reader entry point answers with a SteplineError.

Real files (the native example, BMAD legacy and micro-file fixtures, CCW sessions and, when present, workflows
of ../shared/corpus) are copied, one of them is damaged (bytes that are not UTF-8 inserted, the file cut short,
bytes flipped, the whole file replaced by random bytes, lines duplicated, a span overwritten), and each entry
point reads it: ``load_workflow`` and ``lint_path`` (stepline.families), ``check_ccw_session``, and the CLI's
``validate``, ``run --executor dry-run --yolo``, ``ccw check`` and ``ccw execute --executor dry-run -y``.
Each must return, or fail with a :class:`~stepline.errors.SteplineError` whose message is one line; the CLI
must exit with a documented code and print at most one ``error:`` line, never a traceback.

The examples are derandomized (the same ones every run) and few: the file runs in well under a minute.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import CORPUS, REPO
from stepline.ccw._check import check_ccw_session
from stepline.errors import SteplineError
from stepline.families import lint_path, load_workflow
from stepline.interfaces.cli._app import run_cli

FIXTURES = REPO / "tests" / "fixtures"
BMAD_CORPUS = CORPUS / "bmad" / "v6.0.0-alpha.23"
#: The exit codes of errors.py, 9 (a run blocked on a gate), 10 (validate / check found errors), 130 (interrupted).
EXIT_CODES = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 130}
#: Examples per test; STEPLINE_FUZZ_EXAMPLES=500 hunts longer (still derandomized: the same examples each time).
FUZZ = settings(max_examples=int(os.environ.get("STEPLINE_FUZZ_EXAMPLES", "20")), derandomize=True, deadline=None,
                database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- damage ------------------------------------------------------------------------------------------------
#: Byte sequences that are not UTF-8: a lone continuation byte, cut-short sequences, an overlong form, an
#: encoded surrogate, a byte that never occurs, Latin-1 and UTF-16 text.
NOT_UTF8 = [b"\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xed\xa0\x80", b"\xff", b"\xfe\xff",
            b"caf\xe9", b"\xff\xfes\x00t\x00"]


@st.composite
def damage(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` damaged in one of the ways a file on disk gets damaged."""
    size = len(data)
    kind = draw(st.sampled_from(["not-utf8", "truncate", "flip", "random", "duplicate", "overwrite"]))
    event(f"damage: {kind}")
    at = draw(st.integers(0, size))
    if kind == "not-utf8":
        return data[:at] + draw(st.sampled_from(NOT_UTF8)) + data[at:]
    if kind == "truncate":
        return data[:at]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 4))) if size else ():
            out[draw(st.integers(0, size - 1))] ^= draw(st.integers(1, 255))
        return bytes(out)
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "duplicate":
        lines = data.splitlines(keepends=True)
        if not lines:
            return data
        first = draw(st.integers(0, len(lines) - 1))
        last = draw(st.integers(first, min(len(lines), first + 5)))
        return b"".join(lines[:last] + lines[first:last] * draw(st.integers(1, 3)) + lines[last:])
    return data[:at] + draw(st.binary(min_size=1, max_size=40)) + data[at + draw(st.integers(0, 40)):]


# -- what is read ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Subject:
    """A workflow to damage: how to lay it out in a project, where it is, and which files it reads."""

    name: str
    kind: str  # native, bmad, ccw
    build: Callable[[Path], Path]  # lays the workflow out under the project folder; returns its path
    files: tuple[str, ...]  # the files to damage, relative to the project


def _copy(source: Path, target: Path) -> Path:
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return target


def _native_json(project: Path) -> Path:
    import json

    import yaml

    data = yaml.safe_load((REPO / "examples" / "release-notes" / "workflow.yaml").read_text(encoding="utf-8"))
    path = project / "flow.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def _files(folder: Path, relative_to: Path, pattern: str = "*") -> tuple[str, ...]:
    return tuple(sorted(str(p.relative_to(relative_to)) for p in folder.rglob(pattern) if p.is_file()))


_MICRO = FIXTURES / "microfile" / "project"
_MINI = Path("_bmad/demo/workflows/mini")
_TDD = FIXTURES / "ccw" / "sessions" / "WFS-tdd-parser"
_FLAT = FIXTURES / "ccw" / "project-flat"
_ACTIVE = Path(".workflow/active")

SUBJECTS = [
    Subject("native-yaml", "native",
            lambda p: _copy(REPO / "examples" / "release-notes" / "workflow.yaml", p / "flow.yaml"), ("flow.yaml",)),
    Subject("native-json", "native", _native_json, ("flow.json",)),
    Subject("bmad-legacy", "bmad", lambda p: _copy(FIXTURES / "bmad_run" / "flow", p / "wf" / "flow"),
            ("wf/flow/workflow.yaml", "wf/flow/instructions.xml")),
    Subject("bmad-template", "bmad", lambda p: _copy(FIXTURES / "bmad_run" / "tpl", p / "wf" / "tpl"),
            ("wf/tpl/workflow.yaml", "wf/tpl/instructions.xml", "wf/tpl/template.md")),
    Subject("bmad-microfile", "bmad",
            lambda p: (shutil.copytree(_MICRO, p, dirs_exist_ok=True), p / _MINI / "workflow.md")[1],
            ("_bmad/demo/config.yaml", *(str(_MINI / f) for f in _files(_MICRO / _MINI, _MICRO / _MINI)))),
    Subject("ccw-six-field", "ccw", lambda p: _copy(_TDD, p / _ACTIVE / _TDD.name),
            tuple(str(_ACTIVE / _TDD.name / f) for f in _files(_TDD, _TDD))),
    Subject("ccw-flat", "ccw",
            lambda p: (shutil.copytree(_FLAT, p, dirs_exist_ok=True), p / _ACTIVE / "WFS-report-export")[1],
            _files(_FLAT, _FLAT)),
]


# -- what reads it ------------------------------------------------------------------------------------------
def _one_line(exc: SteplineError) -> None:
    message = exc.format_message()
    assert "\n" not in message and "Traceback" not in message, message


def _api(call: Callable[[], Any]) -> Any:
    """Call a reader; it returns or raises a SteplineError with a one-line message (anything else fails)."""
    try:
        return call()
    except SteplineError as exc:
        _one_line(exc)
        return None


def _cli(argv: list[str]) -> int:
    """Run the CLI; it exits with a documented code, prints at most one error line and no traceback (a bug
    would be re-raised by run_cli and fail the test with its traceback)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _stdin(""):
        code = run_cli(argv)
    text = out.getvalue() + err.getvalue()
    assert "Traceback" not in text, text
    assert code in EXIT_CODES, (code, text)
    errors = [line for line in err.getvalue().splitlines() if "error: " in line]
    assert len(errors) <= 1, errors
    return code


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    import sys

    saved = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved


def read_everywhere(project: Path, target: Path, kind: str) -> None:
    """Every reader entry point on the workflow at ``target``."""
    _api(lambda: load_workflow(target, project_root=project))
    diagnostics = _api(lambda: lint_path(target, project_root=project)) or []
    for diagnostic in diagnostics:
        assert "\n" not in str(diagnostic), diagnostic
    _cli(["validate", str(target), "-C", str(project)])
    if kind == "ccw":
        for diagnostic in _api(lambda: check_ccw_session(target)) or []:
            assert "\n" not in str(diagnostic), diagnostic
        _cli(["ccw", "check", str(target), "-C", str(project)])
        _cli(["ccw", "execute", "--executor", "dry-run", "-y", "-q", "-C", str(project)])
    else:
        _cli(["run", str(target), "--executor", "dry-run", "--yolo", "-q", "-C", str(project)])


def _fuzz_subject(subject: Subject, data: st.DataObject) -> None:
    file = data.draw(st.sampled_from(subject.files), label="file")
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        target = subject.build(project)
        path = project / file
        path.write_bytes(data.draw(damage(path.read_bytes()), label="damaged"))
        read_everywhere(project, target, subject.kind)


@pytest.mark.parametrize("subject", SUBJECTS, ids=[s.name for s in SUBJECTS])
def test_the_fixtures_read_cleanly_before_damage(subject: Subject, tmp_path: Path) -> None:
    """The undamaged copies load (so a damaged one fails because of the damage)."""
    project = tmp_path / "project"
    project.mkdir()
    load_workflow(subject.build(project), project_root=project)


@pytest.mark.parametrize("subject", SUBJECTS, ids=[s.name for s in SUBJECTS])
@FUZZ
@given(data=st.data())
def test_a_damaged_file_is_never_a_traceback(subject: Subject, data: st.DataObject) -> None:
    """One damaged file, every entry point: a clean result or one SteplineError line, never a traceback."""
    _fuzz_subject(subject, data)


def test_not_utf8_is_one_line_naming_the_file_and_the_byte(tmp_path: Path) -> None:
    """The message a user sees for the 70 fuzzed invocations that used to end in a UnicodeDecodeError."""
    project = tmp_path / "project"
    project.mkdir()
    flow = _copy(REPO / "examples" / "release-notes" / "workflow.yaml", project / "flow.yaml")
    flow.write_bytes(flow.read_bytes().replace(b"Release notes", b"Release n\xf6tes", 1))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert run_cli(["run", str(flow), "--executor", "dry-run", "--yolo", "-C", str(project)]) == 4
    line = err.getvalue().strip()
    assert "\n" not in line
    assert line.startswith(f"error: {flow}:5: not UTF-8 at byte ")
    assert line.endswith("(invalid start byte: 0xf6) (re-save the file as UTF-8)")


# -- the corpus ---------------------------------------------------------------------------------------------
#: Real workflows of the corpus, installed once: a template one, a legacy one, two micro-file ones (one tri-modal).
CORPUS_WORKFLOWS = ["bmm/workflows/4-implementation/create-story", "bmm/workflows/4-implementation/dev-story",
                    "bmm/workflows/1-analysis/create-product-brief", "bmm/workflows/2-plan-workflows/prd"]


@pytest.fixture(scope="module")
def corpus_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The BMAD corpus installed into a project (once for the module)."""
    if not BMAD_CORPUS.is_dir():
        pytest.skip("the corpus is not present")
    project = tmp_path_factory.mktemp("corpus") / "project"
    project.mkdir()
    code = run_cli(["bmad", "install", str(BMAD_CORPUS), "--project", str(project), "--extras",
                    str(CORPUS / "bmad" / "extras"), "--set", "user_name=Ada"])
    assert code == 0
    return project


def _corpus_target(project: Path, name: str) -> Path:
    folder = project / "_bmad" / name
    if (folder / "workflow.yaml").is_file():
        return folder / "workflow.yaml"
    return next(iter(sorted(folder.glob("workflow*.md"))), folder)


@pytest.mark.corpus
@FUZZ
@given(data=st.data())
def test_a_damaged_corpus_file_is_never_a_traceback(corpus_project: Path, data: st.DataObject) -> None:
    """A damaged file of a real, installed workflow (or of its module config): a clean result or one line."""
    name = data.draw(st.sampled_from(CORPUS_WORKFLOWS), label="workflow")
    target = _corpus_target(corpus_project, name)
    folder = corpus_project / "_bmad" / name
    assert folder.is_dir() and target.is_file(), target
    module_config = corpus_project / "_bmad" / "bmm" / "config.yaml"
    files = [module_config, *sorted(p for p in folder.rglob("*") if p.is_file())]
    path = data.draw(st.sampled_from(files), label="file")
    original = path.read_bytes()
    try:
        path.write_bytes(data.draw(damage(original), label="damaged"))
        read_everywhere(corpus_project, target, "bmad")
    finally:  # the installed tree is shared by the examples: put the file back, drop the runs
        path.write_bytes(original)
        shutil.rmtree(corpus_project / ".stepline", ignore_errors=True)
