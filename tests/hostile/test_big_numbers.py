"""A number of more than 4,300 digits (Python reads none longer) in YAML, TOML or JSON — a native workflow, a
CCW task, a skill's customize.toml — is one line and exit 4, naming the file and line, the number cut short in
the message; the dashboard's CCW pages answer 4xx, not 500; a deeply nested or huge-integer native .json workflow
gets its reader's message, not "not a workflow file"."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hostile.hostile_support import cli
from stepline.engine import RuntimeConfig
from stepline.interfaces.web import create_app

HUGE = "9" * 5000
SKILL = Path("_bmad") / "mini" / "tiny-build"
CCW = Path(__file__).resolve().parents[1] / "fixtures" / "ccw_run" / "WFS-phased"


def _one_line(outcome: object, *needles: str) -> str:
    code, err = outcome.code, outcome.err  # type: ignore[attr-defined]
    assert code == 4, outcome
    assert len(err.strip().splitlines()) == 1, err
    assert not re.search(r"\d{100}", err), f"the number is not cut: {len(err)} characters"
    assert "set_int_max_str_digits" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("layout", ["one line", "pretty"])
def test_a_huge_integer_in_a_native_json_workflow(project: Path, layout: str) -> None:
    spec = {"id": "flow", "steps": [{"id": "one", "name": "One", "retries": 1}]}
    text = json.dumps(spec, indent=2 if layout == "pretty" else None).replace('"retries": 1', f'"retries": {HUGE}')
    (project / "flow.json").write_text(text, encoding="utf-8")
    line = 1 if layout == "one line" else 7
    _one_line(cli("run", "flow.json", "--executor", "dry-run", "-q", "-C", str(project)),
              f"flow.json:{line}:", "5000 digits")
    outcome = cli("validate", str(project / "flow.json"), "-C", str(project))
    assert outcome.code == 10 and "5000 digits" in outcome.out and not re.search(r"\d{100}", outcome.out), outcome


def test_a_deeply_nested_one_line_json_workflow_is_named_as_such(project: Path) -> None:
    (project / "flow.json").write_text('{"id": "flow", "steps": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                       encoding="utf-8")
    err = _one_line(cli("run", "flow.json", "--executor", "dry-run", "-q", "-C", str(project)), "flow.json")
    assert "nested too deeply" in err and "not a workflow file" not in err


def test_a_huge_integer_in_a_native_yaml_workflow(project: Path) -> None:
    (project / "flow.yaml").write_text(f"id: flow\nsteps:\n  - id: one\n    name: One\n    retries: {HUGE}\n",
                                       encoding="utf-8")
    _one_line(cli("run", "flow.yaml", "--executor", "dry-run", "-q", "-C", str(project)), "flow.yaml:5:",
              "5000 digits")


def test_a_huge_integer_in_customize_toml(mini: Path) -> None:
    toml = mini / SKILL / "customize.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + f"\n[extra]\nlimit = {HUGE}\n", encoding="utf-8")
    _one_line(cli("run", str(mini / SKILL), "--executor", "dry-run", "--yolo", "-q", "-C", str(mini)),
              "customize.toml:", "5000 digits")


def _ccw_project(tmp_path: Path) -> Path:
    project = tmp_path / "ccw"
    session = project / ".workflow" / "active" / CCW.name
    shutil.copytree(CCW, session)
    task = session / ".task" / "IMPL-1.json"
    task.write_text(task.read_text(encoding="utf-8").replace('"title"', f'"budget": {HUGE},\n  "title"', 1),
                    encoding="utf-8")
    return project


def test_a_huge_integer_in_a_ccw_task(tmp_path: Path) -> None:
    project = _ccw_project(tmp_path)
    _one_line(cli("ccw", "execute", "-y", "--executor", "dry-run", "-q", "-C", str(project)), "IMPL-1.json:",
              "5000 digits")
    outcome = cli("validate", str(project / ".workflow" / "active" / CCW.name), "-C", str(project))
    assert outcome.code == 10 and "IMPL-1.json" in outcome.out and "5000 digits" in outcome.out, outcome
    assert not re.search(r"\d{100}", outcome.out)


def test_the_dashboards_ccw_pages_answer_4xx(tmp_path: Path) -> None:
    project = _ccw_project(tmp_path)
    with TestClient(create_app(project, RuntimeConfig(), "t0ken"), base_url="http://127.0.0.1:8765") as client:
        client.headers["Authorization"] = "Bearer t0ken"
        for url in ("/api/ccw/sessions", f"/api/ccw/sessions/{CCW.name}", "/ccw", f"/ccw/{CCW.name}"):
            response = client.get(url)
            assert response.status_code < 500, (url, response.status_code, response.text[:300])
        board = client.get(f"/api/ccw/sessions/{CCW.name}")
        assert board.status_code == 422 and "5000 digits" in board.json()["error"], board.text[:300]
        assert not re.search(r"\d{100}", board.text)
