"""Issue 14: in normal mode an IDE agent answers each micro-file menu once over MCP, and is never stuck.

The agent is the user's voice: the choice it passes with ``finish`` answers the step's menu; a menu (or any
question) left unanswered comes back from ``current_step`` as ``waiting_for_answer`` and the ``answer`` tool
answers it. Driven through the real server over stdio with the mcp SDK client, as an IDE would.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from interfaces.mcp_agent import call as _call
from interfaces.mcp_agent import stdio_server

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "project"
MENUS = "_bmad/demo/workflows/menus"
ROUTER = "_bmad/demo/workflows/router"
CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.0.0-alpha.23"
BRIEF = "_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md"


class Agent:
    """An IDE agent that relays each menu to its user once: with the step's work (``finish(choice=…)``,
    ``how="finish"``) or when it comes back as a question (``answer``, ``how="answer"``).

    ``presented`` counts, per step, each time the agent had to put the menu (or a question) to its user: the
    menu of a work step it answers with finish, and every question current_step hands it.
    """

    def __init__(self, client: Client, how: str) -> None:
        self.client, self.how = client, how
        self.run_id = ""
        self.presented: Counter[str] = Counter()
        self.questions: list[dict[str, Any]] = []  # what came back as waiting_for_answer (or blocked on)
        self.work: dict[str, dict[str, Any]] = {}  # the last work request of each step

    async def drive(self, path: str, *, mode: str = "normal", answers: dict[str, str] | None = None) -> dict[str, Any]:
        self.run_id = (await _call(self.client, "start_run", {"path": path, "mode": mode}))["run_id"]
        for _ in range(100):
            current = await _call(self.client, "current_step", {"wait_seconds": 30})
            status, requests = current["status"], current.get("requests") or []
            step = requests[0] if requests else None
            assert len(requests) <= 1, requests
            if status == "waiting_for_answer" or (status == "blocked" and step):
                self.questions.append(step)
                self.presented[step["step_id"]] += 1
                choices = step.get("choices") or []
                reply = (answers or {}).get(step["step_id"]) or (
                    "C" if "C" in choices else choices[0] if choices else "nothing to add")  # a free-text question
                await _call(self.client, "answer", {"run_id": self.run_id, "answer": reply})
                continue
            if status != "waiting_for_work":
                break
            assert step is not None
            sid, rid, keys = step["step_id"], step["request_id"], [option["key"] for option in step.get("menu") or []]
            if step["kind"] == "work":
                self.work[sid] = step
            if step["kind"] == "decide":
                await _call(self.client, "decide", {"value": True, "reason": "agreed", "request_id": rid})
                continue
            if step["kind"] == "work" and step.get("hints", {}).get("output"):
                await _call(self.client, "write_output", {"content": f"\n## {sid}\nwritten with the user\n",
                                                          "request_id": rid})
            choice = None
            if step["kind"] in ("choose", "answer") or (self.how == "finish" and keys):
                self.presented[sid] += 1
                choice = "C" if "C" in keys else (keys or step.get("choices") or [None])[0]
            await _call(self.client, "finish", {"choice": choice, "summary": f"did {sid}", "request_id": rid})
        return await _call(self.client, "run_status", {"run_id": self.run_id})


def _drive(project: Path, path: str, how: str, **kwargs: Any) -> tuple[Agent, dict[str, Any]]:
    async def main() -> tuple[Agent, dict[str, Any]]:
        async with asyncio.timeout(120), Client(stdio_server(project)) as client:
            agent = Agent(client, how)
            return agent, await agent.drive(path, **kwargs)

    return asyncio.run(main())


def _events(project: Path, run_id: str) -> list[dict[str, Any]]:
    journal = project / ".stepline" / "runs" / run_id / "journal.jsonl"
    return [json.loads(line) for line in journal.read_text(encoding="utf-8").split("\n") if line.strip("\0 ")]


def _answers(project: Path, run_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in _events(project, run_id) if e["type"] == "AnswerGiven"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root)
    return root.resolve()


@pytest.mark.parametrize("how", ["finish", "answer"])
def test_each_menu_is_answered_once_and_the_run_completes_in_normal_mode(project: Path, how: str) -> None:
    """finish(choice=C) answers step 2's menu (never asked again); a finish without a choice leaves it to come
    back once from current_step as a menu, which the answer tool answers. Either way the run completes."""
    agent, status = _drive(project, MENUS, how)
    assert status["status"] == "completed", status
    assert agent.presented == {"step-02-draft": 1}
    assert "finish(choice=KEY)" in agent.work["step-02-draft"]["menu_note"]  # the agent is told the menu is the user's
    assert "menu_note" not in agent.work["step-01-start"]
    if how == "finish":
        assert agent.questions == []
    else:  # the work request showed the menu, the user had not chosen yet: it came back once, as the menu
        (question,) = agent.questions
        assert question["kind"] == "menu" and question["step_id"] == "step-02-draft"
        assert question["choices"] == ["A", "P", "R", "X", "C"]
        assert [o["key"] for o in question["menu"]] == question["choices"]
        assert "[C] Continue" in question["question"]
    (given,) = _answers(project, agent.run_id)
    assert given == {"gate_id": "ask:step-02-draft/1/menu/0", "answer": "C",
                     "by": "mcp-bridge" if how == "finish" else "mcp"}
    steps = {s["step_id"]: s["status"] for s in status["steps"]}
    assert steps == {"workflow-init": "completed", "step-01-start": "completed", "step-02-draft": "completed",
                     "step-03-done": "completed"}
    assert "stepsCompleted: [1, 2, 3]" in (project / "out" / "notes-demo.md").read_text(encoding="utf-8")


def test_a_routers_question_comes_back_from_current_step_and_is_answered(project: Path) -> None:
    """The tri-modal router's [C]/[V] question is a pending question, not a dead end: answered with V."""
    agent, status = _drive(project, ROUTER, "finish", answers={"workflow-init": "v"})
    assert status["status"] == "completed", status
    (question,) = agent.questions
    assert question["step_id"] == "workflow-init" and question["choices"] == ["C", "V"]
    assert agent.presented == {"workflow-init": 1}
    steps = {s["step_id"]: s["status"] for s in status["steps"]}
    assert steps["step-v-01-check"] == "completed" and steps["step-01-make"] == "skipped"
    assert _answers(project, agent.run_id)[0]["answer"] == "V"


def test_a_non_interactive_run_blocked_on_a_menu_shows_it_and_answer_resumes_it(project: Path) -> None:
    """In non-interactive mode the menu blocks the run as a question gate; current_step shows that question
    (not an empty step) and answer records it like `stepline answer` and resumes the run to completion."""
    agent, status = _drive(project, MENUS, "answer", mode="non-interactive")
    assert status["status"] == "completed", status
    (question,) = agent.questions
    assert question["gate_id"] == "ask:step-02-draft/1/menu/0" and question["choices"] == ["A", "P", "R", "X", "C"]
    assert agent.presented == {"step-02-draft": 1}
    gates = json.loads((project / ".stepline" / "runs" / agent.run_id / "gates.json").read_text(encoding="utf-8"))
    assert [(g["gate_id"], g["status"], g["approver"]) for g in gates] == [
        ("ask:step-02-draft/1/menu/0", "approved", "mcp")]


def test_the_agents_own_question_is_answered_through_answer(project: Path) -> None:
    """An ask over MCP returns at once saying the user must answer; answer gives it and the step goes on."""

    async def main() -> tuple[list[Any], dict[str, Any], str, dict[str, Any]]:
        async with asyncio.timeout(60), Client(stdio_server(project)) as client:
            run_id = (await _call(client, "start_run", {"path": MENUS}))["run_id"]
            seen: list[Any] = []
            (step,) = (await _call(client, "current_step"))["requests"]
            while step["step_id"] != "step-01-start":
                await _call(client, "finish", {"request_id": step["request_id"]})
                (step,) = (await _call(client, "current_step"))["requests"]
            said = await _call(client, "ask", {"question": "Which colour?", "choices": ["red", "blue"]})
            seen.append(said)
            refused = await client.call_tool("write_output", {"content": "x"})  # the question comes first
            seen.append(refused.is_error)
            current = await _call(client, "current_step")
            seen.append(current)
            wrong = await client.call_tool("answer", {"run_id": run_id, "answer": "green"})
            seen.append(wrong.content[0].text)  # type: ignore[union-attr]
            seen.append(await _call(client, "answer", {"run_id": run_id, "answer": "BLUE"}))
            await _call(client, "write_output", {"content": "blue it is\n"})
            await _call(client, "finish", {"summary": "asked"})
            after = await _call(client, "current_step")
            return seen, after, run_id, step

    (said, refused, current, wrong, answered), after, run_id, step = asyncio.run(main())
    assert "waiting for the user's answer as request r" in said and "answer(run_id, answer, request_id=" in said
    assert refused is True
    assert current["status"] == "waiting_for_answer"
    (question,) = [r for r in current["requests"] if r["waiting_for"] == "answer"]
    assert question["kind"] == "question" and question["question"] == "Which colour?"
    assert question["asked_by"] == step["request_id"]  # the request whose ask it is: its calls wait for it
    assert "'green' is not an answer" in wrong
    assert answered["answer"] == "blue"
    assert after["status"] == "waiting_for_work" and after["requests"][0]["step_id"] == "step-02-draft"
    events = _events(project, run_id)
    (asked,) = [e["data"] for e in events if e["type"] == "CallRecorded" and e["data"]["op"] == "ask"]
    assert asked["args"]["question"] == "Which colour?" and asked["result"] == "blue"
    assert _answers(project, run_id) == [{"gate_id": "ask:step-01-start/1/0/1", "answer": "blue", "by": "mcp"}]


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared/corpus is not available")
@pytest.mark.parametrize("how", ["finish", "answer"])
def test_create_product_brief_over_mcp_in_normal_mode_asks_each_menu_once(tmp_path: Path, how: str) -> None:
    """The user's report: bmm create-product-brief driven over MCP in normal mode used to block after step 2
    on its menu although finish carried C. Now every step's menu is presented once and the brief completes; step
    1's text confirms what it found with the user first (a question of its plan, answered once)."""
    from stepline.bmad import install_bmad

    project = tmp_path / "brief"
    install_bmad(CORPUS, project)
    agent, status = _drive(project.resolve(), BRIEF, how)
    assert status["status"] == "completed", status
    menus = ["step-02-vision", "step-03-users", "step-04-metrics", "step-05-scope"]
    assert agent.presented == dict.fromkeys(["step-01-init", *menus], 1)
    assert len(agent.questions) == 1 + (len(menus) if how == "answer" else 0)
    answered = {a["gate_id"].split("/")[0]: a["answer"] for a in _answers(project, agent.run_id)}
    assert answered == {"ask:step-01-init": "nothing to add", **{f"ask:{sid}": "C" for sid in menus}}
    (brief,) = (project / "_bmad-output" / "planning-artifacts").glob("product-brief-*.md")
    assert "stepsCompleted: [1, 2, 3, 4, 5, 6]" in brief.read_text(encoding="utf-8")


def test_in_yolo_the_agents_own_question_becomes_a_request_of_its_own(tmp_path: Path) -> None:
    """In yolo an ask is answered as the user would, by an 'answer' request: ask returns at once naming it (it
    used to wait for that request while nobody could take it), the asking request waits for it, and its finish
    is the ask's result."""
    (tmp_path / "flow.yaml").write_text("id: f\nsteps:\n  - id: pick\n    body: Pick a colour.\n", encoding="utf-8")

    async def main() -> tuple[str, dict[str, Any], str, str]:
        async with asyncio.timeout(60), Client(stdio_server(tmp_path)) as client:
            run_id = (await _call(client, "start_run", {"path": "flow.yaml", "mode": "yolo"}))["run_id"]
            (work,) = (await _call(client, "current_step"))["requests"]
            said = await _call(client, "ask", {"question": "Which colour?", "choices": ["red", "blue"],
                                               "request_id": work["request_id"]})
            current = await _call(client, "current_step")
            held = await client.call_tool("finish", {"request_id": work["request_id"]})
            (answer,) = [r for r in current["requests"] if r["request_id"] != work["request_id"]]
            await _call(client, "finish", {"choice": "blue", "request_id": answer["request_id"]})
            await _call(client, "finish", {"summary": "picked", "request_id": work["request_id"]})
            assert (await _call(client, "current_step"))["status"] == "completed"
            return said, answer, held.content[0].text, run_id  # type: ignore[union-attr]

    said, answer, held, run_id = asyncio.run(main())
    assert f"went to request {answer['request_id']}" in said
    assert answer["kind"] == "answer" and answer["asked_by"] == "r1" and answer["choices"] == ["red", "blue"]
    assert f"request r1 waits for request {answer['request_id']}" in held
    (asked,) = [e["data"] for e in _events(tmp_path, run_id)
                if e["type"] == "CallRecorded" and e["data"]["op"] == "ask"]
    assert asked["result"] == "blue"
