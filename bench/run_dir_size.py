"""Bytes of run directory per step: the same N-step native workflow run by two checkouts of stepline.

Each checkout runs in a subprocess of its own (``PYTHONPATH=<checkout>/src``), so the figures come from one
invocation on the same machine. The base is a second work tree, made with
``git worktree add --detach /tmp/rundir_base <commit>`` (``--base-commit`` makes it when it is missing).

Usage: python bench/run_dir_size.py [--steps 200] [--base /tmp/rundir_base] [--base-commit SHA]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SHOWN = ("journal.jsonl", "manifest.json", "timeline.json")


def workflow(n: int) -> dict[str, object]:
    """A native workflow of ``n`` steps as people write them: a name and a body with a variable."""
    return {"id": "report", "name": "Quarterly report", "variables": {"topic": "the quarterly numbers"},
            "steps": [{"id": f"part-{i:03d}", "name": f"Part {i}",
                       "body": f"Draft part {i} of the report on {{{{topic}}}}; keep it under 200 words."}
                      for i in range(n)]}


def child(n: int) -> None:
    """Run the workflow with this interpreter's stepline and print the run directory's file sizes as JSON."""
    import asyncio

    import yaml

    import stepline
    from stepline import Engine
    from stepline.families import load_workflow, register_drivers

    register_drivers()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        path = project / "report.yaml"
        path.write_text(yaml.safe_dump(workflow(n), sort_keys=False), encoding="utf-8")
        engine = Engine(project_root=project, executor="dry-run", mode="yolo")
        run = asyncio.run(engine.start(load_workflow(path)))
        assert run.status.value == "completed", run.status
        run_dir = engine.store.root / run.run_id
        sizes = {p.name: p.stat().st_size for p in run_dir.rglob("*") if p.is_file()}
        engine.load(engine.store.open(run.run_id))  # what resume, status, show and export start from
    print(json.dumps({"stepline": str(Path(stepline.__file__).parent), "sizes": sizes}))


def measure(src: Path, n: int) -> dict[str, object]:
    """Run :func:`child` with the stepline under ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, __file__, "--child", "--steps", str(n)], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the run with {src} failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    if not str(result["stepline"]).startswith(str(src)):
        raise SystemExit(f"expected stepline from {src}, got {result['stepline']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--base", type=Path, default=Path("/tmp/rundir_base"), help="the base checkout")
    parser.add_argument("--base-commit", help="make the base work tree at this commit when it is missing")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.steps
    if args.child:
        child(n)
        return
    if not args.base.exists():
        if not args.base_commit:
            raise SystemExit(f"no base checkout at {args.base}: pass --base-commit SHA to make one")
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(args.base), args.base_commit],
                       check=True)
    rows = {"base": measure(args.base.resolve() / "src", n), "new": measure(HERE / "src", n)}
    print(f"{n}-step native workflow, dry-run executor; bytes per step")
    print(f"{'':6}{'journal':>10}{'manifest':>10}{'timeline':>10}{'other':>10}{'total':>10}")
    totals = {}
    for label, row in rows.items():
        sizes: dict[str, int] = row["sizes"]  # type: ignore[assignment]
        shown = [sizes.get(name, 0) for name in SHOWN]
        total = sum(sizes.values())
        totals[label] = total
        print(f"{label:6}" + "".join(f"{b / n:10.0f}" for b in (*shown, total - sum(shown), total)))
    print(f"new/base total: {totals['new'] / totals['base']:.2f}   "
          f"(base: {rows['base']['stepline']}, new: {rows['new']['stepline']})")


if __name__ == "__main__":
    main()
