"""`stepline plan PATH [--json]`: a workflow's plan before anything runs; a bad path or a folder holding no
workflow is one line and a non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli

SKILL = """---
name: demo-skill
description: A demo skill.
---

# Demo

## On Activation

Greet the user. If the intent is unclear, ask.

## Discovery

**Working mode.** Offer the choice:

- **Fast path** — batch the gaps.
- **Coaching path** — walk the sections.

When the user wants the long form, route to `./references/long.md`.

## Finalize

Wait for explicit yes. Then invoke `bmad-help`.
"""


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    folder = tmp_path / "demo-skill"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (folder / "references" / "long.md").write_text("Keep going until the user says they are done.\n",
                                                   encoding="utf-8")
    return folder


def test_plan_prints_steps_points_options_routes_and_handovers(skill: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["plan", str(skill), "--project-root", str(skill.parent)]) == 0
    out = capsys.readouterr().out.split("\n", 1)[1]  # after the summary line
    order = ["on-activation", "question ", "section-discovery", "choice ", "[F] Fast path", "[C] Coaching path",
             "route ", "references/long.md", "route-references-long", "loop ", "ends when: the user says they are "
             "done", "section-finalize", "confirm ", "handover ", "bmad-help -> NOT FOUND"]
    positions = [out.find(text) for text in order]
    assert -1 not in positions, out
    assert positions == sorted(positions), out


def test_plan_json_holds_the_same_points(skill: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["plan", str(skill), "--project-root", str(skill.parent), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    kinds = [(s["id"], [p["kind"] for p in s["points"]]) for s in plan["steps"] if s["points"]]
    assert kinds == [("on-activation", ["question"]),
                     ("section-discovery", ["choice", "route"]), ("route-references-long", ["loop"]),
                     ("section-finalize", ["confirm", "handover"])]
    assert plan["diagnostics"][0]["code"] == "unresolved-handover"


def test_a_bad_path_and_an_empty_folder_are_one_line_and_non_zero(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["plan", str(tmp_path / "missing")]) != 0
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    assert run_cli(["plan", str(tmp_path / "empty")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no workflow found" in err
