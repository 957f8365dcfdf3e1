"""fork, replay and diff never write, delete or read outside the project: a folder of the project that is a
symlink to elsewhere is not followed, and a run directory whose journal or manifest was edited to name paths
outside the project is refused in one line (exit 4), changing nothing, and named by `stepline doctor`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from .conftest import cli, run_path, tree_bytes
from .test_native import project, scripted_run

__all__ = ["project"]  # the native workflow's project, a fixture


@pytest.fixture
def victim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's folder outside the project, with files fork/replay must not touch."""
    folder = tmp_path_factory.mktemp("victim").resolve()
    for name in ("one.md", "two.md", "three.md"):
        (folder / name).write_text(f"the user's own {name}\n", encoding="utf-8")
    return folder


def _edit_journal(project: Path, run_id: str, old: str, new: str) -> None:
    journal = run_path(project, run_id) / "journal.jsonl"
    text = journal.read_text(encoding="utf-8")
    assert old in text
    journal.write_text(text.replace(old, new), encoding="utf-8")


def _one_line_refusal(code: int, out: str, *names: str) -> None:
    assert code == 4, out
    assert len(out.strip().splitlines()) == 1, out
    assert all(name in out for name in names), out


def test_fork_does_not_follow_a_symlinked_folder_out_of_the_project(
        project: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`out/` replaced by a symlink to the user's folder: putting the files back would delete the user's two.md
    and three.md there and write one.md into it. The fork is refused before anything changes."""
    parent = scripted_run(capsys, project)
    shutil.rmtree(project / "out")
    (project / "out").symlink_to(victim, target_is_directory=True)
    before = tree_bytes(victim)

    code, out = cli(capsys, project, "fork", parent, "--at", "two")
    assert code != 0, out
    assert "symlink" in out and "out/" in out, out
    assert tree_bytes(victim) == before
    assert not any(p.name.startswith("run-") and p.name != parent
                   for p in (project / ".stepline" / "runs").iterdir()), "a refused fork leaves no run behind"


@pytest.mark.parametrize("how", ["dotdot", "absolute"])
def test_an_edited_journal_cannot_retarget_the_deletes_and_writes_of_a_fork(
        project: Path, victim: Path, capsys: pytest.CaptureFixture[str], how: str) -> None:
    """The journal's paths of out/one.md (restored) and out/three.md (removed: created after the cut) edited to
    name the user's files: the fork is refused in one line (exit 4), nothing outside changes, `doctor` says
    which record names a path outside the project."""
    parent = scripted_run(capsys, project)
    outside = os.path.relpath(victim, project) if how == "dotdot" else str(victim)
    _edit_journal(project, parent, '"out/three.md"', json.dumps(f"{outside}/three.md"))
    _edit_journal(project, parent, '"out/one.md"', json.dumps(f"{outside}/one.md"))
    before = tree_bytes(victim)

    code, out = cli(capsys, project, "fork", parent, "--at", "two")
    _one_line_refusal(code, out, "journal.jsonl:", "outside the project")
    assert tree_bytes(victim) == before

    code, out = cli(capsys, project, "replay", parent, "--against", "wf.yaml", "--script", "script.yaml")
    _one_line_refusal(code, out, "journal.jsonl:", "outside the project")
    assert tree_bytes(victim) == before

    code, out = cli(capsys, project, "doctor", parent)
    assert code == 6, out  # damage: status, resume and fork refuse the run; the repair cuts the edited record
    assert re.search(r"journal\.jsonl:\d+: .*outside the project", out), out


def test_an_edited_manifest_project_root_is_refused(
        project: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest's project root edited to the user's folder: fork would remove out/two.md there (a run's
    files are put back in its project). Refused in one line (exit 4); `doctor` names the manifest and says fork,
replay and diff refuse the run."""
    parent = scripted_run(capsys, project)
    (victim / "out").mkdir()
    for name in ("two.md", "three.md"):
        (victim / "out" / name).write_text("the user's own\n", encoding="utf-8")
    manifest = run_path(project, parent) / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["project_root"] = str(victim)
    manifest.write_text(json.dumps(data), encoding="utf-8")
    before = tree_bytes(victim)

    code, out = cli(capsys, project, "fork", parent, "--at", "two")
    _one_line_refusal(code, out, "manifest.json", str(victim))
    assert tree_bytes(victim) == before

    code, out = cli(capsys, project, "doctor", parent)
    assert code == 0, out  # not damage: the run resumes here (a resume acts in the project it is run in)
    assert re.search(r"^  manifest\.json: project_root \S+ is not the project this run is in", out, re.M), out
    assert "fork, replay and diff refuse it" in out, out


def test_diff_does_not_read_a_file_outside_the_project(
        project: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An artifact record edited to name a file outside (with that file's sha256, and no stored copy): diff
    would print the file's content. Refused in one line (exit 4)."""
    (victim / "secret.txt").write_text("token=hunter2\n", encoding="utf-8")
    digest = hashlib.sha256(b"token=hunter2\n").hexdigest()
    parent = scripted_run(capsys, project)
    code, out = cli(capsys, project, "fork", parent, "--at", "three")
    assert code == 0, out
    child = re.search(r"^fork (run-\S+) of", out, re.M).group(1)  # type: ignore[union-attr]
    journal = run_path(project, child) / "journal.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(lines) if '"ArtifactReady"' in line and "out/three.md" in line)
    record = json.loads(lines[index])
    record["data"].update(path=str(victim / "secret.txt"), sha256=digest)
    lines[index] = json.dumps(record, separators=(",", ":"))
    journal.write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.rmtree(run_path(project, child) / "blobs", ignore_errors=True)

    code, out = cli(capsys, project, "diff", parent, child)
    _one_line_refusal(code, out, "journal.jsonl:", "outside the project")
    assert "hunter2" not in out
