"""Peak memory of the YAML loader on a big native workflow, as a multiple of the file's size (issue 28 item 4).

Usage: ``python bench/yaml_memory.py [--steps 20000]``

Writes the workflow ``bench/yaml_load.py`` writes (each step with a name, description, body, outputs, retries and
a dependency), then measures with :mod:`tracemalloc` the peak of what is allocated while the YAML becomes values
(``load_yaml_lines``, as the native reader parses: values and the steps' lines), and the same through a composed
node tree (how the reader parsed before), and prints each peak over the file's size. The loader's is ≤ 5×.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepline._yaml import compose_yaml_text, load_yaml_lines


def _generator() -> Callable[[Path, int], None]:
    spec = importlib.util.spec_from_file_location("yaml_load", Path(__file__).with_name("yaml_load.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generate: Callable[[Path, int], None] = module.generate
    return generate


def _peak(parse: Callable[[], Any]) -> tuple[int, float]:
    tracemalloc.start()
    started = time.perf_counter()
    result = parse()
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.yaml"
        _generator()(path, args.steps)
        text = path.read_text(encoding="utf-8")
        size = path.stat().st_size
    print(f"{args.steps} steps, {size / 1e6:.1f} MB of YAML")
    for name, parse in (("loader (values + step lines, no node tree)", lambda: load_yaml_lines(text, path="big")),
                        ("node tree composed, then values (before)", lambda: compose_yaml_text(text, path="big"))):
        peak, elapsed = _peak(parse)
        print(f"  {name}: peak {peak / 1e6:.0f} MB = {peak / size:.1f}x the file, {elapsed:.1f}s under tracemalloc")


if __name__ == "__main__":
    main()
