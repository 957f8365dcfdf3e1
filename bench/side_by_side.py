"""Per-step cost of a durable step: stepline beside LangGraph (SqliteSaver), Burr (SQLite persister) and DBOS (SQLite).

Each framework runs a linear workflow whose every step is made durable by the framework's own persistence, in a
fresh process. CPU per step is (CPU of an N2-step run - CPU of an N1-step run) / (N2 - N1), so start-up and
imports cancel out; CPU counts the process and every child it waited for (a helper process included). Two kinds of
step:

* ``noop``: the step does nothing, so what is measured is the engine and its persistence alone;
* ``realistic``: the step waits ``--step-seconds`` (default 0.1 s, a fast model call), and the figure is the wall
  time the framework adds to each step, as a share of the step.

The peers are not stepline's dependencies: ``bash bench/side_by_side.sh`` makes ``.venv-bench`` with them and runs
this script there; a framework that is not installed is reported as such. Usage:
python bench/side_by_side.py [--n1 50] [--n2 450] [--repeat 3] [--step-seconds 0.1] [--only stepline,langgraph]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# Each child prints one JSON line: {"wall": seconds of the run itself}. The parent reads the child's CPU.
PROGRAMS = {
    "stepline": """
        import asyncio, time
        from stepline import Engine
        from stepline.executors import Executor, register_executor
        from stepline.model import StepSpec, WorkflowSpec

        class Worker(Executor):
            name = "bench-worker"  # not pure: the runtime syncs its journal before each call, as for a model
            async def perform(self, request, session):
                if SECONDS:
                    await asyncio.sleep(SECONDS)
                await session.finish(summary="done")

        register_executor("bench-worker", lambda options: Worker())
        workflow = WorkflowSpec(id="bench", steps=[StepSpec(id=f"s{i:05d}") for i in range(N)])
        engine = Engine(project_root=FOLDER, executor="bench-worker", mode="yolo")
        start = time.perf_counter()
        run = asyncio.run(engine.start(workflow))
        assert run.status.value == "completed", run.status
        WALL = time.perf_counter() - start
    """,
    "langgraph": """
        import time
        from typing import TypedDict
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph

        class State(TypedDict):
            count: int

        def step(state):
            if SECONDS:
                time.sleep(SECONDS)
            return {"count": state["count"] + 1}

        graph = StateGraph(State)
        names = [f"s{i:05d}" for i in range(N)]
        for name in names:
            graph.add_node(name, step)
        graph.add_edge(START, names[0])
        for a, b in zip(names, names[1:]):
            graph.add_edge(a, b)
        graph.add_edge(names[-1], END)
        with SqliteSaver.from_conn_string(str(FOLDER / "lg.sqlite")) as saver:
            app = graph.compile(checkpointer=saver)
            start = time.perf_counter()
            out = app.invoke({"count": 0}, {"configurable": {"thread_id": "t"}, "recursion_limit": N + 10})
            WALL = time.perf_counter() - start
        assert out["count"] == N
    """,
    "burr": """
        import time
        from burr.core import ApplicationBuilder, State, action
        from burr.core.persistence import SQLitePersister

        @action(reads=["count"], writes=["count"])
        def step(state: State) -> State:
            if SECONDS:
                time.sleep(SECONDS)
            return state.update(count=state["count"] + 1)

        persister = SQLitePersister(db_path=str(FOLDER / "burr.sqlite"), table_name="burr_state")
        persister.initialize()
        names = [f"s{i:05d}" for i in range(N)]
        app = (ApplicationBuilder()
               .with_actions(**{name: step for name in names})
               .with_transitions(*[(a, b) for a, b in zip(names, names[1:])])
               .with_state(count=0).with_entrypoint(names[0])
               .with_state_persister(persister).with_identifiers(app_id="bench").build())
        start = time.perf_counter()
        _, _, state = app.run(halt_after=[names[-1]])
        WALL = time.perf_counter() - start
        assert state["count"] == N
    """,
    "dbos": """
        import time
        from dbos import DBOS, DBOSConfig

        DBOS(config=DBOSConfig(name="bench", system_database_url=f"sqlite:///{FOLDER / 'dbos.sqlite'}"))

        @DBOS.step()
        def step(i: int) -> int:
            if SECONDS:
                time.sleep(SECONDS)
            return i + 1

        @DBOS.workflow()
        def flow(n: int) -> int:
            count = 0
            for _ in range(n):
                count = step(count)
            return count

        DBOS.launch()
        start = time.perf_counter()
        assert flow(N) == N
        WALL = time.perf_counter() - start
        DBOS.destroy()
    """,
}


def run_once(name: str, n: int, seconds: float) -> tuple[float, float]:
    """CPU seconds (the child and what it waited for) and wall seconds of the run itself, for an n-step run."""
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as folder:
        code = (f"import pathlib\nN = {n}\nSECONDS = {seconds!r}\nFOLDER = pathlib.Path({folder!r})\n"
                + textwrap.dedent(PROGRAMS[name]) + "\nimport json\nprint(json.dumps({'wall': WALL}))\n")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=folder,
                              env={**os.environ, "DBOS__APPVERSION": "bench"})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{done.stderr[-2000:]}")
        wall = json.loads(done.stdout.strip().splitlines()[-1])["wall"]
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return cpu, wall


def installed(name: str) -> bool:
    module = {"stepline": "stepline", "langgraph": "langgraph.checkpoint.sqlite", "burr": "burr.core",
              "dbos": "dbos"}[name]
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n1", type=int, default=50)
    parser.add_argument("--n2", type=int, default=450)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--realistic-steps", type=int, default=20, help="steps of the realistic run")
    parser.add_argument("--only", default=",".join(PROGRAMS))
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    print(f"noop steps: CPU per step from {args.n2}-step minus {args.n1}-step runs, median of {args.repeat}; "
          f"realistic: {args.realistic_steps} steps of {args.step_seconds:.2f} s")
    print(f"{'framework':<10} {'CPU µs/step':>12} {'× stepline':>11} {'realistic: added wall/step':>28}")
    figures: dict[str, float] = {}
    for name in names:
        if not installed(name):
            print(f"{name:<10} not installed (bash bench/side_by_side.sh installs the peers in .venv-bench)")
            continue
        per_step = []
        for _ in range(args.repeat):  # interleaving sizes in one repeat keeps load drift out of the difference
            small, _ = run_once(name, args.n1, 0.0)
            large, _ = run_once(name, args.n2, 0.0)
            per_step.append((large - small) / (args.n2 - args.n1))
        figures[name] = statistics.median(per_step)
        _, wall = run_once(name, args.realistic_steps, args.step_seconds)
        added = wall / args.realistic_steps - args.step_seconds
        base = figures.get("stepline")
        ratio = f"{figures[name] / base:10.2f}x" if base else f"{'-':>11}"
        print(f"{name:<10} {figures[name] * 1e6:12.0f} {ratio} "
              f"{added * 1e3:14.2f} ms ({added / args.step_seconds:6.1%} of the step)")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"(bench took {time.perf_counter() - start:.0f} s)")
