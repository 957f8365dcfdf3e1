"""What a user touches, at scale: `stepline run`'s cost per step and cold start, and `status`/`show`/`list` on big
runs, each against a baseline measured in the same run (issue 30).

* per step: ``t(run of N+1 steps) - t(run of 1 step)``, over N, of the whole ``stepline run`` process (stderr a
  pipe, not a terminal), with and without ``-q``, against an fsync floor: N small JSON records appended to a file,
  each followed by fsync (the least any durable engine must do per step);
* cold start: ``stepline run`` of a 1-step native workflow against ``stepline --help`` (CPU of the process), the
  median of ``--cold-samples`` pairs run back to back (no ``OTEL_*`` variable set); with ``stepline[otel]``
  installed, also that run sending its spans (``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a local sink taking them);
* ``status``, ``show`` (a run of S steps) and ``list`` (R runs of S steps): CPU of the process, against the
  old way's core, one full load of one such run (what each of them cost per run before the digest);
  ``list`` is timed with every run's digest in place, and one digest rebuild (a stale one) apart;
* ``serve``: ``stepline serve`` until it answers its first request (the runs list, ``/``), wall and CPU of the
  server process, in an empty project (the start-up itself) and in one with R runs of S steps (``--serve-runs``,
  ``--serve-steps``) none of which has a digest yet (a sprint loop's, the MCP server's), then started again.

The R runs are one real run copied under new ids (every record rewritten to its id), each given the digest the
first one's `status` saved, rewritten the same way and fingerprinted for its own files (what a writer saves).

Usage: python bench/cli_scale.py [--steps 20000] [--runs 100] [--per-step 2000] [--repeat 3] [--cold-samples 15]
       [--serve-runs 60] [--serve-steps 5000] [--only serve]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import importlib.util
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

STEPLINE = [sys.executable, "-m", "stepline.interfaces.cli"]


def timed(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one process; it must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median(args: list[str], cwd: Path, repeat: int) -> tuple[float, float]:
    samples = [timed(args, cwd) for _ in range(repeat)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def fsync_floor(n: int, folder: Path) -> float:
    """Seconds for n appends of a small JSON record, each followed by fsync."""
    fd = os.open(folder / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.perf_counter()
    for i in range(n):
        os.write(fd, json.dumps({"seq": i, "type": "WorkflowStepCompleted", "step_id": f"s{i}"}).encode() + b"\n")
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def flow(folder: Path, steps: int) -> Path:
    path = folder / f"flow-{steps}.yaml"
    path.write_text(yaml.safe_dump({"id": f"noop-{steps}", "steps": [{"id": f"s{i:05d}"} for i in range(steps)]}))
    return path


def per_step(folder: Path, n: int, repeat: int) -> None:
    one, many = flow(folder, 1), flow(folder, n + 1)
    floor = statistics.median(fsync_floor(n, folder) for _ in range(repeat)) / n
    print(f"fsync floor: {floor * 1e6:.0f} µs per record ({n} records)")
    for quiet in ([], ["-q"]):
        base = [*STEPLINE, "run", "--executor", "dry-run", "--yolo", *quiet]
        t1 = median([*base, str(one)], folder, repeat)
        tn = median([*base, str(many)], folder, repeat)
        wall, cpu = (tn[0] - t1[0]) / n, (tn[1] - t1[1]) / n
        print(f"stepline run {' '.join(quiet) or '(progress on, stderr a pipe)'}: {wall * 1e6:.0f} µs wall, "
              f"{cpu * 1e6:.0f} µs CPU per step = {wall / floor:.2f}x the fsync floor (bar: <= 1.5x)")


def cold_start(folder: Path, samples: int) -> None:
    """``samples`` pairs, each a ``--help`` then a ``run`` back to back, so that both see the same load on a shared
    machine; the ratio is the median of the pairs' ratios (one busy moment moves one pair, not the result)."""
    one = flow(folder, 1)
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    pairs = [(timed([*STEPLINE, "--help"], folder, plain), timed([*STEPLINE, "run", str(one), "-q"], folder, plain))
             for _ in range(samples)]
    help_cpu, run_cpu = statistics.median(h[1] for h, _ in pairs), statistics.median(r[1] for _, r in pairs)
    ratios = sorted(r[1] / h[1] for h, r in pairs)
    print(f"cold start ({samples} pairs): `stepline --help` {help_cpu:.3f} s CPU; `stepline run` (1 step) "
          f"{run_cpu:.3f} s CPU; ratio {statistics.median(ratios):.2f}x median, {ratios[0]:.2f}-{ratios[-1]:.2f}x "
          f"range (bar: <= 3x)")
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return
    with _otlp_sink() as endpoint:
        traced = {**plain, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        pairs = [(timed([*STEPLINE, "run", str(one), "-q"], folder, plain),
                  timed([*STEPLINE, "run", str(one), "-q"], folder, traced)) for _ in range(samples)]
    ratios = sorted(t[1] / r[1] for r, t in pairs)
    print(f"cold start with OTEL_EXPORTER_OTLP_ENDPOINT set ({samples} pairs, spans sent to a local sink): "
          f"`stepline run` {statistics.median(t[1] for _, t in pairs):.3f} s CPU against "
          f"{statistics.median(r[1] for r, _ in pairs):.3f} s without; ratio {statistics.median(ratios):.2f}x "
          f"median, {ratios[0]:.2f}-{ratios[-1]:.2f}x range")


@contextlib.contextmanager
def _otlp_sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint on loopback that takes every export (200, an empty response) and keeps nothing."""
    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def copy_runs(source: Path, count: int) -> None:
    """``count`` copies of the run at ``source``, each with its digest, as a writer would have saved it."""
    from stepline.store import RunDir, fingerprint, save_summary

    files = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file() and p.name != "lock"}
    saved = json.loads(files.pop("summary.json"))
    old = source.name.encode()
    for n in range(count):
        run_id = f"run-2026{n // 2800 % 12 + 1:02d}{n // 100 % 28 + 1:02d}{n % 24:02d}0000-{secrets.token_hex(4)}"
        target = source.parent / run_id
        target.mkdir()
        for name, data in files.items():
            (target / name).write_bytes(data.replace(old, run_id.encode()))
        run_dir = RunDir(target)
        data = json.loads(json.dumps(saved["data"]).replace(source.name, run_id))
        assert save_summary(run_dir, fingerprint(run_dir), saved["version"], data)


def readers(folder: Path, steps: int, runs: int, repeat: int) -> None:
    import asyncio

    from stepline.engine import Engine
    from stepline.families import load_workflow, register_drivers

    register_drivers("native")
    engine = Engine(project_root=folder, executor="dry-run", mode="yolo")
    run = asyncio.run(engine.start(load_workflow(flow(folder, steps))))
    run_dir = engine.store.open(run.run_id)
    (run_dir.path / "summary.json").unlink(missing_ok=True)  # none yet: the first reader builds it
    start = time.process_time()
    Engine(project_root=folder).load(run_dir)
    replay = time.process_time() - start
    print(f"one full load of a {steps}-step run (in process, the old way's core): {replay:.2f} s CPU")
    rebuild = timed([*STEPLINE, "status", run.run_id], folder)
    print(f"status, digest missing (built and saved): {rebuild[1]:.2f} s CPU")
    for command in ("status", "show"):
        wall, cpu = median([*STEPLINE, command, run.run_id], folder, repeat)
        print(f"{command} of a {steps}-step run: {cpu:.2f} s CPU ({wall:.2f} s wall) = {cpu / replay:.2f}x one load "
              f"(bar: < 1 s CPU)")
        wall, cpu = median([*STEPLINE, command, run.run_id, "--all"], folder, 1)
        print(f"{command} --all: {cpu:.2f} s CPU ({wall:.2f} s wall)")
    copy_runs(run_dir.path, runs - 1)
    wall, cpu = median([*STEPLINE, "list"], folder, repeat)
    print(f"list of {runs} runs of {steps} steps: {cpu:.2f} s CPU ({wall:.2f} s wall); the old way replayed each: "
          f"~{replay * runs:.0f} s CPU (bar: < 1 s CPU)")


def serve_ready(folder: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``stepline serve`` in ``folder`` until it has answered ``GET /`` (the runs list)."""
    token = "bench-token-0123456789"
    start = time.perf_counter()
    server = subprocess.Popen([*STEPLINE, "serve", "--port", "0", "--token", token], cwd=folder,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        line = server.stderr.readline()  # "stepline dashboard for ROOT: http://127.0.0.1:PORT/"
        if "http://" not in line:
            sys.exit(f"stepline serve did not start: {line}{server.stderr.read()[-500:]}")
        url = line[line.index("http://"):].strip()
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        while True:
            try:
                with urllib.request.urlopen(request, timeout=600) as answer:
                    answer.read()
                break
            except urllib.error.URLError as exc:  # printed, not listening yet
                if not isinstance(exc.reason, ConnectionRefusedError):
                    raise
                time.sleep(0.01)
        wall = time.perf_counter() - start
        with open(f"/proc/{server.pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime of the server
    finally:
        server.terminate()
        server.wait()
    return wall, cpu


def serve(folder: Path, steps: int, runs: int, repeat: int) -> None:
    import asyncio

    from stepline.engine import Engine
    from stepline.families import load_workflow, register_drivers
    from stepline.service import record_digest

    empty = folder / "empty"
    empty.mkdir()
    samples = [serve_ready(empty) for _ in range(repeat)]
    base_wall, base_cpu = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
    print(f"serve, empty project, until it answers its first request: {base_wall:.2f} s wall, {base_cpu:.2f} s CPU "
          f"(median of {repeat}; bar: < 2 s wall)")
    project = folder / "project"
    project.mkdir()
    register_drivers("native")
    engine = Engine(project_root=project, executor="dry-run", mode="yolo")
    run = asyncio.run(engine.start(load_workflow(flow(project, steps))))
    run_dir = engine.store.open(run.run_id)
    record_digest(run_dir, run, run_dir.events())
    copy_runs(run_dir.path, runs - 1)
    for copied in (project / ".stepline" / "runs").iterdir():
        (copied / "summary.json").unlink()  # written by a process that keeps no digest
    first = serve_ready(project)
    again = serve_ready(project)
    print(f"serve, {runs} runs of {steps} steps, none with a digest: {first[0]:.2f} s wall, {first[1]:.2f} s CPU "
          f"= {first[1] / base_cpu:.1f}x the empty project's CPU; started again: {again[0]:.2f} s wall, "
          f"{again[1]:.2f} s CPU = {again[1] / base_cpu:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--per-step", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold-samples", type=int, default=15, help="pairs of cold starts (help, run) measured")
    parser.add_argument("--serve-runs", type=int, default=60)
    parser.add_argument("--serve-steps", type=int, default=5000)
    parser.add_argument("--only", choices=("per-step", "cold-start", "readers", "serve"), help="measure just this")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in ("per-step", "readers", "serve"):
            (folder / name).mkdir()
        if options.only in (None, "per-step"):
            per_step(folder / "per-step", options.per_step, options.repeat)
        if options.only in (None, "cold-start"):
            cold_start(folder, options.cold_samples)
        if options.only in (None, "readers"):
            readers(folder / "readers", options.steps, options.runs, options.repeat)
        if options.only in (None, "serve"):
            serve(folder / "serve", options.serve_steps, options.serve_runs, options.repeat)


if __name__ == "__main__":
    main()
