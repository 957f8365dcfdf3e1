"""How fast the dashboard lists thousands of runs: a page of ``GET /api/runs`` against reading every summary.

Makes N runs (one real 5-step native run, copied N times under new ids, each record rewritten to its id),
then times, in this one process:

* baseline: ``RunStore.summaries()`` read whole, what a list that re-reads every manifest costs per request;
* the dashboard's first page, cold (it reads the summaries once, then checks the page's 50 runs as
  ``stepline doctor`` does);
* the first page again and a page deep in the list, warm (nothing changed on disk, so nothing is re-read);
* the first page after one run's manifest changed (every summary is read again).

Usage: python bench/dashboard_list.py [--runs 3000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml


def _median(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_runs(root: Path, count: int) -> Path:
    """One real run copied ``count`` times; return the storage root."""
    from stepline import Engine
    from stepline.families import load_workflow

    (root / "flow.yaml").write_text(yaml.safe_dump({"id": "report", "steps": [
        {"id": f"part-{i}", "name": f"Part {i}", "body": "Draft it.", "outputs": [f"out/part-{i}.md"]}
        for i in range(5)]}), encoding="utf-8")
    run = asyncio.run(Engine(project_root=root).start(load_workflow(root / "flow.yaml")))
    runs = root / ".stepline" / "runs"
    source = runs / run.run_id
    files = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file() and p.name != "lock"}
    for n in range(count):
        run_id = f"run-2026{(n // 86400) % 12 + 1:02d}{(n // 3600) % 28 + 1:02d}{(n // 60) % 24:02d}" \
                 f"{n % 60:02d}00-{secrets.token_hex(4)}"
        target = runs / run_id
        target.mkdir()
        for name, data in files.items():
            (target / name).write_bytes(data.replace(run.run_id.encode(), run_id.encode()))
    shutil.rmtree(source)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()

    from fastapi.testclient import TestClient

    from stepline.engine import RuntimeConfig
    from stepline.interfaces.web import create_app
    from stepline.store import RunStore

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        runs = make_runs(root, options.runs)
        store = RunStore(runs)
        baseline = _median(lambda: list(store.summaries()), options.repeat)
        client = TestClient(create_app(root, RuntimeConfig(), "bench-token-0123456789"),
                            base_url="http://127.0.0.1", headers={"Authorization": "Bearer bench-token-0123456789"})

        def page(number: int = 1) -> None:
            answer = client.get("/api/runs", params={"page": number, "per_page": 50})
            assert answer.status_code == 200 and len(answer.json()["runs"]) == 50, answer.text

        start = time.perf_counter()
        page()
        cold = time.perf_counter() - start
        warm = _median(page, options.repeat)
        deep = _median(lambda: page(options.runs // 100), options.repeat)
        manifest = next(runs.iterdir()) / "manifest.json"

        def changed() -> None:
            manifest.write_bytes(manifest.read_bytes())  # a new modification time: the list is stale
            time.sleep(0.002)
            page()

        after_change = _median(changed, options.repeat)
    print(f"{options.runs} runs, pages of 50, median of {options.repeat} (Python {sys.version.split()[0]})")
    print(f"  baseline: every summary read            {baseline * 1000:8.1f} ms")
    print(f"  first page, cold (+ doctor on 50 rows)   {cold * 1000:8.1f} ms   {cold / baseline:5.2f}x baseline")
    print(f"  first page, warm                         {warm * 1000:8.1f} ms   {warm / baseline:5.2f}x baseline")
    print(f"  page {options.runs // 100}, warm                          {deep * 1000:8.1f} ms   "
          f"{deep / baseline:5.2f}x baseline")
    print(f"  first page after a manifest changed      {after_change * 1000:8.1f} ms   "
          f"{after_change / baseline:5.2f}x baseline")


if __name__ == "__main__":
    main()
