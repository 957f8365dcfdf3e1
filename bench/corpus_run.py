"""Run every BMAD legacy workflow of the corpus in yolo with the dry-run executor and report the figures.

Usage: .venv/bin/python bench/corpus_run.py [CORPUS_DIR]

The corpus is installed into a temporary project (``stepline bmad install`` with the extra tasks), then each
``workflow.yaml`` is loaded and run in-process. Printed: how many load and complete, each run that does not
complete with its reason, the time per run, and the share of conditions the runtime decided without a model
in these runs (``bench/conditions_share.py`` gives the static share over the files).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from stepline import Engine
from stepline.bmad._legacy_driver import condition_counts
from stepline.errors import SteplineError
from stepline.families import load_workflow
from stepline.interfaces.cli._app import run_cli

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"


def main() -> int:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CORPUS
    source, extras = corpus / "bmad" / "v6.0.0-alpha.23", corpus / "bmad" / "extras"
    if not source.is_dir():
        print(f"corpus not found at {source}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        if run_cli(["bmad", "install", str(source), "--project", str(project), "--extras", str(extras)]) != 0:
            return 1
        loaded = completed = runtime = model = 0
        problems: list[str] = []
        started = time.perf_counter()
        workflows = sorted((project / "_bmad").rglob("workflow.yaml"))
        for path in workflows:
            name = str(path.parent.relative_to(project / "_bmad"))
            try:
                spec = load_workflow(path, project_root=project)
            except SteplineError as exc:
                problems.append(f"{name}: does not load: {exc.format_message()}")
                continue
            loaded += 1
            begin = time.perf_counter()
            run = asyncio.run(Engine(project_root=project, executor="dry-run", mode="yolo").start(spec))
            counts = condition_counts(run)
            runtime, model = runtime + counts["runtime"], model + counts["model"]
            if run.status.value == "completed":
                completed += 1
            else:
                problems.append(f"{name}: {run.status.value}: {run.error or run.blocked_reason}")
            print(f"{run.status.value:10} {time.perf_counter() - begin:6.3f}s  runtime {counts['runtime']:3}  "
                  f"model {counts['model']:3}  {name}")
        elapsed = time.perf_counter() - started
    print(f"\nworkflows {len(workflows)}, loaded {loaded}, completed {completed} in {elapsed:.2f}s")
    decided = runtime + model
    share = runtime / decided if decided else 0.0
    print(f"conditions met in these runs: {decided}, decided by the runtime {runtime} ({share:.1%}), by the model "
          f"{model}")
    for problem in problems:
        print(f"not completed: {problem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
