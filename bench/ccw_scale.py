"""How CCW execution scales: 10,000 no-op tasks in a random DAG, with and without 100 KB task JSONs; 100
independent tasks that each take 1 s at concurrency 10 (ideal 10 s); and 100 tasks of 50 ms at concurrency 10
against an asyncio baseline measured in the same run (informational).

Usage: ``python bench/ccw_scale.py [--tasks 10000] [--concurrency 4] [--pad 100000] [--wait-runs 5]
[--second-runs 1] [--cases second,plain,padded,wait]``

Each case runs in a fresh interpreter, so its peak RSS is its own. Every completion is real: journal intent
(fsynced, shared by the completions that arrive together), task JSON, TODO_LIST.md and summary each replaced
atomically and made durable before the done record; only the agent is a no-op or a sleep. The figures are
printed, with their ratio to the ideal where there is one; nothing is asserted on time.
One case alone: ``python bench/ccw_scale.py --case second|wait|plain|padded [--tasks N] [--concurrency C]``
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

#: Cases of independent tasks that each wait: (tasks, seconds each, concurrency).
_TIMED = {"second": (100, 1.0, 10), "wait": (100, 0.05, 10)}


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
    count, wait, concurrency = _TIMED.get(kind, (tasks, 0.0, concurrency))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session_dir = generate_session(root, count, seed=1, pad_bytes=pad if kind == "padded" else 0,
                                       max_deps=0 if kind in _TIMED else 3)
        rss_before = _peak_rss_mb()
        engine = Engine(project_root=root, executor=Wait(wait), concurrency=concurrency)
        started = time.perf_counter()
        run = asyncio.run(execute_session(engine, session_dir))
        seconds = time.perf_counter() - started
        assert run.status.value == "completed", run.error
        todo = (session_dir / "TODO_LIST.md").read_text(encoding="utf-8")
        assert todo.count("- [x]") == count
        figures: dict[str, Any] = {"case": kind, "tasks": count, "seconds": round(seconds, 3),
                                   "peak_rss_mb": round(_peak_rss_mb(), 1),
                                   "rss_before_run_mb": round(rss_before, 1)}
        if kind in _TIMED:
            figures["ideal_seconds"] = round(-(-count // concurrency) * wait, 3)
            figures["asyncio_baseline_seconds"] = round(asyncio.run(_baseline(count, concurrency, wait)), 3)
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


def _timed_report(kind: str, runs: list[dict[str, Any]]) -> str:
    count, wait, concurrency = _TIMED[kind]
    seconds = sorted(run["seconds"] for run in runs)
    ideal = runs[0]["ideal_seconds"]
    median = statistics.median(seconds)
    baseline = statistics.median(run["asyncio_baseline_seconds"] for run in runs)
    rss = max(run["peak_rss_mb"] for run in runs)
    spread = f" over {len(runs)} runs ({seconds[0]:.3f}-{seconds[-1]:.3f} s)" if len(runs) > 1 else ""
    return (f"{count} tasks x {wait * 1000:g} ms at concurrency {concurrency}: {median:.3f} s{spread}; ideal "
            f"{ideal:.3f} s, ratio {median / ideal:.4f} (+{(median / ideal - 1) * 100:.2f} %); asyncio baseline "
            f"{baseline:.3f} s; peak RSS {rss:.0f} MB")


def main() -> None:
    """Run each case in a child interpreter and print a small report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pad", type=int, default=100_000)
    parser.add_argument("--wait-runs", type=int, default=5, help="runs of the 50 ms case (median and range)")
    parser.add_argument("--second-runs", type=int, default=1, help="runs of the 1 s case (median and range)")
    parser.add_argument("--cases", default="second,plain,padded,wait", help="which cases, comma-separated")
    parser.add_argument("--case", choices=["plain", "padded", *_TIMED], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(args.case, args.tasks, args.concurrency, args.pad)))
        return
    repeats = {"wait": args.wait_runs, "second": args.second_runs}
    for kind in args.cases.split(","):
        runs = []
        for _ in range(max(1, repeats.get(kind, 1))):
            out = subprocess.run([sys.executable, __file__, "--case", kind, "--tasks", str(args.tasks),
                                  "--concurrency", str(args.concurrency), "--pad", str(args.pad)],
                                 capture_output=True, text=True, check=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        if kind in _TIMED:
            print(_timed_report(kind, runs), flush=True)
            continue
        figures = runs[0]
        label = f"{figures['tasks']} no-op tasks" + (f", task JSON padded to {args.pad // 1000} KB"
                                                     if kind == "padded" else "")
        print(f"{label}, concurrency {args.concurrency}: {figures['seconds']:.1f} s, "
              f"{figures['tasks'] / figures['seconds']:.0f} tasks/s, peak RSS {figures['peak_rss_mb']:.0f} MB "
              f"(before the run {figures['rss_before_run_mb']:.0f} MB)", flush=True)


if __name__ == "__main__":
    main()
