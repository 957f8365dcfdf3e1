"""Issue 30 item 3: a 1-step native run's cold start pays only for what it uses. The audit records (gates,
approvals, tool results, artifacts, evidence, design rationale) build their validators on first use: a plain run
builds none, a run that stops at a gate builds the gate's (and it is written and read back as before)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_PROBE = (
    "import json, sys\n"
    "from stepline.interfaces.cli._app import run_cli\n"
    "code = run_cli(['run', 'flow.yaml', '-q', '--non-interactive'])\n"
    "from stepline.model import _records\n"
    "built = sorted(name for name in _records.__all__\n"
    "               if isinstance(getattr(_records, name), type) and getattr(_records, name).__pydantic_complete__)\n"
    "print(json.dumps([code, built]))\n"
)


@pytest.mark.parametrize(("step", "code", "built"), [
    ({"id": "only", "body": "hi"}, 0, []),
    ({"id": "only", "body": "hi", "human_gate": "required"}, 9, ["Gate"]),
])
def test_audit_records_are_built_only_when_a_run_uses_them(project: Path, write_workflow: Callable[..., Path],
                                                           step: dict[str, Any], code: int, built: list[str]) -> None:
    write_workflow([step])
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=project, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [code, built]
    if built:  # the gate that was built on first use is on disk and reads back
        gates = json.loads(next((project / ".stepline" / "runs").iterdir()).joinpath("gates.json").read_text())
        assert [gate["status"] for gate in gates] == ["pending"]


def test_the_stepline_process_spares_what_it_loaded_the_cyclic_collectors_walks(
        project: Path, write_workflow: Callable[..., Path]) -> None:
    """main() collects young objects less often (start-up loads long-lived objects, not garbage) and freezes the
    objects before exiting (no full collection walks pydantic's validators at shutdown); the run's outcome and exit
    code are as before."""
    write_workflow([{"id": "only", "body": "hi"}])
    probe = ("import atexit, gc\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count(), gc.get_threshold()[0]))\n"
             "from stepline.interfaces.cli import main\n"
             "main(['run', 'flow.yaml', '-q'])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    summary, frozen = done.stdout.splitlines()
    assert summary.startswith("run ") and summary.endswith(" completed: 1/1 steps")
    label, count, young_threshold = frozen.split()
    assert label == "frozen" and int(count) > 0
    assert int(young_threshold) >= 100_000
