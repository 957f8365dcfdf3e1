"""Crash safety of CCW sessions for real: SIGKILL `stepline ccw execute` at many points of a 30-task parallel
session, check the session files after every kill, resume, and count each task's effect from outside."""

from __future__ import annotations

import importlib.util
import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from engine import crash_child
from stepline.interfaces.cli._app import run_cli

BENCH_GEN = Path(__file__).resolve().parents[2] / "bench" / "ccw_gen.py"
TASKS = 30


def generate(project: Path, tasks: int = TASKS, *, seed: int = 11, max_deps: int = 2) -> Path:
    """A random-DAG session of ``tasks`` tasks from the bench's generator, in ``project``."""
    spec = importlib.util.spec_from_file_location("ccw_gen", BENCH_GEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    session_dir: Path = module.generate_session(project, tasks, seed=seed, max_deps=max_deps)
    return session_dir


def _pending_intents(project: Path) -> set[str]:
    """Tasks whose completion intent is journaled without its done record (to be redone on resume)."""
    started: set[str] = set()
    done: set[str] = set()
    for journal in (project / ".stepline" / "runs").glob("*/journal.jsonl"):
        for line in journal.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # the torn last line of a killed write
                continue
            if event["data"].get("op") == "ccw_complete":
                (started if event["type"] == "CallStarted" else done).add(event["step_id"])
    return started - done


def _status(session_dir: Path, task: str) -> str:
    return str(json.loads((session_dir / ".task" / f"{task}.json").read_text(encoding="utf-8"))["status"])


def _pending_intents_applied_missing(session_dir: Path, in_flight: set[str]) -> set[str]:
    """Of the completions a kill left in flight, those whose task JSON still does not say completed."""
    return {task for task in in_flight if _status(session_dir, task) != "completed"}


def _check_agreement(session_dir: Path, in_flight: set[str]) -> int:
    """Every task's TODO box, JSON status and summary agree, except completions still in flight."""
    todo = (session_dir / "TODO_LIST.md").read_text(encoding="utf-8").splitlines()
    ticked = {line.split("**")[1] for line in todo if line.startswith("- [x]")}
    assert all(f"[✅](./.summaries/{task}-summary.md)" in line
               for line in todo for task in ticked if f"**{task}**" in line)
    completed = 0
    for k in range(1, TASKS + 1):
        task = f"IMPL-{k}"
        status = json.loads((session_dir / ".task" / f"{task}.json").read_text(encoding="utf-8"))["status"]
        summary = (session_dir / ".summaries" / f"{task}-summary.md").is_file()
        if task not in in_flight:
            assert (task in ticked) == (status == "completed") == summary, (task, task in ticked, status, summary)
        completed += task in ticked
    return completed


@pytest.mark.slow
def test_sigkill_anywhere_in_a_parallel_session_keeps_files_consistent_and_runs_each_task_once(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Killed mid journal record, mid effect append, between a temp file and its rename, and at random
    instants, the session's three files agree after every kill (up to journaled in-flight completions),
    and the resumed session ends with every task completed and its effect done exactly once."""
    session_dir = generate(project)
    script = project / "script.yaml"
    script.write_text(yaml.safe_dump({"default": "error", "steps": {
        f"IMPL-{k}": [{"write_output": {"content": f"IMPL-{k}\n", "path": "effects.log"}},
                      {"finish": {"summary": f"did IMPL-{k}"}}] for k in range(1, TASKS + 1)}}), encoding="utf-8")
    args = ["ccw", "execute", "--resume-session", session_dir.name, "--script", str(script), "-j", "4",
            "-C", str(project), "-q"]
    rng = random.Random(20261122)
    # Small counts: each process gets a few tasks further before it dies, so the kills span the whole session.
    plan = ([("journal", rng.randint(2, 20)) for _ in range(10)] + [("output", rng.randint(1, 3)) for _ in range(6)]
            + [("snapshot", rng.randint(1, 6)) for _ in range(8)] + [("timer", 0) for _ in range(4)])
    rng.shuffle(plan)
    kills = redo_points = 0
    for kind, n in plan:
        if kind == "timer":
            child = crash_child.start("none", 0, args)
            time.sleep(rng.uniform(0.4, 0.9))
            child.kill()
            code, why = child.wait()
        else:
            code, why = crash_child.run(kind, n, args)
        in_flight = _pending_intents(project)
        _check_agreement(session_dir, in_flight)  # the raw files: they may lag only the journaled completions
        redo_points += bool(in_flight)
        # `ccw status` only reads: it prints the files' statuses, and every completion still in flight (journaled,
        # not all in the files yet) as `completing`; the next execute writes them.
        capsys.readouterr()
        assert run_cli(["ccw", "status", session_dir.name, "-C", str(project), "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        completing = {row["id"] for row in shown["tasks"] if row["status"] == "completing"}
        assert _pending_intents_applied_missing(session_dir, in_flight) <= completing
        if code == 0:
            continue
        assert code == -signal.SIGKILL, (kind, n, code, why)
        kills += 1
    code, why = crash_child.run("none", 0, args)
    assert code == 0, why
    assert kills >= 12 and redo_points >= 1, (kills, redo_points)  # some kills fell inside a completion
    assert _check_agreement(session_dir, set()) == TASKS
    counts = Counter((project / "effects.log").read_text(encoding="utf-8").splitlines())
    assert counts == Counter({f"IMPL-{k}": 1 for k in range(1, TASKS + 1)})
    assert not list(session_dir.rglob(".*.tmp"))
