"""Full and read-only disks, for real: a small tmpfs and a read-only bind mount that each test makes and removes.

A run that fills its disk must stop with one line naming the file and the cause (exit 1), leave no temporary
file, and — once there is room again — be completed by ``stepline resume`` with every step done once and every
output as a run on a roomy disk writes it; a run that could record nothing leaves no folder. A read-only disk
is reported the same way (``remount it read-write``); reading a run (status, show, list, doctor) still works.

Mounting needs root (CAP_SYS_ADMIN); where it is not allowed the tests are skipped and say so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fakes.disks import Disk, mount, mount_tmpfs, unmount
from stepline.interfaces.cli._app import run_cli

STEPS = 60


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[Path]:
    """An empty folder that is unmounted again, whatever the test mounted on it."""
    path = tmp_path / "disk"
    path.mkdir()
    yield path
    unmount(path)


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[Path]:
    """Where a read-only bind mount goes (unmounted again afterwards)."""
    path = tmp_path / "read-only"
    path.mkdir()
    yield path
    unmount(path)


def _bind_read_only(source: Path, target: Path) -> None:
    done = mount("--bind", str(source), str(target))
    if done.returncode:
        pytest.skip(f"a bind mount is not allowed here ({done.stderr.strip()})")
    done = mount("-o", "remount,bind,ro", str(target))
    assert done.returncode == 0, done.stderr


def _workflow(project: Path, *, quiet_steps: int = 0) -> None:
    """A native workflow of :data:`STEPS` steps; each after the first ``quiet_steps`` writes its own output."""
    lines = ["id: fill", "steps:"]
    for i in range(STEPS):
        lines.append(f"  - id: s{i:03}\n    body: Write part {i} of the report.")
        if i >= quiet_steps:
            lines.append(f"    outputs: ['out/part-{i:03}.md']")
    (project / "flow.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_cli(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _temp_files(root: Path) -> list[Path]:
    return [path for path in root.rglob(".*.tmp")]


def _outputs(project: Path) -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted((project / "out").glob("*.md"))}


def _runs(project: Path) -> list[Path]:
    root = project / ".stepline" / "runs"
    return sorted(root.iterdir()) if root.is_dir() else []


def _completions(run_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in (run_dir / "journal.jsonl").read_bytes().splitlines():
        record = json.loads(line)
        if record["type"] == "WorkflowStepCompleted":
            counts[record["step_id"]] = counts.get(record["step_id"], 0) + 1
    return counts


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The outputs of the workflow run on a roomy disk."""
    project = tmp_path_factory.mktemp("roomy")
    _workflow(project)
    assert run_cli(["run", "flow.yaml", "-C", str(project), "--executor", "dry-run", "--yolo", "-q"]) == 0
    return _outputs(project)


def _resumes_once_there_is_room(disk: Disk, project: Path, run_dir: Path, line: str, steps: int,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """What a run stopped by a full disk must do: say how it goes on; on the still-full disk, a resume says the
    same and loses nothing; with room again, the resume completes it, each step once."""
    assert f"then `stepline resume {run_dir.name}` continues the run" in line, line
    before = {p.name for p in run_dir.iterdir() if p.is_file()}
    code, _, err = _cli(capsys, "resume", run_dir.name, "-C", str(project), "-q")  # still full
    assert code == 1 and "No space left on device" in _one_error(err), err
    assert not _temp_files(disk.path)
    assert {p.name for p in run_dir.iterdir() if p.is_file()} >= before
    disk.resize("8m")
    code, _, err = _cli(capsys, "resume", run_dir.name, "-C", str(project), "-q")
    assert code == 0, err
    assert _completions(run_dir) == {f"s{i:03}": 1 for i in range(steps)}
    code, out, _ = _cli(capsys, "doctor", run_dir.name, "-C", str(project))
    assert code == 0 and "verdict: whole: the run is completed" in out
    assert not _temp_files(disk.path)


def test_a_run_that_fills_its_disk_stops_in_one_line_and_resume_completes_it(
        mount_point: Path, reference: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """On disks of growing sizes the run stops at different writes (before its first record, the journal, a
    step's output, a snapshot): each time one line naming the file and the cause, exit 1, no temporary file;
    with room again, resume completes it, the outputs as on a roomy disk. A run that could record nothing
    leaves no folder, and runs again once there is room."""
    stopped_at: set[str] = set()
    for size in range(16, 136, 8):  # KiB: where the disk fills moves with its size
        disk = mount_tmpfs(mount_point, f"{size}k")
        project = mount_point / "project"
        project.mkdir()
        _workflow(project)
        code, _, err = _cli(capsys, "run", "flow.yaml", "-C", str(project), "--executor", "dry-run", "--yolo", "-q")
        assert code == 1, (size, err)
        line = _one_error(err)
        assert "No space left on device (free some space on that disk" in line, line
        assert f"cannot write {mount_point}" in line or f"cannot lock {mount_point}" in line, line
        assert not _temp_files(mount_point), (size, _temp_files(mount_point))
        runs = _runs(project)
        if not runs:  # it stopped before its first record
            assert "cannot lock" in line or "recorded nothing (its folder is removed): start it again" in line, line
            stopped_at.add("before the first record")
            disk.resize("8m")
            assert _cli(capsys, "run", "flow.yaml", "-C", str(project), "--executor", "dry-run", "--yolo",
                        "-q")[0] == 0
        else:
            [run_dir] = runs
            path = Path(line.removeprefix("error: cannot write ").split(": No space left")[0])
            stopped_at.add(path.name if path.parent == run_dir else "a step's output")
            _resumes_once_there_is_room(disk, project, run_dir, line, STEPS, capsys)
        assert _outputs(project) == reference
        unmount(mount_point)
    assert "before the first record" in stopped_at and len(stopped_at) >= 3, stopped_at


def _scripted(project: Path, script_path: Path, big: dict[str, object]) -> None:
    """Four steps; the third makes the protocol call ``big`` (a large output or variable). The script is kept
    off the small disk."""
    steps = [{"id": f"s{i:03}", "body": f"Part {i}.", "outputs": [f"out/part-{i:03}.md"]} for i in range(4)]
    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "big", "steps": steps}), encoding="utf-8")
    script = {f"s{i:03}": [{"write_output": {"content": f"part {i}\n", "mode": "replace"}}, {"finish": {}}]
              for i in range(4)}
    script["s002"].insert(0, big)
    script_path.write_text(json.dumps({"steps": script}), encoding="utf-8")


@pytest.mark.parametrize(("call", "fills"), [
    ({"write_output": {"content": "x" * 300_000, "path": "out/big.md", "mode": "replace"}}, "out/big.md"),
    ({"write_output": {"content": "x" * 300_000, "path": "out/big.md", "mode": "append"}}, "out/big.md"),
    ({"set_var": {"name": "notes", "value": "x" * 300_000}}, ".stepline/runs/{run}/journal.jsonl"),
], ids=["output-replaced", "output-appended", "journal-record"])
def test_the_write_that_fills_the_disk_is_named_and_redone_on_resume(
        call: dict[str, object], fills: str, mount_point: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A step whose output (written whole, or appended) or whose journal record does not fit stops the run at
    that write: one line naming that file, exit 1, the step not failed; the resume redoes the write whole."""
    disk = mount_tmpfs(mount_point, "160k")
    project = mount_point / "project"
    project.mkdir()
    _scripted(project, tmp_path / "script.yaml", call)
    code, _, err = _cli(capsys, "run", "flow.yaml", "--script", str(tmp_path / "script.yaml"), "-C", str(project),
                        "-q")
    assert code == 1, err
    line = _one_error(err)
    [run_dir] = _runs(project)
    assert f"cannot write {project / fills.format(run=run_dir.name)}: No space left on device" in line, line
    assert _completions(run_dir) == {"s000": 1, "s001": 1}
    assert not _temp_files(mount_point)
    _resumes_once_there_is_room(disk, project, run_dir, line, 4, capsys)
    if "write_output" in call:
        assert (project / "out" / "big.md").read_text(encoding="utf-8") == "x" * 300_000  # whole, once


def test_a_read_only_disk_is_one_line_and_reading_a_run_still_works(
        mount_point: Path, read_only_view: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through a read-only bind mount: a new run is refused before it creates anything, a resume is refused
    before it changes anything (exit 1, one line, 'remount it read-write'); status, show, list, doctor and
    export read the run as usual; once writable again the run is resumed to completion."""
    mount_tmpfs(mount_point, "8m")
    project = mount_point / "project"
    project.mkdir()
    _workflow(project)
    assert run_cli(["run", "flow.yaml", "-C", str(project), "--executor", "dry-run", "--yolo", "-q"]) == 0
    [run_dir] = _runs(project)
    _cut_after_completions(run_dir, 40)  # as a process killed there leaves it
    _bind_read_only(mount_point, read_only_view)
    view = read_only_view / "project"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    code, _, err = _cli(capsys, "run", "flow.yaml", "-C", str(view), "--executor", "dry-run", "--yolo", "-q")
    assert code == 1
    line = _one_error(err)
    assert f"cannot create {view}/.stepline/runs/run-" in line and "Read-only file system" in line, line
    assert "remount it read-write" in line
    code, _, err = _cli(capsys, "resume", run_dir.name, "-C", str(view), "-q")
    assert code == 1
    assert f"cannot lock {view}/.stepline/runs/{run_dir.name}/lock: Read-only file system" in _one_error(err)
    for command in (["status", run_dir.name], ["show", run_dir.name], ["list"], ["doctor", run_dir.name],
                    ["export", run_dir.name, "-o", str(mount_point.parent / "run.json")]):
        code, _, err = _cli(capsys, *command, "-C", str(view))
        assert code == 0 and err.strip() in ("", f"wrote {mount_point.parent / 'run.json'}"), (command, err)
    assert _runs(project) == [run_dir]
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    assert not _temp_files(mount_point)

    unmount(read_only_view)
    assert _cli(capsys, "resume", run_dir.name, "-C", str(project), "-q")[0] == 0
    assert _completions(run_dir) == {f"s{i:03}": 1 for i in range(STEPS)}


def test_outputs_on_a_read_only_disk_stop_the_run_at_the_step_that_writes(
        mount_point: Path, read_only_view: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run's folder is writable but the project is read-only: steps that write nothing complete, the first
    that writes stops the run (one line naming the file, exit 1, no step failed); once the project is writable
    the resume completes every step once."""
    mount_tmpfs(mount_point, "8m")
    project = mount_point / "project"
    (project / "config").mkdir(parents=True)
    storage = tmp_path / "runs"
    (project / "config" / "runtime.yaml").write_text(f"runtime: {{storage_root: '{storage}'}}\n", encoding="utf-8")
    _workflow(project, quiet_steps=10)
    _bind_read_only(mount_point, read_only_view)
    view = read_only_view / "project"

    code, _, err = _cli(capsys, "run", "flow.yaml", "-C", str(view), "--executor", "dry-run", "--yolo", "-q")
    assert code == 1, err
    line = _one_error(err)
    assert f"cannot write {view}/out" in line and "Read-only file system" in line, line
    [run_dir] = sorted(storage.iterdir())
    assert f"then `stepline resume {run_dir.name}` continues the run" in line
    assert _completions(run_dir) == {f"s{i:03}": 1 for i in range(10)}
    code, out, _ = _cli(capsys, "status", run_dir.name, "-C", str(view), "--json")
    status = json.loads(out)
    assert status["status"] == "running" and not [s for s in status["steps"] if s.get("status") == "failed"]

    unmount(read_only_view)
    done = mount("--bind", str(mount_point), str(read_only_view))  # the same path, writable again
    assert done.returncode == 0, done.stderr
    assert _cli(capsys, "resume", run_dir.name, "-C", str(view), "-q")[0] == 0
    assert _completions(run_dir) == {f"s{i:03}": 1 for i in range(STEPS)}
    assert len(list((project / "out").glob("*.md"))) == STEPS - 10
    assert not _temp_files(mount_point) and not _temp_files(storage)


def _cut_after_completions(run_dir: Path, completions: int) -> None:
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    done = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "WorkflowStepCompleted"]
    journal.write_bytes(b"".join(lines[:done[completions - 1] + 1]))
    manifest = json.loads((run_dir / "manifest.json").read_bytes())
    manifest.update(status="running", journal_seq=1)
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
