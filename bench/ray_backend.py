"""What the Ray backend costs on this machine: a CCW session of 100 independent tasks that each take 1 s, run at
concurrency 20 locally and on Ray (ideal 5 s), and the per-task dispatch cost of no-op tasks.

Usage: ``python bench/ray_backend.py [--tasks 100] [--seconds 1] [--concurrency 20] [--noop 200] [--repeat 5]
[--address ADDR]``

Ray is started locally for the benchmark (2 CPUs, no dashboard) unless ``--address`` names a cluster. Every
completion is real (journal, task JSON, TODO list, summary); only the agent is a sleep. "cold" runs include
joining Ray and starting the executor hosts (what one ``stepline ccw execute --backend ray`` pays once);
"warm" runs reuse hosts already started, which is the per-task cost (the local figures are warm too: each after
a warm-up run in the same process). Local and warm Ray runs are measured in pairs, back to back, ``--repeat``
times, and the medians printed (one run on a machine shared with other work varies by a few per cent). Figures
are printed against the local runs measured in the same invocation; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ccw_gen import generate_session

from stepline import Engine
from stepline.ccw._driver import execute_session
from stepline.distributed import RayExecutor, ray_executor
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


class KeepHosts(Executor):
    """The Ray executor across several runs: the engine closes it after each run, this keeps its hosts up."""

    name = "ray"
    pure = True

    def __init__(self, inner: RayExecutor) -> None:
        self.inner = inner

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Hand over to the Ray executor."""
        await self.inner.perform(request, session)


class Measured(NamedTuple):
    """One run: its wall time, and the CPU time this (the coordinating) process spent on it, Ray's threads in it
    included (the executor hosts' CPU is in their own processes)."""

    wall: float
    cpu: float


async def _session_seconds(executor: Executor, tasks: int, concurrency: int) -> Measured:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session_dir = generate_session(root, tasks, seed=1, max_deps=0)
        engine = Engine(project_root=root, executor=executor, concurrency=concurrency)
        started, cpu = time.perf_counter(), time.process_time()
        run = await execute_session(engine, session_dir)
        measured = Measured(time.perf_counter() - started, time.process_time() - cpu)
        assert run.status.value == "completed", run.error
        return measured


def _cold(executor: Executor, tasks: int, concurrency: int) -> Measured:
    """One run, in an event loop of its own (what one CLI command is)."""
    return asyncio.run(_session_seconds(executor, tasks, concurrency))


def _warm(inner: Executor, tasks: int, concurrency: int, *, on_ray: bool) -> Measured:
    """One run after a warm-up run in the same event loop; on Ray, on the hosts the warm-up started (they talk
    to the listener of that loop)."""

    async def both() -> Measured:
        hosts = ray_executor(inner) if on_ray else None
        executor = KeepHosts(hosts) if hosts is not None else inner
        try:
            await _session_seconds(executor, concurrency, concurrency)
            return await _session_seconds(executor, tasks, concurrency)
        finally:
            if hosts is not None:
                await hosts.aclose()

    return asyncio.run(both())


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    """Run the cases and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--noop", type=int, default=200, help="no-op tasks for the dispatch overhead")
    parser.add_argument("--repeat", type=int, default=5, help="local/Ray pairs measured; medians are printed")
    parser.add_argument("--address", default=None)
    args = parser.parse_args()

    import ray

    if args.address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local instance: no token in ~/.ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning",
                 object_store_memory=80 * 1024 * 1024)
    else:
        ray.init(address=args.address, log_to_driver=False, logging_level="warning")
    figures: dict[str, Any] = {}
    try:
        n, wait, c = args.tasks, args.seconds, args.concurrency
        ideal = n / c * wait
        print(f"{n} tasks x {wait:g} s at concurrency {c} (ideal {ideal:.2f} s), {args.repeat} local/Ray pairs")
        started = time.perf_counter()
        cold = _cold(ray_executor(Wait(wait)), n, c).wall
        cold_wall = time.perf_counter() - started
        locals_, warms, overheads, cpu_local, cpu_ray = [], [], [], [], []
        for number in range(1, args.repeat + 1):
            # Each pair back to back: a machine shared with other work drifts less within a pair than across runs.
            here = _warm(Wait(wait), n, c, on_ray=False)
            there = _warm(Wait(wait), n, c, on_ray=True)
            locals_.append(here.wall)
            warms.append(there.wall)
            cpu_local.append(here.cpu / n * 1000)
            cpu_ray.append(there.cpu / n * 1000)
            overheads.append((there.wall / here.wall - 1) * 100)
            print(f"  pair {number}: local {here.wall:7.3f} s   ray, warm {there.wall:7.3f} s   "
                  f"overhead {overheads[-1]:+.2f} %")
        local, warm, overhead = _median(locals_), _median(warms), _median(overheads)
        print(f"  local          {local:7.3f} s   ratio to ideal {local / ideal:.3f}   (median)")
        print(f"  ray, cold      {cold:7.3f} s   ratio to local {cold / local:.3f}   (joins Ray, starts the hosts; "
              f"wall {cold_wall:.3f} s; once)")
        print(f"  ray, warm      {warm:7.3f} s   ratio to local {warm / local:.3f}   (median)")
        print(f"  overhead       {overhead:+.2f} % (median of the pairs; range {min(overheads):+.2f} .. "
              f"{max(overheads):+.2f} %; target < 5 %), {(warm - local) / n * c * 1000:+.1f} ms per task")
        print(f"  coordinator CPU per task: local {_median(cpu_local):.2f} ms, ray {_median(cpu_ray):.2f} ms (median)")
        noop_local = _median([_warm(Wait(0), args.noop, c, on_ray=False).wall for _ in range(3)])
        noop_ray = _median([_warm(Wait(0), args.noop, c, on_ray=True).wall for _ in range(3)])
        print(f"{args.noop} no-op tasks at concurrency {c} (median of 3)")
        print(f"  local          {noop_local:7.3f} s   {noop_local / args.noop * 1000:.2f} ms per task")
        print(f"  ray, warm      {noop_ray:7.3f} s   {noop_ray / args.noop * 1000:.2f} ms per task   dispatch "
              f"overhead {(noop_ray - noop_local) / args.noop * 1000:+.2f} ms per task")
        figures = {"local": local, "cold": cold, "warm": warm, "overhead_pct": overhead, "noop_local": noop_local,
                   "noop_ray": noop_ray}
    finally:
        ray.shutdown()
    print({k: round(v, 3) for k, v in figures.items()})


if __name__ == "__main__":
    main()
