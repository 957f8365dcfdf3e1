"""The shell tool's cost per call: the old interpreter-worker path against the direct process path, in one run.

Old: the shell handler as it was before the shell tool became a command (``subprocess.call`` into temporary
files), run by the pipeline in a fresh interpreter worker (``run_in_worker``: pickled call, 50 ms polling,
one thread per call). New: the built-in ``shell`` tool, ``/bin/sh -c`` started directly by asyncio in its own
process group. Both go through ``ToolPipeline.arun`` with the same policy, so only the way of running differs.

Prints (1) the median latency of one call of ``--command`` (default ``sleep 0.05``) over ``--calls`` calls,
with a bare ``subprocess.run`` of the same command as the floor, and (2) the wall time of ``--total`` calls at
``--concurrency`` (default 100 at 10; ideal = total x 0.05 s / concurrency = 0.5 s), with old/new ratios.
Usage: python bench/tool_shell.py [--calls N] [--total N] [--concurrency N] [--command CMD]
"""

from __future__ import annotations

import subprocess
import tempfile
from typing import IO, Any

from stepline.tools._spec import ToolContext, ToolOutput

# Only light imports above: the old path's worker imports this module to find ``legacy_run_shell``.


def _head(stream: IO[bytes], limit: int) -> str:
    stream.seek(0, 2)
    size = stream.tell()
    stream.seek(0)
    text = stream.read(limit).decode("utf-8", "replace")
    return text if size <= limit else f"{text}\n…[truncated {size - limit} bytes]"


def legacy_run_shell(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """The shell handler as it ran in the worker before (verbatim but for its name)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code = subprocess.call(str(args["command"]), shell=True, cwd=ctx.project_root,
                               stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        stdout, stderr = _head(out, ctx.max_output_bytes), _head(err, ctx.max_output_bytes)
    error = None if code == 0 else f"command exited with code {code}"
    return ToolOutput(result={"exit_code": code}, stdout=stdout, stderr=stderr, error=error)


def main() -> None:
    import argparse
    import asyncio
    import statistics
    import time
    from pathlib import Path

    from stepline.model import ToolCall
    from stepline.tools import ToolPipeline, ToolPolicy, ToolSpec, default_registry

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20, help="sequential calls for the median latency")
    parser.add_argument("--total", type=int, default=100, help="calls in the concurrent batch")
    parser.add_argument("--concurrency", type=int, default=10, help="calls in flight at once")
    parser.add_argument("--command", default="sleep 0.05", help="the shell command each call runs")
    args = parser.parse_args()

    registry = default_registry()
    registry.register(ToolSpec(name="shell_in_worker", description="the old shell path",
                               handler=legacy_run_shell, risk="high"))
    pipeline = ToolPipeline(registry, ToolPolicy(high_requires_approval=False))

    async def one(tool: str, root: Path) -> float:
        start = time.perf_counter()
        result = await pipeline.arun(ToolCall(name=tool, args={"command": args.command}), step_id="s",
                                     project_root=root)
        if result.status != "ok":
            raise SystemExit(f"{tool}: {result.status}: {result.error}")
        return time.perf_counter() - start

    async def latency(tool: str, root: Path) -> float:
        await one(tool, root)  # warm up: first-use imports, the thread pool
        return statistics.median([await one(tool, root) for _ in range(args.calls)])

    async def batch(tool: str, root: Path) -> float:
        gate = asyncio.Semaphore(args.concurrency)

        async def limited() -> None:
            async with gate:
                await one(tool, root)

        start = time.perf_counter()
        await asyncio.gather(*(limited() for _ in range(args.total)))
        return time.perf_counter() - start

    def bare(root: Path) -> float:
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            subprocess.run(["/bin/sh", "-c", args.command], cwd=root, check=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        old_one, new_one = asyncio.run(latency("shell_in_worker", root)), asyncio.run(latency("shell", root))
        floor = bare(root)
        old_all, new_all = asyncio.run(batch("shell_in_worker", root)), asyncio.run(batch("shell", root))

    ideal = args.total * floor / args.concurrency
    print(f"command: {args.command!r}")
    print(f"(1) one call, median of {args.calls}:")
    print(f"    old (interpreter worker):  {old_one * 1000:8.1f} ms")
    print(f"    new (direct process):      {new_one * 1000:8.1f} ms")
    print(f"    bare subprocess.run:       {floor * 1000:8.1f} ms   (floor)")
    print(f"    old/new: {old_one / new_one:.2f}x   new overhead over the floor: {(new_one - floor) * 1000:.1f} ms")
    print(f"(2) {args.total} calls at concurrency {args.concurrency}, via ToolPipeline.arun:")
    print(f"    old (interpreter worker):  {old_all:8.2f} s")
    print(f"    new (direct process):      {new_all:8.2f} s")
    print(f"    ideal (total x floor / concurrency): {ideal:.2f} s")
    print(f"    old/new: {old_all / new_all:.2f}x   new/ideal: {new_all / ideal:.2f}x")


if __name__ == "__main__":
    # Run as the module ``tool_shell`` (bench/ is sys.path[0]), so the old path's worker can import
    # ``legacy_run_shell`` by reference: a handler defined in ``__main__`` could not be sent to it.
    import tool_shell

    tool_shell.main()
