"""How CCW execution scales: 10,000 no-op tasks in a random DAG, with and without 100 KB task JSONs, and
100 tasks that each wait 50 ms at concurrency 10 against an asyncio baseline measured in the same run.

Usage: ``python bench/ccw_scale.py [--tasks 10000] [--concurrency 4] [--pad 100000] [--wait-runs 5]``

Each case runs in a fresh interpreter, so its peak RSS is its own. Every completion is real: journal intent
(fsynced, shared by the completions of one loop turn), task JSON, TODO_LIST.md and summary replaced
atomically and made durable (one syncfs per flush) before the done record; only the agent is a no-op.
One case alone: ``python bench/ccw_scale.py --case wait|plain|padded [--tasks N] [--concurrency C]``
prints its figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ccw_gen import generate_session

from stepline import Engine
from stepline.ccw._driver import execute_session
from stepline.executors import Executor, StepRequest, StepSession


class Wait(Executor):
    """An agent that waits (a model call's latency) and finishes."""

    name = "wait"
    pure = True

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Wait, then finish."""
        if self.seconds:
            await asyncio.sleep(self.seconds)
        await session.finish(summary="done")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _case(kind: str, tasks: int, concurrency: int, pad: int) -> dict[str, Any]:
    """Run one case in this process and return its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        wait = 0.05 if kind == "wait" else 0.0
        count = 100 if kind == "wait" else tasks
        session_dir = generate_session(root, count, seed=1, pad_bytes=pad if kind == "padded" else 0,
                                       max_deps=0 if kind == "wait" else 3)
        rss_before = _peak_rss_mb()
        engine = Engine(project_root=root, executor=Wait(wait), concurrency=10 if kind == "wait" else concurrency)
        started = time.perf_counter()
        run = asyncio.run(execute_session(engine, session_dir))
        seconds = time.perf_counter() - started
        assert run.status.value == "completed", run.error
        todo = (session_dir / "TODO_LIST.md").read_text(encoding="utf-8")
        assert todo.count("- [x]") == count
        figures: dict[str, Any] = {"case": kind, "tasks": count, "seconds": round(seconds, 3),
                                   "peak_rss_mb": round(_peak_rss_mb(), 1),
                                   "rss_before_run_mb": round(rss_before, 1)}
        if kind == "wait":
            figures["asyncio_baseline_seconds"] = round(asyncio.run(_baseline(count, 10, wait)), 3)
        return figures


async def _baseline(count: int, concurrency: int, wait: float) -> float:
    """The same waits with nothing but a semaphore: the floor any scheduler pays."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await asyncio.sleep(wait)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return time.perf_counter() - started


def main() -> None:
    """Run each case in a child interpreter and print a small report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pad", type=int, default=100_000)
    parser.add_argument("--wait-runs", type=int, default=5, help="runs of the 50 ms case (median and range)")
    parser.add_argument("--case", choices=["plain", "padded", "wait"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(args.case, args.tasks, args.concurrency, args.pad)))
        return
    for kind in ("wait", "plain", "padded"):
        runs = []
        for _ in range(max(1, args.wait_runs) if kind == "wait" else 1):  # 0.5 s runs vary by ~10 ms
            out = subprocess.run([sys.executable, __file__, "--case", kind, "--tasks", str(args.tasks),
                                  "--concurrency", str(args.concurrency), "--pad", str(args.pad)],
                                 capture_output=True, text=True, check=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        figures = runs[0]
        if kind == "wait":
            seconds = sorted(run["seconds"] for run in runs)
            baseline = statistics.median(run["asyncio_baseline_seconds"] for run in runs)
            print(f"100 tasks x 50 ms at concurrency 10: median {statistics.median(seconds):.3f} s over "
                  f"{len(runs)} runs ({seconds[0]:.3f}-{seconds[-1]:.3f} s; ideal 0.500 s, asyncio baseline "
                  f"{baseline:.3f} s)")
        else:
            label = f"{figures['tasks']} no-op tasks" + (f", task JSON padded to {args.pad // 1000} KB"
                                                         if kind == "padded" else "")
            print(f"{label}, concurrency {args.concurrency}: {figures['seconds']:.1f} s, "
                  f"{figures['tasks'] / figures['seconds']:.0f} tasks/s, peak RSS {figures['peak_rss_mb']:.0f} MB "
                  f"(before the run {figures['rss_before_run_mb']:.0f} MB)")


if __name__ == "__main__":
    main()
