"""A step's context survives a SIGKILL: the resumed step replays the journaled context (same fingerprint) and
reports a source edited in between as drift; a new run after an edit reports drift naming the source."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import yaml

from stepline.store import read_journal

CHILD = Path(__file__).resolve().parents[1] / "engine" / "crash_child.py"
DOC = "# Release notes\n\nThe release is cut on Thursdays. Tags are signed.\n"


def _project(project: Path) -> tuple[Path, Path]:
    (project / "docs").mkdir()
    (project / "docs" / "release.md").write_text(DOC, encoding="utf-8")
    steps = [{"id": "notes", "outputs": ["effects.log"],
              "inputs": {"telis_query": "when is the release cut", "telis_shard_limit": 1}}]
    wf = project / "flow.yaml"
    wf.write_text(yaml.safe_dump({"id": "release", "steps": steps}), encoding="utf-8")
    script = project / "script.yaml"
    script.write_text(yaml.safe_dump({"steps": {"notes": [{"write_output": {"content": "notes\n"}},
                                                          {"finish": {"summary": "wrote"}}]}}), encoding="utf-8")
    return wf, script


def _child(project: Path, kind: str, n: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), kind, str(n), "--", *args, "-C", str(project), "-q"],
                          capture_output=True, text=True, timeout=120)


def _events(project: Path, run_id: str, kind: str) -> list:
    return [e for e in read_journal(project / ".stepline" / "runs" / run_id / "journal.jsonl") if e.type == kind]


def test_a_resumed_step_gets_the_journaled_context_and_an_edited_source_is_drift(project: Path) -> None:
    """Killed while the step writes its output (its context already journaled); the doc is edited; the resume
    completes the step with the same fingerprint (one ContextResolved) and a ContextDrift naming the doc."""
    wf, script = _project(project)
    killed = _child(project, "output", 1, "run", str(wf), "--script", str(script))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (run_id,) = [p.name for p in (project / ".stepline" / "runs").iterdir()]
    (before,) = _events(project, run_id, "ContextResolved")
    assert before.data["context"]["shards"][0]["id"] == "docs/release.md#release-notes"
    (project / "docs" / "release.md").write_text(DOC + "\nHotfixes ship any day.\n", encoding="utf-8")

    resumed = _child(project, "none", 0, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    (after,) = _events(project, run_id, "ContextResolved")  # replayed, not resolved again
    assert after.data["fingerprint"] == before.data["fingerprint"]
    (drift,) = _events(project, run_id, "ContextDrift")
    assert drift.data["replayed"] is True and drift.data["fingerprint"] == before.data["fingerprint"]
    assert [s["source"] for s in drift.data["sources"]] == ["docs/release.md"]
    assert drift.data["sources"][0]["was"] == before.data["context"]["sources"]["docs/release.md"]
    assert (project / "effects.log").read_text(encoding="utf-8") == "notes\n"

    # A new run sees the edited doc: a new fingerprint, and drift naming the doc and where it was last used.
    again = _child(project, "none", 0, "run", str(wf), "--script", str(script))
    assert again.returncode == 0, again.stderr
    (second,) = [p.name for p in (project / ".stepline" / "runs").iterdir() if p.name != run_id]
    (fresh,) = _events(project, second, "ContextResolved")
    assert fresh.data["fingerprint"] != before.data["fingerprint"]
    assert "Hotfixes" in fresh.data["context"]["shards"][0]["text"]
    (new_drift,) = _events(project, second, "ContextDrift")
    assert new_drift.data["replayed"] is False
    assert new_drift.data["sources"][0]["source"] == "docs/release.md"
    assert new_drift.data["sources"][0]["since"] == f"run {run_id} step notes"


def test_an_unchanged_source_gives_the_same_fingerprint_and_no_drift_between_runs(project: Path) -> None:
    """Two runs over the same docs: equal fingerprints, no ContextDrift."""
    wf, script = _project(project)
    for _ in range(2):
        assert _child(project, "none", 0, "run", str(wf), "--script", str(script)).returncode == 0
    runs = sorted(p.name for p in (project / ".stepline" / "runs").iterdir())
    prints = {_events(project, r, "ContextResolved")[0].data["fingerprint"] for r in runs}
    assert len(runs) == 2 and len(prints) == 1
    assert all(_events(project, r, "ContextDrift") == [] for r in runs)
