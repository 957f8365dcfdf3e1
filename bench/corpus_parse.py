"""Time parsing + linting every BMAD legacy workflow of the corpus in one process (SPEC §8: well under 1 s).

Usage: .venv/bin/python bench/corpus_parse.py [CORPUS_DIR]

The corpus source tree is first installed into a temporary project (not timed); then every installed
``workflow.yaml`` is loaded (config, instructions, instruction tree) and, separately, linted; the lint pass
reads everything again, so it alone is the "parse + lint" figure that ``stepline validate`` costs.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from stepline.bmad import install_bmad
from stepline.bmad._legacy import lint_bmad_legacy, load_bmad_legacy

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"


def main() -> int:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CORPUS
    source = corpus / "bmad" / "v6.0.0-alpha.23"
    if not source.is_dir():
        print(f"corpus not found at {source}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        started = time.perf_counter()
        install_bmad(source, project, {})
        installed = time.perf_counter() - started
        workflows = sorted((project / "_bmad").rglob("workflow.yaml"))

        started = time.perf_counter()
        specs = [load_bmad_legacy(path, project_root=project) for path in workflows]
        loaded = time.perf_counter() - started

        started = time.perf_counter()
        diagnostics = [d for path in workflows for d in lint_bmad_legacy(path, project)]
        linted = time.perf_counter() - started

    steps = sum(len(spec.steps) for spec in specs)
    errors = sum(d.severity == "error" for d in diagnostics)
    warnings = sum(d.severity == "warning" for d in diagnostics)
    print(f"install (not counted): {installed * 1000:.0f} ms")
    print(f"workflows: {len(workflows)} loaded, {steps} steps")
    print(f"load (parse) all:  {loaded * 1000:.0f} ms")
    print(f"parse + lint all:  {linted * 1000:.0f} ms  ({errors} errors, {warnings} warnings; target < 1000 ms)")
    print(f"both passes:       {(loaded + linted) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
