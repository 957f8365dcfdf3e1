"""A run and its answers across the three interfaces, which share one run service.

A run an IDE agent started over MCP goes on from the CLI (it used to stop at ``unknown executor 'mcp-bridge'``).
An answer that is not among the pending question's options is refused at once, naming them, by ``stepline
answer``, by the dashboard and over MCP alike, and nothing is recorded: the dashboard never shows it as approved
(``stepline answer`` used to record it, the dashboard then listed the gate as approved, and the run only refused
it at resume). Each interface is driven as its users drive it: the real CLI in a process of its own, the real MCP
server over stdio with the official client, the dashboard's app with FastAPI's TestClient.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from interfaces.mcp_agent import call, stdio_server
from stepline.engine import RuntimeConfig
from stepline.interfaces.web import create_app

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "project"
MENUS = "_bmad/demo/workflows/menus"
GATE = "ask:step-02-draft/1/menu/0"
OPTIONS = "A (Advanced Elicitation), P (Party Mode), R (Rewrite), X (Exit), C (Continue)"
TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(FIXTURE, copy)
    return copy.resolve()


def stepline(project: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The ``stepline`` command in a process of its own, in ``project``."""
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)],
                          input=stdin, capture_output=True, text=True, timeout=120, check=False)


def blocked_over_mcp(project: Path) -> str:
    """Start the menus workflow over MCP in non-interactive mode, do each step's work as an agent would, until
    the run blocks on step 2's menu; return the run id (the server is gone when this returns)."""

    async def main() -> str:
        async with asyncio.timeout(60), Client(stdio_server(project)) as client:
            run_id = str((await call(client, "start_run", {"path": MENUS, "mode": "non-interactive"}))["run_id"])
            for _ in range(10):
                current = await call(client, "current_step", {"wait_seconds": 30})
                if current["status"] != "waiting_for_work":
                    assert current["status"] == "blocked", current
                    assert [r["gate_id"] for r in current["requests"]] == [GATE]
                    return run_id
                for request in current["requests"]:
                    await call(client, "finish", {"request_id": request["request_id"], "summary": "done"})
            raise AssertionError("the run never blocked on the menu")

    return asyncio.run(main())


def gates(project: Path, run_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads((project / ".stepline" / "runs" / run_id / "gates.json").read_text())
    return found


def answers(project: Path, run_id: str) -> list[dict[str, Any]]:
    journal = (project / ".stepline" / "runs" / run_id / "journal.jsonl").read_text(encoding="utf-8")
    return [e["data"] for e in map(json.loads, journal.splitlines()) if e["type"] == "AnswerGiven"]


def test_a_run_started_over_mcp_is_answered_and_resumed_from_the_cli(project: Path) -> None:
    """The MCP run's menu: `stepline answer RUN Z` is refused at once naming the options (nothing recorded);
    `stepline answer RUN continue --resume` records C and goes on, the remaining step going to the person at
    the terminal (the IDE agent is not there), until the run completes."""
    run_id = blocked_over_mcp(project)
    refused = stepline(project, "answer", run_id, "Z")
    assert refused.returncode == 2
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"error: 'Z' is not an answer to {GATE}") and f"answer one of: {OPTIONS}" in line
    assert [g["status"] for g in gates(project, run_id)] == ["pending"] and answers(project, run_id) == []

    # The person types the last step's output (nothing: '.') and an empty summary.
    resumed = stepline(project, "answer", run_id, "continue", "--resume", stdin=".\n\n")
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} was driven by an IDE agent over MCP; here its steps go to you" in resumed.stderr
    assert "resuming at step-02-draft" in resumed.stderr
    assert f"run {run_id} completed: " in resumed.stdout
    (gate,) = gates(project, run_id)
    assert (gate["status"], gate["answer"]) == ("approved", "C")
    assert [a["answer"] for a in answers(project, run_id)] == ["C"]


def blocked_from_the_cli(project: Path) -> str:
    done = stepline(project, "run", MENUS, "--executor", "dry-run", "--non-interactive", "-q")
    assert done.returncode == 9, done.stderr
    assert "answer it: stepline answer " in done.stdout and f"(one of: {OPTIONS})" in done.stdout
    (run_id,) = [p.name for p in (project / ".stepline" / "runs").iterdir()]
    return run_id


def test_the_dashboard_refuses_an_answer_not_offered_and_never_shows_it_approved(project: Path) -> None:
    """Over the API and the run page's form alike: 400 naming the options, the gate still pending and listed as
    such; the offered answer (by its label, in any case) is then recorded as its key."""
    run_id = blocked_from_the_cli(project)
    with TestClient(create_app(project, RuntimeConfig(), TOKEN), base_url="http://127.0.0.1:8765") as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        url = f"/api/runs/{run_id}/gates/{GATE}/answer"
        refused = client.post(url, json={"by": "ada", "answer": "Z"})
        assert refused.status_code == 400 and f"answer one of: {OPTIONS}" in refused.json()["error"]
        listed = client.get(f"/api/runs/{run_id}/gates").json()
        assert [g["gate_id"] for g in listed["pending"]] == [GATE] and listed["decided"] == []
        assert listed["approvals"] == []
        page = client.get(f"/runs/{run_id}", headers={"Accept": "text/html"}).text
        assert "approved" not in page

        answered = client.post(url, json={"by": "ada", "answer": "continue"})
        assert answered.status_code == 200, answered.text
        assert (answered.json()["gate"]["status"], answered.json()["gate"]["answer"]) == ("approved", "C")
        page = client.get(f"/runs/{run_id}", headers={"Accept": "text/html"}).text
        assert "answered <code>C</code>" in page
    assert [a["answer"] for a in answers(project, run_id)] == ["C"]


def test_over_mcp_a_refused_answer_names_the_options_and_records_nothing(project: Path) -> None:
    """A blocked run's question, answered over MCP with `answer` or `decide_gate`: both refuse Z naming the
    options (decide_gate used to record any answer), then `answer` takes the label and resumes the run."""
    run_id = blocked_from_the_cli(project)

    async def main() -> tuple[str, str, dict[str, Any]]:
        async with asyncio.timeout(60), Client(stdio_server(project)) as client:
            wrong = await client.call_tool("answer", {"run_id": run_id, "answer": "Z"})
            wrong_gate = await client.call_tool("decide_gate", {"run_id": run_id, "answer": "Z"})
            assert wrong.is_error and wrong_gate.is_error
            said = (wrong.content[0].text, wrong_gate.content[0].text)  # type: ignore[union-attr]
            assert [g["status"] for g in gates(project, run_id)] == ["pending"]
            answered = await call(client, "answer", {"run_id": run_id, "answer": "Continue"})
            return said[0], said[1], answered

    wrong, wrong_gate, answered = asyncio.run(main())
    assert f"answer one of: {OPTIONS}" in wrong and f"answer one of: {OPTIONS}" in wrong_gate
    assert answered["answer"] == "C" and answered["resumed"] is True
    assert [a["answer"] for a in answers(project, run_id)] == ["C"]
