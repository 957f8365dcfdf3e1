"""Issue 29: the real Claude Code (``claude -p``) and Codex (``codex exec``), pinned in tests/agents/, are the MCP
clients. Their model is a scripted local server (tests/fakes/fake_anthropic.py, fake_openai.py): the fake model
plays an IDE agent that drives a stepline run through ``stepline mcp`` — start_run, then current_step and the
calls each waiting request needs — and the CLI does everything else for real: it starts the server from its MCP
configuration (Claude Code: ``--mcp-config``, loading the deferred tools through ToolSearch; Codex:
``[mcp_servers.stepline]``), sends each call, hands the results back to the model.

Run with -s to see each session's record: the tool calls in order, the wall time, the end state."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fakes import agents
from fakes._script import Reply, Responder
from fakes.fake_anthropic import FakeAnthropic, responder
from fakes.fake_openai import FakeOpenAI
from fakes.fake_openai import responder as openai_responder
from fakes.policy import Call, Conversation
from interfaces.mcp_agent import ENDED, default_choice, install

STEPLINE = Path(sys.executable).parent / "stepline"
TOOL = "mcp__stepline__"


class IdeAgent:
    """The fake model's play: an agent following the server's instructions, for a user who takes each menu's
    Continue. Every tool call names the request it is for; the requests of one current_step answer are done in
    one turn (parallel tool calls), last first. It reads only the tool results Claude Code sends back."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.run_id = ""
        self.answers: list[list[Call]] = []  # its answer at each turn, so a repeated request gets the same one
        self.errors: list[str] = []
        self.final: dict[str, Any] | None = None
        self.requests: list[dict[str, Any]] = []

    def prompt(self) -> str:
        """What the user asks the agent for."""
        return f"Run the stepline workflow {self.path} in normal mode; I take Continue at every menu."

    def __call__(self, conversation: Conversation) -> list[Call]:
        if not conversation.tools:  # a side request of Claude Code's own (a title): no tools, no calls
            return []
        if conversation.turns < len(self.answers):
            return self.answers[conversation.turns]
        calls = self._next(conversation.results)
        self.answers.append(calls)
        return calls

    def _next(self, said: list[str]) -> list[Call]:
        results = [_output(text) for text in said]
        if not self.answers:
            return [(TOOL + "start_run", {"path": self.path, "mode": "normal"})]
        last = self.answers[-1]
        for (name, _), text in zip(last, results, strict=False):
            if text.startswith("error: "):
                self.errors.append(f"{name}: {text}")
                return []
        if last[0][0] == TOOL + "start_run":
            self.run_id = json.loads(results[0])["run_id"]
        if last[0][0] != TOOL + "current_step":
            return [(TOOL + "current_step", {"wait_seconds": 30})]
        current = json.loads(results[0])
        if current["status"] in ENDED:
            self.final = current
            return []
        if current["status"] == "running":
            return [(TOOL + "current_step", {"wait_seconds": 30})]
        self.requests += current["requests"]
        return [self._do(request) for request in reversed(current["requests"])]

    def _do(self, request: dict[str, Any]) -> Call:
        rid = request["request_id"]
        if request["waiting_for"] == "answer":  # the user is asked; they take Continue
            return TOOL + "answer", {"run_id": self.run_id, "answer": default_choice(request) or "go ahead",
                                     "request_id": rid}
        if request["kind"] == "decide":
            return TOOL + "decide", {"value": bool(request["hints"].get("default", False)),
                                     "reason": "the default branch", "request_id": rid}
        # A work request's menu is shown to the user once, with the work: their choice goes with finish.
        return TOOL + "finish", {"choice": default_choice(request), "summary": f"done: {request['title']}",
                                 "request_id": rid}


def _output(text: str) -> str:
    """A tool result as the model reads it: Codex puts "Wall time: … seconds" and "Output:" lines before it."""
    return text.split("Output:\n", 1)[1] if text.startswith("Wall time:") else text


def _claude(project: Path, home: Path, fake: FakeAnthropic, agent: IdeAgent) -> tuple[list[dict[str, Any]], float]:
    """``claude -p`` with stepline's MCP server from ``--mcp-config``; its stream-json lines and the wall time."""
    claude = agents.binary("claude")
    config = project / ".mcp-stepline.json"
    config.write_text(json.dumps({"mcpServers": {"stepline": {
        "command": str(STEPLINE), "args": ["mcp", "--project-root", str(project)]}}}), encoding="utf-8")
    fake.responder = _past_reminders(responder(agent))
    started = time.monotonic()
    done = subprocess.run([str(claude), "-p", agent.prompt(), "--output-format", "stream-json", "--verbose",
                           "--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", "mcp__stepline"],
                          cwd=project, env=agents.claude_env(home, fake.base_url), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")], wall


def _past_reminders(respond: Responder) -> Responder:
    """Claude Code 2.1.x appends a system-role message after some turns ("The user hasn't heard from you in a
    while…"); the fake's responder reads the tool results from the last message, so it is shown the conversation
    without those reminders."""

    def answer(body: dict[str, Any]) -> Reply:
        messages = list(body["messages"])
        while len(messages) > 1 and messages[-1]["role"] == "system":
            messages.pop()
        return respond({**body, "messages": messages})

    return answer


def _tool_calls(lines: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls Claude Code made, in order, as its stream reports them."""
    return [(block["name"], block["input"]) for line in lines if line.get("type") == "assistant"
            for block in line["message"]["content"] if block.get("type") == "tool_use"]


def _record(name: str, calls: list[tuple[str, dict[str, Any]]], wall: float, agent: IdeAgent) -> None:
    stepline = [(n.removeprefix(TOOL), a) for n, a in calls if n.startswith(TOOL)]
    print(f"\n{name}: {len(stepline)} stepline tool calls ({len(calls)} tool calls in all), {wall:.1f} s, "
          f"end state {(agent.final or {}).get('status')}")
    for tool, args in stepline:
        shown = {k: v for k, v in args.items() if k not in ("summary", "reason", "run_id")}
        print(f"  {tool}({', '.join(f'{k}={v!r}' for k, v in shown.items())})")


def _answers(project: Path, run_id: str) -> list[dict[str, Any]]:
    journal = project / ".stepline" / "runs" / run_id / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text(encoding="utf-8").split("\n") if line.strip("\0 ")]
    return [e["data"] for e in events if e["type"] == "AnswerGiven"]


def _session(tmp_path: Path, fake: FakeAnthropic, tree: str, path: str) -> tuple[Path, IdeAgent, list[Any], Any]:
    """Claude Code drives ``path`` of the corpus tree ``tree``, installed afresh; the run completes."""
    project = install(tree, tmp_path / "project")
    agent = IdeAgent(path)
    lines, wall = _claude(project, tmp_path / "home", fake, agent)
    calls = _tool_calls(lines)
    _record(path, calls, wall, agent)
    assert agent.errors == [] and agent.final is not None and agent.final["status"] == "completed", agent.final
    assert lines[-1]["type"] == "result" and lines[-1]["subtype"] == "success"
    assert calls[0][0] == "ToolSearch"  # Claude Code offers the MCP tools only once they are searched for
    return project, agent, calls, lines


@pytest.mark.corpus
def test_claude_code_drives_create_product_brief_in_normal_mode(tmp_path: Path, fake_anthropic: FakeAnthropic) -> None:
    """The alpha.23 micro-file create-product-brief: each step's menu is answered once, with the step's finish,
    and the brief is built to its last step. The one question its text hands the person in a fresh run
    (step-01-init: ``Confirm what you have found with the user … Only after this confirmation will you proceed``)
    is asked of the user once, after the work up to it; the step's route to step-01b-continue is only for a
    continuation."""
    project, agent, _, _ = _session(tmp_path, fake_anthropic, "v6.0.0-alpha.23",
                                    "_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md")
    menus = {r["step_id"] for r in agent.requests if r.get("menu")}
    answers = _answers(project, agent.run_id)
    questions = [a for a in answers if "/point/" in a["gate_id"]]
    answered = [a["gate_id"].split("/")[0].removeprefix("ask:") for a in answers if a not in questions]
    assert sorted(answered) == sorted(menus) and len(menus) >= 4  # every menu answered, each once
    asked = [r for r in agent.requests if r["waiting_for"] == "answer"]  # no menu asked a second time
    assert [(r["step_id"], a["gate_id"].split("/")[0]) for r, a in zip(asked, questions, strict=True)] == [
        ("step-01-init", "ask:step-01-init")]
    assert "step-01-init.md:101: <critical>Confirm what you have found" in asked[0]["question"]
    assert "step-01b-continue" not in {r["step_id"] for r in agent.requests}
    (brief,) = (project / "_bmad-output" / "planning-artifacts").glob("product-brief-*.md")
    assert "stepsCompleted: [1, 2, 3, 4, 5, 6]" in brief.read_text(encoding="utf-8")


@pytest.mark.corpus
def test_claude_code_drives_bmad_build_through_its_parallel_review(tmp_path: Path,
                                                                   fake_anthropic: FakeAnthropic) -> None:
    """The v6.11.0 skill bmad-build: its plan's approval menu goes to the user, step-04-review's layers wait
    together and are done in one turn of parallel tool calls, each naming its request; the skill completes."""
    _, agent, calls, _ = _session(tmp_path, fake_anthropic, "v6.11.0", "_bmad/bmm/ship/bmad-build")
    layers = [r for r in agent.requests if r.get("layer")]
    assert len(layers) >= 3 and {r["step_id"] for r in layers} == {"step-04-review"}
    batches = [[a["request_id"] for _, a in answer] for answer in agent.answers if len(answer) > 1]
    assert sorted(batches[0]) == sorted(r["request_id"] for r in layers)  # one turn, one call per layer
    finished = {a["request_id"] for n, a in calls if n == TOOL + "finish"}
    assert {r["request_id"] for r in layers} <= finished


@pytest.mark.corpus
def test_codex_drives_bmad_build_through_its_parallel_review(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """The same skill with Codex as the client (``codex exec``, stepline in ``[mcp_servers.stepline]``): every call
    goes through, the review layers are done in one turn, and the skill completes."""
    codex = agents.binary("codex")
    project = install("v6.11.0", tmp_path / "project")
    agent = IdeAgent("_bmad/bmm/ship/bmad-build")
    env = agents.codex_env(tmp_path / "home", fake_openai.base_url,
                           mcp={"stepline": [str(STEPLINE), "mcp", "--project-root", str(project)]})
    fake_openai.responder = openai_responder(agent)
    started = time.monotonic()
    # A step's request can run past Codex's budget for one tool output (the middle is cut: "…N tokens
    # truncated…"), so its limit is raised as README's setup says.
    done = subprocess.run([str(codex), "exec", "--json", "--skip-git-repo-check", "-C", str(project), "-s",
                           "workspace-write", "-c", "tool_output_token_limit=25000", agent.prompt()],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    calls = [(TOOL + line["item"]["tool"], line["item"]["arguments"]) for line in lines
             if line["type"] == "item.completed" and line["item"]["type"] == "mcp_tool_call"]
    _record("bmad-build with codex", calls, wall, agent)
    assert agent.errors == [] and agent.final is not None and agent.final["status"] == "completed", agent.final
    assert all(line["item"]["status"] == "completed" for line in lines
               if line["type"] == "item.completed" and line["item"]["type"] == "mcp_tool_call")
    layers = {r["request_id"] for r in agent.requests if r.get("layer")}
    assert len(layers) >= 3 and [set(a["request_id"] for _, a in answer) for answer in agent.answers
                                 if len(answer) > 1] == [layers]
    assert lines[-1]["type"] == "turn.completed"
