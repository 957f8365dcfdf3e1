"""A run blocked on a question goes on from the browser: its options are buttons, a click answers through the run
service, and the server resumes the run itself (the executor it was started with) until it completes or asks
again; no terminal. A refused answer is shown as refused; a run only a person at a terminal can drive says so; a
run another process drives is not driven twice; a server that stops leaves the run resumable."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from stepline.engine import HumanChannel
from stepline.families import load_workflow
from stepline.service import RunService
from stepline.store import RunDir
from web.dashboard_project import TOKEN, read_json, start_run, stepline_command

ORIGIN = {"Origin": "http://127.0.0.1:8765"}
BEARER = {"Authorization": f"Bearer {TOKEN}"}

ORDER = {"id": "order", "steps": [
    {"id": "colour", "name": "Pick a colour", "body": "Ask for the colour."},
    {"id": "size", "name": "Pick a size", "body": "Ask for the size.", "outputs": ["order.md"]},
]}
ORDER_SCRIPT = {"steps": {
    "colour": [{"ask": {"question": "Which colour?", "choices": ["red", "blue"]}}, {"finish": {"summary": "asked"}}],
    "size": [{"ask": {"question": "Which size?", "choices": ["S", "M", "L"]}},
             {"write_output": {"content": "an order\n", "mode": "replace"}}, {"finish": {"summary": "ordered"}}],
}}


class Browser:
    """A logged-in client of the project's dashboard, posting the run page's forms as a browser does."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        answer = client.post("/login", data={"token": TOKEN, "next": "/"}, headers=ORIGIN, follow_redirects=False)
        assert answer.status_code == 303
        self.csrf = client.app.state.web.auth.csrf_value  # type: ignore[attr-defined]

    def page(self, run_id: str) -> str:
        answer = self.client.get(f"/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        return answer.text

    def click(self, run_id: str, gate_id: str, **form: str) -> Any:
        return self.client.post(f"/runs/{run_id}/gates/{gate_id}", headers=ORIGIN, follow_redirects=False,
                                data={"csrf_token": self.csrf, "by": "ada", "decision": "answer", **form})

    def went_on(self, run_id: str) -> None:
        """Wait until the server's continuing of the run has ended (an event, not a pause)."""
        continuation = self.client.app.state.web.continuations.get(run_id)  # type: ignore[attr-defined]
        assert continuation is not None, "the run was not continued"
        assert continuation.done.wait(120), "the run did not stop"
        assert continuation.error is None, continuation.error


def buttons(page: str) -> list[str]:
    return re.findall(r'<button type="submit" name="answer" value="([^"]+)"', page)


def pending(root: Path, run_id: str) -> list[dict[str, Any]]:
    return [g for g in read_json(root / ".stepline" / "runs" / run_id / "gates.json") if g["status"] == "pending"]


def journal(root: Path, run_id: str) -> list[dict[str, Any]]:
    path = root / ".stepline" / "runs" / run_id / "journal.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_click_answers_and_the_run_goes_on_to_its_next_question_then_completes(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    run_id = start_run(root, ORDER, ORDER_SCRIPT, "order")
    with _client(root) as client:
        browser = Browser(client)
        page = browser.page(run_id)
        assert '<p class="question">Which colour?</p>' in page and buttons(page) == ["red", "blue"]
        assert '<input name="answer"' not in page  # no free text: the question takes one of its options
        [gate] = pending(root, run_id)

        # Not an option (a page from before the question changed, say): refused, shown as refused, nothing recorded.
        refused = browser.click(run_id, gate["gate_id"], answer="green")
        assert refused.status_code == 400
        assert re.search(r'<p class="refused"[^>]*><strong>Refused, nothing was recorded:</strong> &#39;green&#39; '
                         r"is not an answer to .*answer one of: red, blue", refused.text)
        assert buttons(refused.text) == ["red", "blue"] and "approved" not in refused.text
        assert pending(root, run_id) == [gate]
        assert not any(e["type"] == "AnswerGiven" for e in journal(root, run_id))

        answered = browser.click(run_id, gate["gate_id"], answer="blue")
        assert answered.status_code == 303
        browser.went_on(run_id)  # no terminal: the server resumed the run with its scripted executor
        page = browser.page(run_id)
        assert '<p class="question">Which size?</p>' in page and buttons(page) == ["S", "M", "L"]
        assert 'id="run-status">blocked<' in page
        [size] = pending(root, run_id)
        assert size["step_id"] == "size"

        assert browser.click(run_id, size["gate_id"], answer="m").status_code == 303  # a key, any case
        browser.went_on(run_id)
        page = browser.page(run_id)
        assert 'id="run-status">completed<' in page and not buttons(page)
        api = client.get(f"/api/runs/{run_id}", headers=BEARER).json()
        assert api["status"] == "completed" and api["continuation"] == {"active": False, "error": None}

    answers = [(e["data"]["answer"], e["data"]["by"]) for e in journal(root, run_id) if e["type"] == "AnswerGiven"]
    assert answers == [("blue", "ada"), ("M", "ada")]
    assert (root / "order.md").read_text(encoding="utf-8") == "an order\n"
    assert (root / ".stepline" / "runs" / run_id / "summary.json").is_file()  # its digest kept when it stopped


def test_a_question_without_options_takes_free_text(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    workflow = {"id": "naming", "steps": [{"id": "name", "body": "Ask."}]}
    script = {"steps": {"name": [{"ask": {"question": "What is it called?"}}, {"finish": {"summary": "named"}}]}}
    run_id = start_run(root, workflow, script, "naming")
    with _client(root) as client:
        browser = Browser(client)
        page = browser.page(run_id)
        assert not buttons(page) and '<label>Your answer <input name="answer" required></label>' in page
        [gate] = pending(root, run_id)
        assert browser.click(run_id, gate["gate_id"], answer="Widget 2000").status_code == 303
        browser.went_on(run_id)
        assert 'id="run-status">completed<' in browser.page(run_id)
    assert [e["data"]["answer"] for e in journal(root, run_id) if e["type"] == "AnswerGiven"] == ["Widget 2000"]


def test_a_run_a_person_at_a_terminal_drives_is_not_continued_and_says_so(tmp_path: Path) -> None:
    """The human executor: the decision is recorded, the run stays blocked, and its page says which command goes
    on (the API's continue refuses it, naming it)."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "gated.yaml").write_text(yaml.safe_dump({"id": "gated", "steps": [
        {"id": "ship", "name": "Ship it", "body": "Ship.", "human_gate": "required"}]}), encoding="utf-8")
    engine = RunService(root).engine(executor="human", human=HumanChannel(interactive=False))
    run_id = asyncio.run(engine.start(load_workflow(root / "gated.yaml"))).run_id
    with _client(root) as client:
        browser = Browser(client)
        page = browser.page(run_id)
        assert ("the run cannot go on from here: its executor is a person at a terminal (the human executor): "
                f"stepline resume {run_id} there") in page
        decided = browser.click(run_id, "step:ship", decision="approve")
        assert decided.status_code == 303
        assert client.app.state.web.continuations.get(run_id) is None  # type: ignore[attr-defined]
        page = browser.page(run_id)
        assert "Every gate is decided. It cannot go on from here: its executor is a person at a terminal" in page
        assert 'id="continue"' not in page
        refused = client.post(f"/api/runs/{run_id}/continue", headers=BEARER)
        assert refused.status_code == 400 and "person at a terminal" in refused.json()["error"]
    assert read_json(root / ".stepline" / "runs" / run_id / "manifest.json")["status"] == "blocked"


def test_the_api_continues_a_run_once_no_gate_waits_and_never_one_another_process_drives(tmp_path: Path) -> None:
    from stepline.store import RunLock

    root = tmp_path / "project"
    root.mkdir()
    run_id = start_run(root, ORDER, ORDER_SCRIPT, "order")
    with _client(root) as client:
        waiting = client.post(f"/api/runs/{run_id}/continue", headers=BEARER)
        assert waiting.status_code == 409 and "waits for a person at ask:" in waiting.json()["error"]
        [gate] = pending(root, run_id)
        answer = client.post(f"/api/runs/{run_id}/gates/{gate['gate_id']}/answer", headers=BEARER,
                             json={"by": "ci", "answer": "red"})
        assert answer.status_code == 200 and answer.json()["gate"]["answer"] == "red"
        assert client.app.state.web.continuations.get(run_id) is None  # type: ignore[attr-defined]  # API: recorded only

        lock = RunLock(root / ".stepline" / "runs" / run_id / "lock", run_id)
        lock.acquire()  # another process drives it now, as a `stepline resume` would
        try:
            busy = client.post(f"/api/runs/{run_id}/continue", headers=BEARER)
            assert busy.status_code == 409 and "is driven by process" in busy.json()["error"]
        finally:
            lock.release()
        started = client.post(f"/api/runs/{run_id}/continue", headers=BEARER)
        assert started.status_code == 202 and started.json()["continuing"] is True
        continuation = client.app.state.web.continuations.get(run_id)  # type: ignore[attr-defined]
        assert continuation.done.wait(120) and continuation.error is None
        assert client.get(f"/api/runs/{run_id}", headers=BEARER).json()["pending_gates"][0]["step_id"] == "size"


def test_a_server_that_stops_leaves_the_run_it_continues_resumable(tmp_path: Path) -> None:
    """The server stops while the run it continues is at work: the run is stopped as Ctrl-C stops one (its lock let
    go, nothing lost), and `stepline resume` completes it."""
    root = tmp_path / "project"
    (root / "config").mkdir(parents=True)
    (root / "config" / "runtime.yaml").write_text(yaml.safe_dump(
        {"tools": {"risk_policy": {"high_requires_approval": False}}}), encoding="utf-8")
    started = root / "started"
    workflow = {"id": "long", "steps": [
        {"id": "ask", "body": "Ask."},
        {"id": "work", "body": "Work.", "tools": [{"name": "shell", "required": True, "args": {
            "command": f"test -e {started} || (touch {started} && sleep 60)"}}]}]}  # long the first time only
    script = {"steps": {"ask": [{"ask": {"question": "Go?", "choices": ["yes", "no"]}}, {"finish": {}}]}}
    run_id = start_run(root, workflow, script, "long")
    with _client(root) as client:
        browser = Browser(client)
        [gate] = pending(root, run_id)
        assert browser.click(run_id, gate["gate_id"], answer="yes").status_code == 303
        continuation = client.app.state.web.continuations.get(run_id)  # type: ignore[attr-defined]
        for _ in range(600):  # the tool's command is running (it made its file)
            if started.exists() or continuation.done.wait(0.1):
                break
        assert started.exists() and continuation.active
    # The client closed: the server's shutdown stopped the run it drove, and waited for it.
    assert continuation.done.is_set() and "the dashboard stopped while the run went on" in str(continuation.error)
    manifest = read_json(root / ".stepline" / "runs" / run_id / "manifest.json")
    assert manifest["status"] == "running" and RunDir(root / ".stepline" / "runs" / run_id).holder() is None
    # Stopped mid-command: a resume asks before running it again (it may have done its work), then completes.
    resumed = subprocess.run(stepline_command(root, "resume", run_id, "-q"), capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 9 and "rerun:" in resumed.stdout, resumed.stdout + resumed.stderr
    for command in (["approve", run_id], ["resume", run_id, "-q"]):
        done = subprocess.run(stepline_command(root, *command), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    assert read_json(root / ".stepline" / "runs" / run_id / "manifest.json")["status"] == "completed"


def _client(root: Path) -> TestClient:
    """A client of the project's dashboard, with the project's runtime config (as `stepline serve` has it)."""
    from stepline.engine import load_runtime_config
    from stepline.interfaces.web import create_app

    return TestClient(create_app(root, load_runtime_config(root, None), TOKEN), base_url="http://127.0.0.1:8765")
