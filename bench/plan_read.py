"""Time building the plans of every skill of a BMAD release (default: v6.11.0, 49 skills once installed) and of
the CCW v7.3.14 skills, in one process, against loading the same workflows without reading their plans.

Usage: .venv/bin/python bench/plan_read.py [CORPUS_DIR] [--repeat N]

The release is installed into a temporary project first (not timed). ``read_plan`` loads each skill (as
``stepline run`` does), reads every step's points and every file a step routes to; the baseline is
``load_workflow`` with the points' reading switched off, so the ratio is what reading the plan adds. Wall and
CPU time are both printed (the machine may be shared); the figure is the best of ``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stepline.bmad._legacy as legacy_reader
import stepline.skills._load as skill_loader
from stepline.bmad import install_bmad
from stepline.families import load_workflow, read_plan

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"


def _best(rounds: int, work: Callable[[], Any]) -> tuple[float, float, Any]:
    """The best wall and CPU seconds of ``rounds`` runs of ``work``, and its last result."""
    best_wall = best_cpu = float("inf")
    result: Any = None
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        result = work()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    source = args.corpus / "bmad" / "v6.11.0"
    ccw = args.corpus / "ccw" / "v7.3.14" / ".claude" / "skills"
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        install_bmad(source, project, {})
        skills = sorted(p.parent for p in (project / "_bmad").rglob("SKILL.md"))
        ccw_skills = sorted(p.parent for p in ccw.glob("*/SKILL.md"))

        reads = skill_loader.attach_points, legacy_reader.legacy_points
        skill_loader.attach_points = lambda *a, **k: None  # type: ignore[assignment]
        legacy_reader.legacy_points = lambda *a, **k: []  # type: ignore[assignment]
        load_wall, load_cpu, _ = _best(args.repeat, lambda: [load_workflow(s, project_root=project) for s in skills])
        skill_loader.attach_points, legacy_reader.legacy_points = reads
        plan_wall, plan_cpu, plans = _best(args.repeat, lambda: [read_plan(s, project_root=project) for s in skills])
        ccw_wall, ccw_cpu, ccw_plans = _best(args.repeat, lambda: [read_plan(s) for s in ccw_skills])

    kinds = Counter(p.kind.value for plan in [*plans, *ccw_plans] for p in plan.points())
    steps = sum(len(plan.steps) for plan in plans)
    print(f"v6.11.0: {len(skills)} skills, {steps} plan steps; CCW v7.3.14: {len(ccw_skills)} skills")
    print("points: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
    print(f"load_workflow without points, {len(skills)} skills (baseline): {load_wall * 1000:.0f} ms wall, "
          f"{load_cpu * 1000:.0f} ms CPU")
    print(f"read_plan, {len(skills)} skills:               {plan_wall * 1000:.0f} ms wall, {plan_cpu * 1000:.0f} ms "
          f"CPU ({plan_cpu / load_cpu:.2f}x the baseline's CPU; {plan_cpu / len(skills) * 1000:.1f} ms per skill)")
    print(f"read_plan, {len(ccw_skills)} CCW skills:               {ccw_wall * 1000:.0f} ms wall, "
          f"{ccw_cpu * 1000:.0f} ms CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
