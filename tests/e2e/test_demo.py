"""The Quick start's demo (scripts/demo.sh runs examples/demo.py in the checkout's .venv) runs end to end: a skill
stops at its menu, takes the answer, writes its document and code; the changed skill's replay and the diff report
the changed file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
V611 = ROOT.parent / "shared" / "corpus" / "bmad" / "v6.11.0"


def run_demo(tmp_path: Path, bmad: Path | None) -> str:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    if bmad is not None:
        env["STEPLINE_DEMO_BMAD"] = str(bmad)
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def check(out: str, skill: str, spec: str) -> None:
    assert f"$ stepline run {skill} --script script.yaml --non-interactive" in out
    assert "waiting for an answer" in out and "[A] Approve  [E] Edit" in out
    assert "completed: " in out
    assert f"--- {spec}\n---\ntitle: 'Greet by name'" in out and "status: 'ready-for-dev'" in out
    replay, diff = out.split("$ stepline replay ")[1].split("$ stepline diff ")
    for report in (replay, diff):
        assert "artifacts: 1 the same, 1 differ" in report
        assert "-    return f'Hello, {name}!'\n+    return f'Bonjour, {name} !'" in report


@pytest.mark.skipif(not V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_demo_with_bmad_v611(tmp_path: Path) -> None:
    """With BMAD v6.11.0 beside the checkout, the demo installs it and runs bmad-build."""
    out = run_demo(tmp_path, None)
    assert "$ stepline bmad install" in out
    check(out, "_bmad/bmm/ship/bmad-build", "docs/implementation-artifacts/spec-greeting.md")


def test_demo_without_bmad_says_so_and_runs_its_own_skill(tmp_path: Path) -> None:
    """Without BMAD, one line says so and the demo runs the small skill in examples/demo-skill."""
    out = run_demo(tmp_path, tmp_path / "no-bmad-here")
    assert f"BMAD v6.11.0 is not at {tmp_path / 'no-bmad-here'}: running the small skill" in out
    check(out, "greeting", "docs/spec-greeting.md")
