"""The sprint board page over a sprint loop that really ran: stories in sprint order with their loop's stages,
budgets and deferred work; a committed story shows no step left to do; the board follows the loop live."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from stepline.engine import RuntimeConfig
from stepline.interfaces.web import create_app
from web.dashboard_project import TOKEN, Server
from web.sprint_board import build_sprint_project

BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def sprint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The project after the loop ran three stories, and each story's run id."""
    root = tmp_path_factory.mktemp("sprintweb") / "calc"
    return root, build_sprint_project(root)


@pytest.fixture
def client(sprint: tuple[Path, dict[str, str]]) -> Iterator[TestClient]:
    with TestClient(create_app(sprint[0], RuntimeConfig(), TOKEN), base_url="http://127.0.0.1:8765") as client:
        client.headers.update(BEARER)
        yield client


def _row(page: str, key: str) -> str:
    found = re.search(rf'<tr data-key="{key}".*?</tr>', page, re.DOTALL)
    assert found, key
    return found.group(0)


def test_the_board_shows_stories_stages_budgets_and_deferred_work(client: TestClient) -> None:
    """Each story with the board's status, the loop's state, the stages it went through (a committed story's
    unused `defer` is not among them), builds, tokens against the story's budget; the budgets; deferred-work.md."""
    page = client.get("/sprint")
    assert page.status_code == 200
    text = page.text
    committed, deferred, blocked = (_row(text, k) for k in ("1-1-add", "1-2-sub", "1-3-mul"))
    assert 'class="badge completed">completed' in committed and ">commit<" in committed and ">defer<" not in committed
    assert re.findall(r'class="stage (\w+)"', committed) == ["completed"] * 7
    assert 'class="badge deferred">deferred' in deferred and ">build@2<" in deferred and ">defer<" in deferred
    assert 'class="badge blocked">blocked' in blocked and 'class="stage blocked" title="review: blocked"' in blocked
    assert "3,400" in committed and "57% of the story's budget" in committed and 'value="0.5666' in committed
    assert 'class="stage completed bad" title="verify: completed (fail)"' in deferred
    assert "a story 6,000 tokens" in text and "the loop $5.00" in text
    assert "<h2>1-2-sub (" in text and "verification failed" in text and "&lt;!-- stepline" not in text
    assert 'class="epic" data-key="epic-2"' in text and "1/5 stories done" in text


def test_a_completed_story_run_shows_no_step_left_to_do(client: TestClient,
                                                       sprint: tuple[Path, dict[str, str]]) -> None:
    """The committed story's run page and the runs list do not show its unused `defer` step as pending (8 of 9):
    the run completed without it."""
    run_id = sprint[1]["1-1-add"]
    page = client.get(f"/runs/{run_id}").text
    defer = re.search(r"<tr data-step-id=\"defer\">.*?</tr>", page, re.DOTALL)
    assert defer and "not needed" in defer.group(0) and ">pending<" not in defer.group(0)
    assert ">pending<" not in page
    question = client.get(f"/runs/{sprint[1]['1-3-mul']}").text  # a story's loop goes on as a whole
    assert "cannot go on from here: a sprint story goes on with its loop: stepline sprint resume" in question
    listing = client.get("/").text
    row = re.search(rf'<tr class="row-completed" data-run-id="{run_id}">.*?</tr>', listing, re.DOTALL)
    assert row and "7 <span class=\"sub\">(1 not needed)</span>" in row.group(0)


def test_no_board_is_a_page_saying_what_to_do(tmp_path: Path) -> None:
    """A project without sprint-status.yaml: the page says there is no board and how one comes to be."""
    with TestClient(create_app(tmp_path, RuntimeConfig(), TOKEN), base_url="http://127.0.0.1:8765") as client:
        page = client.get("/sprint", headers=BEARER)
    assert page.status_code == 404 and "no sprint board" in page.text and "sprint-planning" in page.text


def test_the_board_stream_says_when_the_loop_changed_something(sprint: tuple[Path, dict[str, str]]) -> None:
    """/api/sprint/stream sends `changed` when deferred-work.md (or the board, or a story's run) changes."""
    root, _ = sprint
    server = Server(root, "--token", TOKEN)
    deferred = root / "_bmad-output" / "implementation-artifacts" / "deferred-work.md"
    before = deferred.read_text()
    try:
        with httpx.stream("GET", f"{server.url}/api/sprint/stream", headers=BEARER, timeout=30) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            assert next(lines).startswith("retry:")
            time.sleep(1.0)  # the stream has taken its first look
            deferred.write_text(before + "\n## later\n\n- one more thing\n")
            started = time.monotonic()
            for line in lines:
                if line.startswith("data: "):
                    assert json.loads(line[6:]) == {"changes": 1}
                    break
            assert time.monotonic() - started < 10
    finally:
        deferred.write_text(before)
        server.stop()
