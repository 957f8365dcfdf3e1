"""Crash safety for real: SIGKILL a run at many points, resume each time, and count effects from outside."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from engine import crash_child

STEPS = 200


def _workflow(project: Path) -> tuple[Path, Path]:
    steps = [{"id": f"s{i:03d}", "outputs": ["effects.log"]} for i in range(STEPS)]
    wf = project / "flow.yaml"
    wf.write_text(yaml.safe_dump({"id": "crashy", "steps": steps}), encoding="utf-8")
    # Every step appends one line to effects.log through the protocol and sets a variable: the count of
    # lines per step, read from outside the process, is the number of times each step's effect happened.
    script = {"default": "error", "steps": {
        f"s{i:03d}": [{"write_output": {"content": f"s{i:03d}\n"}}, {"set_var": {"name": f"v{i}", "value": i}},
                      {"finish": {"summary": f"did s{i:03d}"}}] for i in range(STEPS)}}
    sc = project / "script.yaml"
    sc.write_text(yaml.safe_dump(script), encoding="utf-8")
    return wf, sc


def _child(project: Path, kind: str, n: int, *args: str) -> tuple[int, str]:
    """Run ``stepline ARGS`` to its end in a child killed at the ``n``-th ``kind``: its exit code and output."""
    return crash_child.run(kind, n, [*args, "-C", str(project), "-q"])


def _run_id(project: Path) -> str:
    runs = sorted((project / ".stepline" / "runs").iterdir())
    assert len(runs) == 1
    return runs[0].name


def _completed(run_dir: Path) -> bool:
    """Whether the journal holds the run's completion (read as stepline reads it: up to a torn record)."""
    from stepline.store import read_journal

    return any(e.type == "WorkflowCompleted" for e in read_journal(run_dir / "journal.jsonl"))


@pytest.mark.slow
def test_sigkill_at_many_points_then_resume_runs_every_step_exactly_once(project: Path) -> None:
    """Killed mid journal write, mid snapshot, mid output append, at random instants and after the run's last
    record, the run still ends with every step completed once and every effect done exactly once."""
    wf, script = _workflow(project)
    rng = random.Random(20261122)
    code, err = _child(project, "journal", 7, "run", str(wf), "--script", str(script))
    assert code == -signal.SIGKILL, err
    run_id = _run_id(project)
    run_dir = project / ".stepline" / "runs" / run_id
    plan = ([("journal", rng.randint(2, 60)) for _ in range(8)] + [("output", rng.randint(1, 25)) for _ in range(6)]
            + [("snapshot", 1) for _ in range(3)] + [("timer", 0) for _ in range(6)])
    rng.shuffle(plan)
    kills = 1
    finished = False  # whether a resume of the plan saw the run to its end (or was killed after it)
    for kind, n in plan:
        if kind == "timer":  # an arbitrary instant, tied to no write: kill from outside while the resume works
            journal = run_dir / "journal.jsonl"
            target = journal.read_bytes().count(b"\n") + rng.randint(1, 40)
            child = crash_child.start("none", 0, ["resume", run_id, "-C", str(project), "-q"])
            # Once it has journaled a few records, whatever the machine's speed (a fixed delay let a fast one
            # finish the run, and a slow one not start it), then a moment more.
            deadline = time.monotonic() + 60
            while journal.read_bytes().count(b"\n") < target and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.005))
            child.kill()
            code, err = child.wait()
        else:
            code, err = _child(project, kind, n, "resume", run_id)
        if code == 0:
            finished = True
            break
        assert code == -signal.SIGKILL, f"resume killed by {kind} {n} exited {code}: {err}"
        kills += 1
        if _completed(run_dir):
            # Killed on its way out, after the run's last record (a kill from outside can land there, or the
            # snapshot after it): the run is complete, and the final resume must say so and tidy up after it.
            finished = True
            break
    if not finished:  # one more resume, killed at its final snapshot: after the run's last record
        assert _child(project, "manifest", 1, "resume", run_id)[0] == -signal.SIGKILL
        kills += 1
        assert _completed(run_dir)
        assert json.loads((run_dir / "manifest.json").read_text())["status"] != "completed"  # not yet said
    unsaid = json.loads((run_dir / "manifest.json").read_text())["status"] != "completed"
    code, err = _child(project, "none", 0, "resume", run_id)
    # It writes what the killed process did not: the manifest below, and the journal's closing cut (zeros left
    # after the records would not parse as lines below); then it reports the run completed (exit 0), or, when
    # the killed process had written it all, "already completed" (exit 5).
    assert code == (0 if unsaid else 5), err
    assert kills >= 10

    lines = (project / "effects.log").read_text().splitlines()
    counts = Counter(lines)
    assert len(counts) == STEPS and set(counts.values()) == {1}, counts.most_common(3)
    assert lines == sorted(lines)  # and in step order

    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    completed = Counter(e["step_id"] for e in events if e["type"] == "WorkflowStepCompleted")
    assert len(completed) == STEPS and set(completed.values()) == {1}
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["variables"]["v199"] == 199
    assert manifest["steps_by_status"] == {"completed": STEPS}  # the snapshot counts what the journal says
    assert not list(run_dir.glob(".*.tmp")) or all(p.stat().st_size >= 0 for p in run_dir.glob(".*.tmp"))
