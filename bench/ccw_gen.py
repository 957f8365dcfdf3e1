"""Generate large random-DAG CCW sessions for benchmarks (and the few tests that need a big session).

Usage from a benchmark::

    from ccw_gen import generate_session, random_dag
    tasks = random_dag(10_000, seed=1)                    # in memory, for planning alone
    session_dir = generate_session(tmp, 10_000, seed=1)   # on disk, for reading + planning + running

Or from a shell: ``python bench/ccw_gen.py OUT_DIR N [--seed S] [--pad BYTES] [--flat]``.

Task ``k`` depends on up to ``max_deps`` tasks among the ``window`` tasks before it, so the graph is acyclic
and its depth grows with ``n / window``. ``pad_bytes`` pads each task JSON (a long description) to check that
reading a session does not keep task bodies in memory. Everything is seeded: same arguments, same files.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any, Literal

from stepline.ccw._waves import DagTask

__all__ = ["generate_session", "random_dag", "write_session"]

Schema = Literal["six-field", "flat"]


def random_dag(n: int, *, seed: int = 0, max_deps: int = 3, window: int = 50, groups: int = 8) -> list[DagTask]:
    """Return ``n`` tasks ``IMPL-1 … IMPL-n`` forming a random DAG (dependencies point backwards only)."""
    rng = random.Random(seed)
    tasks = []
    for k in range(1, n + 1):
        earlier = range(max(1, k - window), k)
        count = min(len(earlier), rng.randint(0, max_deps))
        deps = tuple(f"IMPL-{d}" for d in sorted(rng.sample(earlier, count)))
        group = f"group-{rng.randrange(groups)}" if groups and rng.random() < 0.5 else None
        tasks.append(DagTask(id=f"IMPL-{k}", depends_on=deps, execution_group=group))
    return tasks


def _task_json(task: DagTask, schema: Schema, pad_bytes: int) -> dict[str, Any]:
    padding = "x" * pad_bytes
    if schema == "flat":
        flat: dict[str, Any] = {"id": task.id, "title": f"Task {task.id}", "description": f"Do {task.id}. {padding}",
                                "depends_on": list(task.depends_on), "status": "pending", "type": "feature",
                                "convergence": {"criteria": [f"{task.id} done"]}, "meta": {"agent": "@code-developer"}}
        if task.execution_group:
            flat["meta"]["execution_group"] = task.execution_group
        return flat
    meta: dict[str, Any] = {"type": "feature", "agent": "@code-developer"}
    if task.execution_group:
        meta["execution_group"] = task.execution_group
    return {"id": task.id, "title": f"Task {task.id}", "status": "pending", "meta": meta,
            "context": {"requirements": [f"Do {task.id}"], "notes": padding, "depends_on": list(task.depends_on)},
            "flow_control": {"pre_analysis": [], "implementation_approach": [], "target_files": []}}


def write_session(project_root: Path, tasks: list[DagTask], *, session_id: str = "WFS-bench",
                  schema: Schema = "six-field", pad_bytes: int = 0, model: str = "Parallel") -> Path:
    """Write ``tasks`` as an active session under ``project_root/.workflow/active/`` and return its folder."""
    session_dir = Path(project_root) / ".workflow" / "active" / session_id
    task_dir = session_dir / ".task"
    task_dir.mkdir(parents=True, exist_ok=True)
    (session_dir / "workflow-session.json").write_text(
        json.dumps({"session_id": session_id, "project": f"Benchmark ({len(tasks)} tasks)", "status": "active"}),
        encoding="utf-8")
    (session_dir / "IMPL_PLAN.md").write_text(
        f"# Implementation Plan: benchmark\n\n## 4. Implementation Strategy\n\n**Execution Model**: {model}\n",
        encoding="utf-8")
    lines = ["# Tasks: benchmark", "", "## Task Progress"]
    for task in tasks:
        (task_dir / f"{task.id}.json").write_text(json.dumps(_task_json(task, schema, pad_bytes)), encoding="utf-8")
        lines.append(f"- [ ] **{task.id}**: Task {task.id} → [📋](./.task/{task.id}.json)")
    (session_dir / "TODO_LIST.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return session_dir


def generate_session(project_root: Path, n: int, *, seed: int = 0, schema: Schema = "six-field",
                     pad_bytes: int = 0, model: str = "Parallel", max_deps: int = 3) -> Path:
    """Write a random-DAG session of ``n`` tasks and return its folder (see :func:`random_dag`)."""
    return write_session(project_root, random_dag(n, seed=seed, max_deps=max_deps),
                         session_id=f"WFS-bench-{n}-{seed}", schema=schema, pad_bytes=pad_bytes, model=model)


def main() -> None:
    """Command line entry: write one session and print its folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("n", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pad", type=int, default=0)
    parser.add_argument("--flat", action="store_true")
    args = parser.parse_args()
    path = generate_session(args.out, args.n, seed=args.seed, pad_bytes=args.pad,
                            schema="flat" if args.flat else "six-field")
    print(path)


if __name__ == "__main__":
    main()
