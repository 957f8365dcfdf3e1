"""Fuzzed run directories never end in a traceback, and doctor, the readers and the repair agree.

Three real runs (tests/fakes/rundirs.py: native, release-notes approved at its gate, a CCW session) are copied
and mutated by hypothesis — a journal record's field given another JSON value, a field dropped or added, lines
deleted, repeated, swapped or cut, bytes inserted; a manifest field (top level, the workflow, a step) changed or
dropped; an audit file's record changed — then read by ``status``, ``status --verbose``, ``show``, ``export``,
``list``, ``doctor`` and ``resume`` through the CLI entry point. Each must exit with a documented code and at
most one ``error:`` line (a bug is re-raised by run_cli and fails the test with its traceback), and:

- ``doctor`` and ``status`` agree: the run is damaged (doctor exit 6) exactly when ``status`` exits 6;
- a run doctor calls repairable is, after ``--truncate-to-last-good``, whole and loadable, and resume goes on;
- a damaged run's resume is refused (exit 6) without changing its folder.

The examples are derandomized (the same ones every run) and few; STEPLINE_FUZZ_EXAMPLES=500 hunts longer.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from fakes.rundirs import BUILDERS, cli_built_once, run_dir_of
from stepline.interfaces.cli._app import run_cli

#: The exit codes of errors.py, 8 (a step failed), 9 (blocked on a gate), 130 (interrupted).
EXIT_CODES = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 130}
FUZZ = settings(max_examples=int(os.environ.get("STEPLINE_FUZZ_EXAMPLES", "12")), derandomize=True, deadline=None,
                database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.function_scoped_fixture],
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])  # no explain: minutes

AUDIT = ("artifacts.json", "gates.json", "approvals.json", "drr.json", "tool_results.json")
#: A family's own data in a workflow spec (``workflow.meta``, a step's ``meta``), which only its driver reads and
#: the run model does not check: left alone here. The CCW driver trusts it on resume (a dropped
#: ``meta.paths`` is a KeyError in ccw/_state.py, a ``meta.critical_path`` that is a number a TypeError in
#: ccw/_driver.py: 34 tracebacks of 5,400 swept manifest mutations, all there), which is the CCW family's to check.
FAMILY_DATA = ("meta",)


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The three runs, made once; the CLI built once for the module."""
    with cli_built_once():
        made = {}
        for name, build in BUILDERS.items():
            root = tmp_path_factory.mktemp(name)
            build(root)
            made[name] = root
        yield made


# -- mutations -----------------------------------------------------------------------------------------------
JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats(allow_nan=False)
                    | st.text(max_size=12), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _field_change(draw: st.DrawFn, record: dict[str, Any], keep: tuple[str, ...] = ()) -> str:
    """Change, drop or add one field of ``record`` (perhaps one level down), never one named in ``keep``; say
    what."""
    target = record
    path = ""
    nested = [key for key, value in record.items() if isinstance(value, dict) and value and key not in keep]
    if nested and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(nested)))
        target, path = record[key], f"{key}."
    how = draw(st.sampled_from(["change", "drop", "add"]))
    if how == "add" or not target:
        target[draw(st.text(min_size=1, max_size=8))] = draw(JSON)
        return f"add {path}field"
    keys = sorted(key for key in target if key not in keep)
    if not keys:
        return "nothing"
    key = draw(st.sampled_from(keys))
    if how == "drop":
        del target[key]
    else:
        target[key] = draw(JSON)
    return f"{how} {path}{key}"


@st.composite
def journal_damage(draw: st.DrawFn, data: bytes) -> bytes:
    """The journal's bytes, damaged once or twice."""
    lines = data.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["field", "field", "field", "delete", "repeat", "swap", "cut", "insert", "bytes"]))
        event(f"journal: {kind}")
        if not lines:
            lines = [draw(st.binary(max_size=40))]
            continue
        at = draw(st.integers(0, len(lines) - 1))
        if kind == "field":
            try:
                record = json.loads(lines[at])
            except ValueError:
                continue
            if isinstance(record, dict):
                event(f"journal field: {_field_change(draw, record).split('.')[0].split(' ')[0]}")
                lines[at] = json.dumps(record).encode() + b"\n"
        elif kind == "delete":
            del lines[at]
        elif kind == "repeat":
            lines.insert(at, lines[at])
        elif kind == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        elif kind == "cut":
            whole = b"".join(lines)
            lines = [whole[:draw(st.integers(0, len(whole)))]]
        elif kind == "insert":
            lines.insert(at, draw(st.binary(max_size=40)) + draw(st.sampled_from([b"\n", b""])))
        else:
            line = bytearray(lines[at])
            line[draw(st.integers(0, len(line) - 1))] = draw(st.integers(0, 255))
            lines[at] = bytes(line)
    return b"".join(lines)


@st.composite
def manifest_damage(draw: st.DrawFn, data: bytes) -> bytes:
    """The manifest, a field of it (at the top, of the workflow, of one of its steps) changed, dropped or added;
    or its bytes cut."""
    manifest = json.loads(data)
    where = draw(st.sampled_from(["top", "top", "workflow", "step", "bytes"]))
    event(f"manifest: {where}")
    if where == "bytes":
        return data[:draw(st.integers(0, len(data)))]
    target = manifest
    if where == "workflow":
        target = manifest["workflow"]
    elif where == "step":
        target = draw(st.sampled_from(manifest["workflow"]["steps"]))
    _field_change(draw, target, keep=FAMILY_DATA)
    return json.dumps(manifest).encode()


@st.composite
def audit_damage(draw: st.DrawFn, data: bytes) -> bytes:
    """An audit file's record with a field changed, dropped or added; or the file not a list."""
    records = json.loads(data) if data else []
    if not records or draw(st.integers(0, 5)) == 0:
        event("audit: whole file")
        return json.dumps(draw(JSON)).encode()
    record = draw(st.sampled_from(records))
    event(f"audit: {_field_change(draw, record).split(' ')[0]}")
    return json.dumps(records).encode()


# -- reading ---------------------------------------------------------------------------------------------------
def _cli(argv: list[str]) -> tuple[int, str]:
    """Run the CLI: a documented exit code, at most one error line, no traceback (a bug is re-raised)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(argv)
    text = out.getvalue() + err.getvalue()
    assert "Traceback" not in text, text
    assert code in EXIT_CODES, (argv, code, text)
    errors = [line for line in err.getvalue().splitlines() if line.strip()]
    assert len(errors) <= 1 and all(line.startswith(("error: ", "wrote ")) for line in errors), (argv, errors)
    return code, out.getvalue()


def _tree(folder: Path) -> dict[str, str]:
    """The run's files and what they hold; not the digest (summary.json), which readers rebuild when stale."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.name not in ("lock", "summary.json")}


def _read_everywhere(project: Path, run_dir: Path) -> None:
    at = ["-C", str(project)]
    run = run_dir.name
    before = _tree(run_dir)
    status, _ = _cli(["status", run, *at])
    for argv in (["status", run, "--verbose"], ["show", run], ["export", run, "-o", str(project.parent / "x.json")],
                 ["list"], ["list", "--json"]):
        _cli([*argv, *at])
    doctor, out = _cli(["doctor", run, "--json", *at])
    found = json.loads(out)
    assert doctor == (6 if found["damaged"] else 0)
    # doctor and the readers agree (a record naming a file outside the project is refused with exit 4)
    assert (status in (4, 6)) == found["damaged"], (status, found)
    assert _tree(run_dir) == before, "reading a run changed its folder"
    if found["damaged"]:
        event("damaged")
        assert _cli(["resume", run, "-q", *at])[0] == status
        assert _tree(run_dir) == before, "a refused resume changed the run's folder"
        code, out = _cli(["doctor", run, "--truncate-to-last-good", "--json", *at])
        if not found["repairable"]:
            assert code == 6
            return
        event("repaired")
        assert code == 0 and not json.loads(out)["damaged"], out
        assert _cli(["status", run, *at])[0] == 0
    else:
        event("accepted")
    assert _cli(["resume", run, "-q", *at])[0] != 6


def _fuzz(bases: dict[str, Path], data: st.DataObject, file: str,
          damage: Callable[[bytes], st.SearchStrategy[bytes]]) -> None:
    base = data.draw(st.sampled_from(sorted(bases)), label="run")
    with tempfile.TemporaryDirectory() as tmp, cli_built_once():
        project = Path(tmp) / "project"
        shutil.copytree(bases[base], project, symlinks=True)
        run_dir = run_dir_of(project)
        path = run_dir / (data.draw(st.sampled_from(AUDIT), label="file") if file == "audit" else file)
        original = path.read_bytes() if path.is_file() else b""
        path.write_bytes(data.draw(damage(original), label="damaged"))
        _read_everywhere(project, run_dir)


@FUZZ
@given(data=st.data())
def test_a_mutated_journal_is_never_a_traceback(bases: dict[str, Path], data: st.DataObject) -> None:
    """Journal records mutated field by field and line by line: one line or a clean result, doctor agreeing."""
    _fuzz(bases, data, "journal.jsonl", journal_damage)


@FUZZ
@given(data=st.data())
def test_a_mutated_manifest_is_never_a_traceback(bases: dict[str, Path], data: st.DataObject) -> None:
    """Manifest fields changed, dropped or added: one line or a clean result, doctor agreeing."""
    _fuzz(bases, data, "manifest.json", manifest_damage)


@FUZZ
@given(data=st.data())
def test_a_mutated_audit_file_is_never_a_traceback(bases: dict[str, Path], data: st.DataObject) -> None:
    """Audit records (artifacts, gates, approvals, DRRs, tool results) mutated: one line or a clean result."""
    _fuzz(bases, data, "audit", audit_damage)
