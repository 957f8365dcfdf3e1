"""bench/ccw_gen.py writes sessions the reader and the planner accept, the same for the same seed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from stepline.ccw._check import check_ccw_session
from stepline.ccw._session import load_ccw_session
from stepline.ccw._waves import plan_workflow_waves

BENCH_GEN = Path(__file__).resolve().parents[2] / "bench" / "ccw_gen.py"


@pytest.fixture(scope="module")
def ccw_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ccw_gen", BENCH_GEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("schema", ["six-field", "flat"])
def test_generated_session_reads_checks_and_plans(ccw_gen: ModuleType, tmp_path: Path, schema: str) -> None:
    """A generated session of either schema checks clean and plans every task once."""
    session_dir = ccw_gen.generate_session(tmp_path, 300, seed=5, schema=schema)
    assert check_ccw_session(session_dir) == []
    spec = load_ccw_session(session_dir)
    assert spec.meta["task_schema"] == schema
    assert sum(len(wave.tasks) for wave in plan_workflow_waves(spec)) == 300


def test_same_seed_same_graph(ccw_gen: ModuleType) -> None:
    """The random DAG depends only on its arguments."""
    assert ccw_gen.random_dag(500, seed=9) == ccw_gen.random_dag(500, seed=9)
    assert ccw_gen.random_dag(500, seed=9) != ccw_gen.random_dag(500, seed=10)
