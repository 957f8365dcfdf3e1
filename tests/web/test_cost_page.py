"""The dashboard's cost page and /api/cost: the figures `stepline cost` prints, and a plot per sprint story."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fakes.runs import greeting_workflow, openai_run
from stepline.interfaces.cli._app import run_cli
from stepline.model import WorkflowSpec
from web.dashboard_project import TOKEN, Project, client_for


def _story(key: str) -> WorkflowSpec:
    """The greeting workflow dressed as a sprint story's run (its workflow id and story variable)."""
    spec = greeting_workflow()
    return spec.model_copy(update={"id": f"sprint-story:{key}", "variables": {**spec.variables, "sprint_story": key}})


def test_the_cost_page_shows_what_stepline_cost_says_with_a_plot_per_story(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two story runs: /api/cost?sprint=true is `stepline cost --sprint --json`; /cost (the sprint's stories by
    default) shows each story's plot (a bar per stage, its parts stacked, tokens and cost at its end) and the
    tables; another run and --since are a query away."""
    root = tmp_path / "project"
    root.mkdir()
    for key in ("1-1-add", "1-2-sub"):
        openai_run(root, workflow=_story(key))
    other, _ = openai_run(root)
    assert run_cli(["cost", "--sprint", "--json", "-C", str(root)]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert set(expected["stories"]) == {"1-1-add", "1-2-sub"} and other not in {r["run_id"] for r in expected["runs"]}
    project = Project(root=root, blocked=other, completed=other, question=other, damaged_journal="",
                      damaged_manifest="", child="")
    with client_for(project) as client:
        assert client.get("/api/cost").status_code == 401 and client.get("/cost").status_code == 401
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        assert client.get("/api/cost", params={"sprint": "true"}).json() == expected
        page = client.get("/cost").text
        assert client.get("/api/cost", params={"run": other}).json()["runs"][0]["run_id"] == other
        since = client.get("/cost", params={"since": "2000-01-01"})
        assert since.status_code == 200 and "the runs made since 2000-01-01" in since.text and other in since.text
    plots = re.findall(r'<section class="story-plot" data-story="([^"]+)">.*?</section>', page, re.S)
    assert plots == ["1-1-add", "1-2-sub"]
    story = expected["stories"]["1-1-add"]
    svg = page[page.index('data-story="1-1-add"'):page.index('data-story="1-2-sub"')]
    assert svg.count("<rect") >= 2 + 4  # input and cache read (the second call's) at least, and the legend
    assert f'{story["input_tokens"] + story["output_tokens"]:,} · ${story["cost_usd"]:.4f}' in svg
    assert f'${expected["total"]["cost_usd"]:.4f}' in page and "the sprint loop&#39;s story runs" in page
