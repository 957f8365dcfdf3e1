"""Real run directories to damage: made with the CLI, as a user makes them (tests/cli/test_damaged_runs.py,
tests/store/test_fuzz_rundirs.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import REPO
from stepline.interfaces.cli._app import run_cli

__all__ = ["BUILDERS", "cli_built_once", "interrupt", "run_dir_of"]


@contextmanager
def cli_built_once() -> Iterator[None]:
    """typer builds its click command anew on every call (~90 ms, most of a short command's time): build it once
    while this lasts. Every command still goes through :func:`run_cli`, its error handling and exit codes."""
    import typer.main

    from stepline.interfaces.cli import _commands  # noqa: F401 - registers the commands
    from stepline.interfaces.cli._app import app

    built = typer.main.get_command(app)
    original = typer.main.get_command
    typer.main.get_command = lambda typer_instance: built if typer_instance is app else original(typer_instance)
    try:
        yield
    finally:
        typer.main.get_command = original


def run_dir_of(project: Path) -> Path:
    """The folder of the project's only run."""
    [path] = (project / ".stepline" / "runs").iterdir()
    return path


def interrupt(run_dir: Path, completions: int) -> None:
    """Cut the journal after its ``completions``-th step completion, as a process killed there leaves it: its
    last manifest is the first one (written while the first steps were under way)."""
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    done = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "WorkflowStepCompleted"]
    journal.write_bytes(b"".join(lines[:done[completions - 1] + 1]))
    manifest = json.loads((run_dir / "manifest.json").read_bytes())
    manifest.update(status="running", journal_seq=1)
    manifest.pop("steps_by_status", None)
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (run_dir / "timeline.json").unlink(missing_ok=True)


def _native(root: Path) -> None:
    """Five native steps, each writing its output, run with the dry-run executor; killed after two."""
    steps = "".join(f"  - id: s{i}\n    body: Write part {i}.\n    outputs: ['out/part-{i}.md']\n" for i in range(1, 6))
    (root / "flow.yaml").write_text(f"id: parts\nvariables: {{topic: durability}}\nsteps:\n{steps}", encoding="utf-8")
    assert run_cli(["run", "flow.yaml", "-C", str(root), "--executor", "dry-run", "--yolo", "-q"]) == 0
    interrupt(run_dir_of(root), 2)


def _release(root: Path) -> None:
    """The release-notes example with its script: blocked at its human gate, then approved (not resumed)."""
    shutil.copytree(REPO / "examples" / "release-notes", root / "release-notes")
    (root / "CHANGES.md").write_text("- faster resume\n- clearer errors\n", encoding="utf-8")
    assert run_cli(["run", "release-notes/workflow.yaml", "--script", "release-notes/script.yaml", "-C", str(root),
                    "--non-interactive", "-q"]) == 9
    assert run_cli(["approve", run_dir_of(root).name, "step:announce", "--by", "ada", "-C", str(root)]) == 0


def _ccw(root: Path) -> None:
    """A CCW session of seven tasks (pre_analysis commands, dependencies), run with the dry-run executor; killed
    after three."""
    shutil.copytree(REPO / "tests" / "fixtures" / "ccw" / "project-active", root, dirs_exist_ok=True)
    assert run_cli(["run", ".workflow/active/WFS-auth-system", "-C", str(root), "--executor", "dry-run", "--yolo",
                    "-q"]) == 0
    interrupt(run_dir_of(root), 3)


#: How to make each kind of run in an empty project folder.
BUILDERS: dict[str, Callable[[Path], None]] = {"native": _native, "release": _release, "ccw": _ccw}
