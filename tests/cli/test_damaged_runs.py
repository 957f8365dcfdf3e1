"""Damaged run directories, as an attacker and a tired user leave them: each kind of damage × each command.

Three real runs are made with the CLI once (a native workflow with ``--executor dry-run --yolo``, the
release-notes example with its script, blocked at its gate and approved, a CCW session), the native and the CCW
one cut back as a killed process leaves them. Each test copies one of them, damages it one way, and runs
``status``, ``status --verbose``, ``show``, ``export``, ``list``, ``doctor`` and ``resume`` through the CLI
entry point. Damage must be one ``error:`` line naming the file (and line) and what is wrong, exit 6, never a
traceback, the run directory left as it was; ``list`` lists the run as damaged; ``doctor`` explains it and
whether the run can go on. Then ``doctor --truncate-to-last-good`` must back up and repair every run whose
manifest is whole so that ``resume`` completes it, and refuse (exit 6) the others. The tails a crash leaves (a
torn last line, the zeros the journal was grown by) are not damage: every command accepts them (exit 0).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakes.rundirs import BUILDERS, cli_built_once, run_dir_of
from stepline.interfaces.cli._app import run_cli

OTHER_RUN = "run-20200101000000-deadbeef"


@pytest.fixture(autouse=True, scope="module")
def _cli_built_once() -> Iterator[None]:
    with cli_built_once():
        yield


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_cli(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three runs, made once."""
    made = {}
    for name, build in BUILDERS.items():
        root = tmp_path_factory.mktemp(name)
        build(root)
        made[name] = root
    return made


# -- the kinds of damage -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Where:
    """Where the damage is reported, and what it is."""

    file: str
    line: int | None
    says: str


@dataclass(frozen=True)
class Damage:
    """One way to damage a run directory; ``normal``: what a crash leaves, accepted by every command."""

    name: str
    apply: Callable[[Path], Where | None]
    normal: bool = False
    #: Whether doctor --truncate-to-last-good can repair it (its manifest is whole).
    repairable: bool = True


def _lines(run_dir: Path) -> list[bytes]:
    return (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True)


def _write_lines(run_dir: Path, lines: list[bytes]) -> None:
    (run_dir / "journal.jsonl").write_bytes(b"".join(lines))


def _record(line: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(line)
    return value


def _dump(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode() + b"\n"


def _middle(run_dir: Path) -> int:
    return len(_lines(run_dir)) // 2


def _edit_line(edit: Callable[[dict[str, Any]], Any], says: str) -> Callable[[Path], Where]:
    """Damage: the middle record changed by ``edit``."""

    def apply(run_dir: Path) -> Where:
        lines = _lines(run_dir)
        at = _middle(run_dir)
        record = _record(lines[at])
        edit(record)
        lines[at] = _dump(record)
        _write_lines(run_dir, lines)
        return Where("journal.jsonl", at + 1, says)

    return apply


def _append(make: Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]], says: str
            ) -> Callable[[Path], Where]:
    """Damage: one more record, well formed and numbered, that cannot follow the ones before it."""

    def apply(run_dir: Path) -> Where:
        lines = _lines(run_dir)
        records = [_record(line) for line in lines]
        last = records[-1]
        record = {**make(last, records), "seq": last["seq"] + 1, "run_id": last["run_id"], "time": last["time"]}
        _write_lines(run_dir, [*lines, _dump(record)])
        return Where("journal.jsonl", len(lines) + 1, says)

    return apply


def _completed_again(last: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    done = next(r for r in records if r["type"] == "WorkflowStepCompleted")
    return {"type": "WorkflowStepCompleted", "step_id": done["step_id"], "data": done["data"]}


def _summary_number(last: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    started = [r for r in records if r["type"] == "WorkflowStepStarted"][-1]
    return {"type": "WorkflowStepStarted", "step_id": "never-a-step-of-it", "data": {**started["data"], "name": 7}}


def _journal(transform: Callable[[list[bytes]], tuple[list[bytes], int | None]], says: str
             ) -> Callable[[Path], Where | None]:
    """Damage (or a crash's tail) made by rewriting the journal's lines; ``transform`` returns them and the
    line reported (None: not damage)."""

    def apply(run_dir: Path) -> Where | None:
        lines, line = transform(_lines(run_dir))
        _write_lines(run_dir, lines)
        return None if line is None else Where("journal.jsonl", line, says)

    return apply


def _duplicated(lines: list[bytes]) -> tuple[list[bytes], int]:
    at = len(lines) // 2
    return [*lines[:at + 1], lines[at], *lines[at + 1:]], at + 2


def _deleted(lines: list[bytes]) -> tuple[list[bytes], int]:
    at = len(lines) // 2
    return [*lines[:at], *lines[at + 1:]], at + 1


def _inserted(junk: bytes) -> Callable[[list[bytes]], tuple[list[bytes], int]]:
    def transform(lines: list[bytes]) -> tuple[list[bytes], int]:
        at = len(lines) // 2
        return [*lines[:at], junk, *lines[at:]], at + 1

    return transform


def _torn_middle(lines: list[bytes]) -> tuple[list[bytes], int]:
    at = len(lines) // 2
    return [*lines[:at], lines[at][: len(lines[at]) // 2], *lines[at + 1:]], at + 1


def _not_utf8(lines: list[bytes]) -> tuple[list[bytes], int]:
    at = len(lines) // 2
    return [*lines[:at], lines[at][:30] + b"\xff\xfe" + lines[at][30:], *lines[at + 1:]], at + 1


def _next(lines: list[bytes]) -> bytes:
    """The record a process killed mid-append was writing: one after the last."""
    record = _record(lines[-1])
    return _dump({**record, "seq": record["seq"] + 1, "type": "WorkflowStepStarted", "data": {"attempt": 1}})


def _torn_last(lines: list[bytes]) -> tuple[list[bytes], None]:
    torn = _next(lines)
    return [*lines, torn[: len(torn) // 2]], None


def _zeros(lines: list[bytes]) -> tuple[list[bytes], None]:
    return [*lines, bytes(64 * 1024)], None


def _torn_then_zeros(lines: list[bytes]) -> tuple[list[bytes], None]:
    return [*lines, _next(lines)[:40] + bytes(4096)], None


def _empty(run_dir: Path) -> Where:
    (run_dir / "journal.jsonl").write_bytes(b"")
    return Where("journal.jsonl", 1, "holds no record, but manifest.json was written after record 1")


def _missing(run_dir: Path) -> Where:
    (run_dir / "journal.jsonl").unlink()
    return Where("journal.jsonl", None, "missing")


def _a_folder(run_dir: Path) -> Where:
    (run_dir / "journal.jsonl").unlink()
    (run_dir / "journal.jsonl").mkdir()
    return Where("journal.jsonl", None, "cannot be read (Is a directory)")


def _a_symlink(run_dir: Path) -> Where:
    """An attacker's journal: a link to a file of the system."""
    (run_dir / "journal.jsonl").unlink()
    (run_dir / "journal.jsonl").symlink_to("/etc/passwd")
    return Where("journal.jsonl", 1, "not valid JSON")


def _shorter(run_dir: Path) -> Where:
    records = len(_lines(run_dir))
    _edit_manifest(run_dir, lambda m: m.update(journal_seq=records + 3))
    return Where("journal.jsonl", records + 1, f"ends after record {records}, but manifest.json was written after "
                                               f"record {records + 3}")


def _edit_manifest(run_dir: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_bytes())
    edit(manifest)
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _manifest(edit: Callable[[dict[str, Any]], Any], says: str) -> Callable[[Path], Where]:
    def apply(run_dir: Path) -> Where:
        _edit_manifest(run_dir, edit)
        return Where("manifest.json", None, says)

    return apply


def _manifest_bytes(data: bytes | None, says: str, line: int | None = None) -> Callable[[Path], Where]:
    def apply(run_dir: Path) -> Where:
        path = run_dir / "manifest.json"
        path.unlink()
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
        return Where("manifest.json", line, says)

    return apply


def _no_manifest(run_dir: Path) -> Where:
    (run_dir / "manifest.json").unlink()
    return Where("manifest.json", None, "missing: the run's workflow spec is in no other file")


def _audit(name: str, data: bytes, says: str, line: int | None = None) -> Callable[[Path], Where]:
    def apply(run_dir: Path) -> Where:
        (run_dir / name).write_bytes(data)
        return Where(name, line, says)

    return apply


def _timeline(run_dir: Path) -> None:
    (run_dir / "timeline.json").write_text("{not json", encoding="utf-8")  # derived: rebuilt by its readers


def _stale_temp(run_dir: Path) -> None:
    """What a writer killed mid snapshot leaves: a temporary file of a process that is gone."""
    (run_dir / f".manifest.json.{_dead_pid()}.tmp").write_text('{"half": ', encoding="utf-8")


def _dead_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        pid += 1


_GATE = b'[{"gate_id": "step:announce", "status": "maybe", "created_at": "2026-01-01T00:00:00+00:00"}]'

DAMAGE = [
    # the journal, line by line: one model of a record, seq contiguous, the run's own
    Damage("duplicated-line", _journal(_duplicated, "where {line} was expected (a record is repeated")),
    Damage("deleted-middle-line", _journal(_deleted, "where {line} was expected (a record is missing before it)")),
    Damage("data-a-list", _edit_line(lambda r: r.update(data=[1, 2]), "data is an array, not an object")),
    Damage("seq-a-string", _edit_line(lambda r: r.update(seq=str(r["seq"])), "not a positive integer")),
    Damage("seq-zero", _edit_line(lambda r: r.update(seq=0), "seq is 0, not a positive integer")),
    Damage("unknown-event-type", _edit_line(lambda r: r.update(type="WorkflowExploded"),
                                            'unknown event type "WorkflowExploded"')),
    Damage("another-runs-record", _edit_line(lambda r: r.update(run_id=OTHER_RUN), "a record of another run")),
    Damage("step-id-a-number", _edit_line(lambda r: r.update(step_id=7), "step_id is 7, not a string or null")),
    Damage("field-missing", _edit_line(lambda r: r.pop("time"), "field 'time' is missing")),
    Damage("field-added", _edit_line(lambda r: r.update(extra=1), "unknown field")),
    Damage("field-name-a-line-break", _edit_line(lambda r: r.update({"a\u2028b\nc": 1}), "unknown field")),
    Damage("record-an-array", _journal(_inserted(b"[1, 2, 3]\n"), "an array, not a JSON object")),
    Damage("not-json-in-the-middle", _journal(_inserted(b"this is not json\n"), "not valid JSON")),
    Damage("zeros-in-the-middle", _journal(_inserted(bytes(100) + b"\n"), "not valid JSON")),
    Damage("torn-line-in-the-middle", _journal(_torn_middle, "not valid JSON")),
    Damage("not-utf8-in-the-middle", _journal(_not_utf8, "not valid JSON")),
    # records that are well formed but cannot follow the ones before them (the fold)
    Damage("step-completed-twice", _append(_completed_again, "completed -> completed is not allowed")),
    Damage("call-without-key", _append(lambda last, records: {"type": "CallRecorded", "step_id": last["step_id"],
                                                              "data": {"op": "read"}}, "its data has no 'key'")),
    Damage("step-name-a-number", _append(_summary_number, "name is not a string")),
    Damage("model-usage-not-a-number", _append(lambda last, records: {
        "type": "CallRecorded", "step_id": last["step_id"], "data": {
            "key": "s9/1/0/memo", "op": "memo:openai", "args": {}, "result": {"usage": {"input_tokens": "many"}}}},
        "result.usage.input_tokens is not a number")),
    # the journal as a whole
    Damage("empty-journal", _empty),
    Damage("missing-journal", _missing),
    Damage("journal-a-folder", _a_folder),
    Damage("journal-a-link-to-etc-passwd", _a_symlink),
    Damage("journal-shorter-than-manifest", _shorter),
    # the manifest: the workflow spec is in no other file, so nothing can repair it but a backup
    Damage("manifest-missing", _no_manifest, repairable=False),
    Damage("manifest-not-json", _manifest_bytes(b'{"run_id": "x", oops', "not valid JSON", line=1),
           repairable=False),
    Damage("manifest-empty", _manifest_bytes(b"", "not valid JSON", line=1), repairable=False),
    Damage("manifest-an-array", _manifest_bytes(b"[1, 2]", "not a JSON object"), repairable=False),
    Damage("manifest-a-folder", _manifest_bytes(None, "cannot be read (Is a directory)"), repairable=False),
    Damage("manifest-without-workflow", _manifest(lambda m: m.pop("workflow"), "has no workflow spec"),
           repairable=False),
    Damage("manifest-status-a-number", _manifest(lambda m: m.update(status=3), "'status' is not one of"),
           repairable=False),
    Damage("manifest-variables-a-list", _manifest(lambda m: m.update(variables=[1]), "'variables' is not an object"),
           repairable=False),
    Damage("manifest-steps-not-a-list", _manifest(lambda m: m["workflow"].update(steps={"a": 1}),
                                                  "'workflow.steps' is not a list of steps"), repairable=False),
    Damage("manifest-step-without-id", _manifest(lambda m: m["workflow"]["steps"][0].pop("id"),
                                                 "workflow.steps.0.id: Field required"), repairable=False),
    Damage("manifest-mode-unknown", _manifest(lambda m: m.update(mode="sideways"), "mode: Input should be"),
           repairable=False),
    Damage("manifest-journal-seq-a-string", _manifest(lambda m: m.update(journal_seq="1"),
                                                      "journal_seq: Input should be a valid integer"),
           repairable=False),
    Damage("manifest-created-at-a-number", _manifest(lambda m: m.update(created_at=5),
                                                     "created_at: Input should be a valid string"), repairable=False),
    Damage("manifest-executor-options-a-list", _manifest(lambda m: m.update(executor_options=[1]),
                                                         "executor_options: Input should be"), repairable=False),
    Damage("manifest-of-another-run", _manifest(lambda m: m.update(run_id=OTHER_RUN), f"run_id is '{OTHER_RUN}'"),
           repairable=False),
    # the audit files read back by show, export and a resume
    Damage("gates-not-json", _audit("gates.json", b"{nope", "not valid JSON", line=1)),
    Damage("gates-bad-status", _audit("gates.json", _GATE, "record 1: status: Input should be")),
    Damage("artifacts-not-a-list", _audit("artifacts.json", b'{"a": 1}', "not a list of records")),
    Damage("artifacts-path-a-number", _audit("artifacts.json", b'[{"path": 5, "sha256": "x", "recorded_at": "t"}]',
                                             "record 1: path: Input should be a valid string")),
    Damage("artifact-field-a-line-break", _audit("artifacts.json", b'[{"path": "a", "sha256": "x", "recorded_at": '
                                                 b'"t", "\\u0085": 1}]', "Extra inputs are not permitted")),
    Damage("tool-results-not-json", _audit("tool_results.json", b"[{", "not valid JSON", line=1)),
    Damage("tool-results-bad-status", _audit("tool_results.json", b'[{"name": "shell", "status": "fine", '
                                             b'"started_at": "t", "ended_at": "t"}]', "record 1: status")),
    Damage("approvals-not-json", _audit("approvals.json", b"[{", "not valid JSON", line=1)),
    Damage("drr-not-a-list", _audit("drr.json", b"7", "not a list of records")),
    Damage("evidence-reliability-a-string", _audit("evidence.json", b'[{"id": "e", "claim": "c", "level": "L1", '
                                                   b'"source": "s", "date": "2026-01-01", "reliability": "high"}]',
                                                   "record 1: reliability")),
    # what a crash leaves: not damage
    Damage("torn-last-line", _journal(_torn_last, ""), normal=True),
    Damage("zeros-after-the-records", _journal(_zeros, ""), normal=True),
    Damage("torn-last-line-then-zeros", _journal(_torn_then_zeros, ""), normal=True),
    Damage("timeline-not-json", lambda run_dir: _timeline(run_dir), normal=True),
    Damage("temp-file-of-a-killed-writer", lambda run_dir: _stale_temp(run_dir), normal=True),
]


# -- the commands --------------------------------------------------------------------------------------------
def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (and every folder, every link) with what it holds; but the digest
    (summary.json), derived data that a reader rebuilds and saves when the run's files changed."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if name == "summary.json":
            continue
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[name] = "folder"
        elif path.name != "lock":
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


def _check_damage_reported(line: str, run_dir: Path, where: Where) -> None:
    at = f"{run_dir / where.file}:{where.line}: " if where.line else f"{run_dir / where.file}: "
    assert at in line, (at, line)
    assert where.says.format(line=where.line) in line, (where.says, line)
    assert f"stepline doctor {run_dir.name}" in line, line  # where to learn more


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.name for d in DAMAGE])
@pytest.mark.parametrize("base", list(BUILDERS))
def test_damage_is_one_line_exit_6_and_doctor_repairs_what_it_can(
        base: str, damage: Damage, bases: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every command names the damage in one line (exit 6) or, for a crash's tail, accepts it; doctor explains
    it; --truncate-to-last-good backs up and repairs a run whose manifest is whole, and resume then completes."""
    project = tmp_path / "project"
    shutil.copytree(bases[base], project, symlinks=True)
    run_dir = run_dir_of(project)
    run_id = run_dir.name
    where = damage.apply(run_dir)
    before = _tree(run_dir)
    at = ["-C", str(project)]
    export = tmp_path / "run.json"

    for command in (["status", run_id], ["show", run_id], ["export", run_id, "-o", str(export)]):
        code, out, err = _cli([*command, *at], capsys)
        if where is None:
            assert code == 0, (command, err)
            assert "error" not in err
        else:
            assert code == 6, (command, code, out, err)
            _check_damage_reported(_one_error(err), run_dir, where)
    assert export.is_file() == (where is None)

    code, out, err = _cli(["status", run_id, "--verbose", *at], capsys)
    assert (code, err) == (0 if where is None else 6, ""), (code, err)
    assert "verdict: " in out
    code, out, err = _cli(["doctor", run_id, *at], capsys)
    assert code == (0 if where is None else 6) and err == "", (code, err)
    verdict = out[out.index("verdict: "):].replace("\n", " ")
    if where is None:
        assert "verdict: whole" in out
    else:
        short = f"{where.file}:{where.line}: " if where.line else f"{where.file}: "
        assert short in out, out
        resumable = "can be resumed" if damage.repairable else "cannot be resumed"
        assert verdict.startswith(f"verdict: {resumable}"), verdict
    code, out, err = _cli(["doctor", run_id, "--json", *at], capsys)
    assert json.loads(out)["damaged"] is (where is not None) and json.loads(out)["repairable"] is (
        where is not None and damage.repairable)
    code, out, err = _cli(["list", "--json", *at], capsys)
    assert code == 0, err
    [row] = json.loads(out)
    assert (row["status"] == "damaged") is (where is not None), row
    if where is not None:
        assert row["damage"].startswith(f"{where.file}:"), row
        code, out, err = _cli(["list", *at], capsys)
        assert code == 0 and f"{run_id} damaged: {where.file}" in out.replace("\n", " "), out
    assert _tree(run_dir) == before, "a command that reads a run changed its folder"

    code, out, err = _cli(["resume", run_id, "-q", *at], capsys)
    if where is None:
        assert code == 0, err
        assert not list(run_dir.glob(".*.tmp"))
        return
    assert code == 6, err
    _check_damage_reported(_one_error(err), run_dir, where)
    assert _tree(run_dir) == before, "a resume refused for damage changed the run's folder"

    code, out, err = _cli(["doctor", run_id, "--truncate-to-last-good", *at], capsys)
    if not damage.repairable:
        assert code == 6
        assert "cannot be repaired here" in _one_error(err)
        assert _tree(run_dir) == before
        return
    assert code == 0, (out, err)
    [backup] = run_dir.glob("backup-*")
    kept = _tree(backup)
    for name in {where.file, "manifest.json"} & before.keys():  # the damaged file and the manifest, as they were
        assert kept[name] == before[name], name
    assert "verdict: whole" in out
    code, out, err = _cli(["resume", run_id, "-q", *at], capsys)
    if base == "release" and "asked again" in verdict:  # its approval was cut off: a person gives it again
        assert code == 9, err
        assert _cli(["approve", run_id, "step:announce", "--by", "ada", *at], capsys)[0] == 0
        code, out, err = _cli(["resume", run_id, "-q", *at], capsys)
    assert code == 0, err
    code, out, err = _cli(["status", run_id, "--json", *at], capsys)
    assert json.loads(out)["status"] == "completed"
