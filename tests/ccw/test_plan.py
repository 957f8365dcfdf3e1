"""Execution strategy of a CCW session: IMPL_PLAN.md Section 4, phases, and plan.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline.ccw._plan import combine, parse_impl_plan, plan_json_model, read_plan_json
from stepline.errors import ReaderError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ccw"
AUTH = FIXTURES / "project-active" / ".workflow" / "active" / "WFS-auth-system"
FLAT = FIXTURES / "project-flat" / ".workflow" / "active" / "WFS-report-export"
KNOWN = {"IMPL-1", "IMPL-1.1", "IMPL-1.2", "IMPL-1.3", "IMPL-2", "IMPL-3", "IMPL-4"}


def _plan(model: str, extra: str = "") -> str:
    return f"# Plan\n\n## 4. Implementation Strategy\n\n**Execution Model**: {model}\n{extra}\n## 5. Tasks\n"


@pytest.mark.parametrize(("value", "expected"), [
    ("Sequential", "sequential"), ("Parallel", "parallel"), ("Phased", "phased"), ("TDD Cycles", "tdd"),
    ("Phased (parallel inside each phase)", "phased"),
    ("[Sequential | Parallel | Phased | TDD Cycles]", None), ("to be decided", None),
])
def test_execution_model_values(value: str, expected: str | None) -> None:
    """The first model word of the value counts; an unfilled template value names no model."""
    assert parse_impl_plan(_plan(value), KNOWN).model == expected


def test_section_four_of_a_real_plan() -> None:
    """Model, opportunities, serialization groups and critical path come from Section 4 with their lines."""
    strategy = parse_impl_plan((AUTH / "IMPL_PLAN.md").read_text(encoding="utf-8"), KNOWN)
    assert strategy.model == "parallel"
    assert strategy.impl_plan_model_line == 18
    assert strategy.parallelization[0].task_ids == ("IMPL-1.1", "IMPL-1.2", "IMPL-1.3")
    assert strategy.serialization_groups == [["IMPL-2", "IMPL-3"]]
    assert strategy.critical_path == ("IMPL-1.3", "IMPL-2", "IMPL-4")


def test_ids_are_matched_as_whole_tokens() -> None:
    """IMPL-1 inside IMPL-10 or IMPL-1.2 is not a mention of IMPL-1."""
    text = _plan("Parallel", "\n**Serialization Requirements**:\n- IMPL-10 then IMPL-1.2\n")
    strategy = parse_impl_plan(text, {"IMPL-1", "IMPL-10", "IMPL-1.2"})
    assert strategy.serialization[0].task_ids == ("IMPL-10", "IMPL-1.2")


def test_model_found_outside_section_four() -> None:
    """An older plan without a numbered Section 4 still yields its Execution Model line."""
    assert parse_impl_plan("# Plan\n\n**Execution Model**: Sequential\n", KNOWN).model == "sequential"


def test_phases_come_from_tasks_lines() -> None:
    """Each Phase N block assigns the tasks on its Tasks line; mentions elsewhere in the block do not."""
    known = {f"IMPL-00{n}" for n in range(1, 6)}
    strategy = parse_impl_plan((FLAT / "IMPL_PLAN.md").read_text(encoding="utf-8"), known)
    assert strategy.model == "phased"
    assert strategy.phases == {"IMPL-001": 1, "IMPL-002": 1, "IMPL-003": 2, "IMPL-004": 2, "IMPL-005": 3}


def test_phase_without_tasks_line_uses_its_mentions() -> None:
    """A phase block with no Tasks line assigns the task ids it mentions."""
    text = "## 6. Plan\n\n### Phase 1: setup\nDo IMPL-1 first.\n\n### Phase 2: rest\nThen IMPL-2.\n"
    assert parse_impl_plan(text, {"IMPL-1", "IMPL-2"}).phases == {"IMPL-1": 1, "IMPL-2": 2}


def test_plan_json_tool_names_are_not_strategies() -> None:
    """recommended_execution Agent/Codex names no model; a tdd plan_type means TDD."""
    assert plan_json_model({"recommended_execution": "Agent"}) is None
    assert plan_json_model({"recommended_execution": "Sequential"}) == "sequential"
    assert plan_json_model({"recommended_execution": "Codex", "_metadata": {"plan_type": "tdd"}}) == "tdd"


@pytest.mark.parametrize(("impl", "plan", "expected"), [
    ("Parallel", "Sequential", "sequential"), ("Sequential", "Parallel", "sequential"),
    ("Parallel", "Phased", "phased"), ("[Sequential | Parallel]", "Parallel", "parallel"),
    ("Phased", "Agent", "phased"),
])
def test_the_stricter_model_wins(impl: str, plan: str, expected: str) -> None:
    """plan.json and IMPL_PLAN.md may each only make the run more sequential."""
    combined = combine(parse_impl_plan(_plan(impl), KNOWN), {"recommended_execution": plan, "complexity": "Low"})
    assert combined.model == expected
    assert combined.plan_json == {"recommended_execution": plan, "complexity": "Low"}


def test_broken_plan_json_is_a_reader_error(tmp_path: Path) -> None:
    """plan.json that does not parse names its line."""
    path = tmp_path / "plan.json"
    path.write_text('{\n  "summary": \n}', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"plan\.json:3: plan\.json does not parse"):
        read_plan_json(path)
