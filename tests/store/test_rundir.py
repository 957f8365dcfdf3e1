"""Run directories: what ``stepline list`` reads of a run without replaying its journal."""

from __future__ import annotations

import json
from pathlib import Path

from stepline.store import MANIFEST_COUNTS, RunStore


def test_a_summary_counts_the_steps_from_the_manifests_count_by_status(tmp_path: Path) -> None:
    """Done is completed plus skipped; the total is the spec's steps (a flow may add visits: then the count's)."""
    store = RunStore(tmp_path)
    run_dir = store.create("run-20260101000000-abcdef12")
    manifest = {"run_id": run_dir.run_id, "status": "failed", "created_at": "c", "updated_at": "u",
                "workflow": {"id": "w", "steps": [{"id": s} for s in "abcd"]},
                MANIFEST_COUNTS: {"completed": 1, "skipped": 1, "failed": 1, "pending": 1}}
    (run_dir.path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (run_dir.path / "journal.jsonl").touch()  # every run has one (list checks it is there)
    [summary] = store.summaries()
    assert (summary.workflow, summary.status, summary.steps_done, summary.steps_total) == ("w", "failed", 2, 4)
    manifest["workflow"] = {"id": "w"}
    (run_dir.path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert next(store.summaries()).steps_total == 4
