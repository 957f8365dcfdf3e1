"""Engine overhead per step with full durability, against an fsync'd-append baseline measured in the same run.

Prints µs per no-op step, bytes of run directory per step, and the ratio to a loop that does exactly one
fsync'd JSONL append per step (the least any durable engine must do). Also times `stepline --help` against
`python -c pass`. Usage: python bench/engine_overhead.py [--steps N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stepline import Engine
from stepline.model import StepSpec, WorkflowSpec


def fsync_baseline(n: int, folder: Path) -> float:
    """Seconds for n appends of a small JSON record, each followed by fsync."""
    path = folder / "baseline.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.perf_counter()
    for i in range(n):
        record = json.dumps({"seq": i, "type": "WorkflowStepCompleted", "run_id": "run-x", "step_id": f"s{i}",
                             "time": "2026-01-01T00:00:00.000000+00:00", "data": {}})
        os.write(fd, (record + "\n").encode())
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def engine_run(n: int, folder: Path) -> tuple[float, int]:
    """Seconds to run n no-op steps through the engine, and the run directory's size in bytes."""
    workflow = WorkflowSpec(id="noop", steps=[StepSpec(id=f"s{i:05d}") for i in range(n)])
    engine = Engine(project_root=folder, executor="dry-run", mode="yolo")
    start = time.perf_counter()
    run = asyncio.run(engine.start(workflow))
    elapsed = time.perf_counter() - start
    assert run.status.value == "completed", run.status
    run_dir = engine.store.root / run.run_id
    size = sum(p.stat().st_size for p in run_dir.iterdir() if p.is_file())
    return elapsed, size


def cli_help_seconds(repeat: int) -> tuple[float, float]:
    """Median wall time of `stepline --help` and of `python -c pass`."""
    def timed(args: list[str]) -> float:
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    return (timed([sys.executable, "-m", "stepline.interfaces.cli", "--help"]),
            timed([sys.executable, "-c", "pass"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.steps
    engine_times, baseline_times, sizes = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
            baseline_times.append(fsync_baseline(n, Path(tmp)))
            elapsed, size = engine_run(n, Path(tmp))
            engine_times.append(elapsed)
            sizes.append(size)
    engine_us = statistics.median(engine_times) / n * 1e6
    baseline_us = statistics.median(baseline_times) / n * 1e6
    print(f"steps per run:            {n} (median of {args.repeat} runs)")
    print(f"engine:                   {engine_us:8.1f} µs/step (durable journal, dry-run executor)")
    print(f"fsync'd append baseline:  {baseline_us:8.1f} µs/step")
    print(f"ratio engine/baseline:    {engine_us / baseline_us:8.2f}x   (SPEC: within a small factor)")
    print(f"run directory:            {statistics.median(sizes) / n:8.0f} bytes/step")
    help_s, pass_s = cli_help_seconds(5)
    print(f"stepline --help:          {help_s * 1000:8.0f} ms   "
          f"(python -c pass: {pass_s * 1000:.0f} ms; target < 300 ms)")


if __name__ == "__main__":
    main()
