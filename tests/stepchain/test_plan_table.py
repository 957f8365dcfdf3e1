"""Every v6.11.0 skill (as installed) and the four CCW v7.3.14 skills read into their plans, compared with a
table a person wrote by reading each skill's text (``plan_expectations.yaml``): per step, the questions, choices
with their options, confirmations, loops, routes and hand-overs, in text order.

Where the reader and the person still disagree the table says so (``known``: a point the reader misses, or one
it reports that the text does not give), so each disagreement is visible and counted, never hidden.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stepchain.plan_table import notation
from stepline.families import read_plan

SHARED = Path(__file__).resolve().parents[3] / "shared"
V611 = SHARED / "corpus" / "bmad" / "v6.11.0"
CCW = SHARED / "corpus" / "ccw" / "v7.3.14" / ".claude" / "skills"
TABLE = yaml.safe_load((Path(__file__).with_name("plan_expectations.yaml")).read_text(encoding="utf-8"))

pytestmark = pytest.mark.skipif(not V611.is_dir(), reason="the shared corpus is not here")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stepline.bmad._install import install_bmad

    project = tmp_path_factory.mktemp("v611")
    install_bmad(V611, project)
    return project


def _expected(table: dict[str, Any], name: str) -> dict[str, list[str]]:
    entry = table[name] or {}
    steps = {k: list(v or []) for k, v in entry.items() if k not in ("then", "known")}
    if "then" in entry:
        steps.update(_expected(table, entry["then"]))
    return steps


def _known(table: dict[str, Any], name: str) -> dict[str, Any]:
    entry = table[name] or {}
    known = dict(entry.get("known") or {})
    if "then" in entry:
        for step, diff in _known(table, entry["then"]).items():
            known.setdefault(step, diff)
    return known


def _actual(path: Path) -> dict[str, list[str]]:
    plan = read_plan(path)
    return {s.id: [notation(p) for p in s.points] for s in plan.steps if s.points}


def _compare(name: str, actual: dict[str, list[str]], expected: dict[str, list[str]],
             known: dict[str, Any]) -> None:
    for step in sorted(set(actual) | set(expected) | set(known)):
        diff = known.get(step) or {}
        want = [p for p in expected.get(step, []) if p not in (diff.get("missed") or [])]
        got = [p for p in actual.get(step, []) if p not in (diff.get("extra") or [])]
        assert got == want, f"{name} / {step}: the reader gives {actual.get(step)}, the table {expected.get(step)}"


def _installed_skills(project: Path) -> dict[str, Path]:
    return {p.parent.name: p.parent for p in sorted((project / "_bmad").rglob("SKILL.md"))}


def test_the_table_covers_every_installed_skill(installed: Path) -> None:
    assert set(_installed_skills(installed)) == set(TABLE["bmad-v6.11.0"]), "the table must cover all 49 skills"
    assert len(TABLE["bmad-v6.11.0"]) == 49
    assert set(TABLE["ccw-v7.3.14"]) == {p.name for p in CCW.iterdir() if (p / "SKILL.md").is_file()}


@pytest.mark.parametrize("name", sorted(TABLE["bmad-v6.11.0"]))
def test_v611_skill_plan_matches_the_table(installed: Path, name: str) -> None:
    table = TABLE["bmad-v6.11.0"]
    _compare(name, _actual(_installed_skills(installed)[name]), _expected(table, name), _known(table, name))


@pytest.mark.parametrize("name", sorted(TABLE["ccw-v7.3.14"]))
def test_ccw_skill_plan_matches_the_table(name: str) -> None:
    table = TABLE["ccw-v7.3.14"]
    _compare(name, _actual(CCW / name), _expected(table, name), _known(table, name))
