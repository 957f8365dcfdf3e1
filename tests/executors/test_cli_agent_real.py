"""The cli-agent executor with the real agent CLIs (pinned in tests/agents/, installed by scripts/agents.sh) against
the scripted fake model servers: each adapter's command line is accepted, its MCP configuration read (the scripted
model calls stepline's tools and they arrive), its step finished with a file changed by the CLI's own tool, its
usage and session id read from its real stream; a budget, a timeout and a stall stop its whole process group.
How each CLI is pointed at the fake server: :mod:`fakes.agents`."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import agents
from fakes.fake_anthropic import FakeAnthropic
from fakes.fake_anthropic import responder as anthropic_responder
from fakes.fake_openai import FakeOpenAI
from fakes.fake_openai import responder as openai_responder
from fakes.policy import Call
from fakes.processes import alive
from fakes.sessions import RecordingSession
from stepline.errors import AgentStalled, BudgetExceeded, ExecutorError
from stepline.executors import StepRequest, create_executor

#: What one fake model answer uses; the usage stepline reads back is made of it.
USAGE = (1234, 56)


@pytest.fixture
def claude(tmp_path: Path, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[
        ..., None]]:
    """Point the real claude at the fake Anthropic server; yields a function that scripts the model's turns."""
    binary = agents.binary("claude")
    _use_env(monkeypatch, agents.claude_env(tmp_path / "home", fake_anthropic.base_url))

    def script(*turns: list[Call]) -> None:
        fake_anthropic.responder = anthropic_responder(agents.turns(*turns), usage=USAGE)

    script.binary = binary  # type: ignore[attr-defined]
    yield script


@pytest.fixture
def codex(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Point the real codex at the fake OpenAI server (Responses); yields a function that scripts the model."""
    binary = agents.binary("codex")
    _use_env(monkeypatch, agents.codex_env(tmp_path / "home", fake_openai.base_url))

    def script(*turns: list[Call]) -> None:
        fake_openai.responder = openai_responder(agents.turns(*turns), usage=USAGE)

    script.binary = binary  # type: ignore[attr-defined]
    yield script


def _use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """The CLI's environment as the executor passes it on (it runs the agent with the driver's environment)."""
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_", "GEMINI_", "XDG_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _request(project: Path, **hints: Any) -> StepRequest:
    return StepRequest(kind="work", run_id="run-real", step_id="build", title="Build",
                       content="Write hello.txt, then finish.", context={"project_root": str(project)},
                       hints={"cli_mode": "write", **hints})


def _perform(agent: str, binary: Path, request: StepRequest, session: RecordingSession, **options: Any) -> None:
    executor = create_executor("cli-agent", {"agent": agent, "command": str(binary), **options})
    asyncio.run(asyncio.wait_for(executor.perform(request, session), timeout=120))


def _gone(pgid: int, timeout: float = 10) -> bool:
    """Whether no process of group ``pgid`` is left (waiting up to ``timeout`` for its members to be reaped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        members = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) == pgid]
        if not any(alive(pid) for pid in members):
            return True
        time.sleep(0.05)
    return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


FINISH = "mcp__stepline__finish"


def _hang(agent: str, project: Path) -> Call:
    """A command that runs a minute (claude refuses a plain ``sleep``), named by the project's path in its
    arguments (codex runs commands in a pid namespace of their own), as the agent's shell tool is called."""
    command = f"python3 -c 'import time; time.sleep(60)' {project}"
    return ("Bash", {"command": command}) if agent == "claude" else ("exec_command", {"cmd": command})


def _hung(project: Path) -> bool:
    """Whether the hanging command an agent ran for ``project`` still runs."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if str(project).encode() in words and b"python3" in words[0] and alive(int(cmdline.parent.name)):
            return True
    return False


def test_claude_does_a_step_with_its_own_tool_and_finishes_over_mcp(project: Path, claude: Any) -> None:
    """The real claude writes the file with its Write tool, loads stepline's deferred MCP tools with ToolSearch and
    finishes; stepline reads its session id and its usage from the real stream."""
    claude([("Write", {"file_path": str(project / "hello.txt"), "content": "hello from claude\n"})],
           [(FINISH, {"summary": "wrote hello.txt"})])
    session = RecordingSession()
    _perform("claude", claude.binary, _request(project, cli_execution={"id": "E1"}), session)
    assert (project / "hello.txt").read_text() == "hello from claude\n"
    assert session.calls[-1] == ("finish", None, "wrote hello.txt")
    record = session.memos["cli-agent:claude"]
    # Write, ToolSearch, finish, the end: four model answers, each of USAGE
    assert (record["usage"]["input_tokens"], record["usage"]["output_tokens"]) == (USAGE[0] * 4, USAGE[1] * 4)
    assert record["usage"]["cost_usd"] > 0 and record["exit_status"] == 0
    assert ("set_var", "cli_session:E1", {"agent": "claude", "session_id": record["session_id"]}) in session.calls
    assert len(record["session_id"]) == 36
    assert [p["agent"] for p in session.processes] == ["claude"] and _gone(session.processes[0]["pgid"])


def test_codex_does_a_step_with_its_own_tool_and_finishes_over_mcp(project: Path, codex: Any) -> None:
    """The real codex (no --full-auto since 0.1xx: the workspace-write sandbox, approval never) runs a command that
    writes the file and calls stepline's finish through its MCP namespace; usage and thread id are read."""
    codex([("exec_command", {"cmd": "printf 'hello from codex\\n' > hello.txt"})],
          [(FINISH, {"summary": "wrote hello.txt"})])
    session = RecordingSession()
    _perform("codex", codex.binary, _request(project, cli_execution={"id": "E1"}), session)
    assert (project / "hello.txt").read_text() == "hello from codex\n"
    assert session.calls[-1] == ("finish", None, "wrote hello.txt")
    record = session.memos["cli-agent:codex"]
    assert (record["usage"]["input_tokens"], record["usage"]["output_tokens"]) == (USAGE[0] * 3, USAGE[1] * 3)
    assert ("set_var", "cli_session:E1", {"agent": "codex", "session_id": record["session_id"]}) in session.calls
    assert len(record["session_id"]) == 36 and _gone(session.processes[0]["pgid"])


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_budget_stop_kills_the_real_agents_process_group(agent: str, project: Path, request: Any) -> None:
    """The model keeps running commands; the first answer's usage crosses the call's budget: the agent is stopped,
    the call journaled as stopped with its usage, its process group (the agent and its command) gone."""
    script = request.getfixturevalue(agent)
    script(*[[_hang(agent, project)]] * 5)
    session = RecordingSession()
    with pytest.raises(BudgetExceeded, match="tokens"):
        _perform(agent, script.binary, _request(project), session, max_call_tokens=500)
    record = session.memos[f"cli-agent:{agent}"]
    assert record["stopped"] and record["usage"]["input_tokens"] >= USAGE[0]
    assert _gone(session.processes[0]["pgid"]) and not _hung(project)


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_timeout_and_a_stall_stop_the_real_agents_process_group(agent: str, project: Path, request: Any) -> None:
    """An agent whose command hangs is stopped at its timeout, and (printing nothing, changing no file) at its stall
    limit, which is told apart as a stall; either way nothing of its process group is left."""
    script = request.getfixturevalue(agent)
    shell = _hang(agent, project)
    script([shell])
    timed_out = RecordingSession()
    with pytest.raises(ExecutorError, match="within 8s") as caught:
        _perform(agent, script.binary, _request(project), timed_out, timeout_seconds=8)
    assert caught.value.retryable and _gone(timed_out.processes[0]["pgid"]) and not _hung(project)
    script([shell])
    stalled = RecordingSession()
    with pytest.raises(AgentStalled, match=r"\[stall\]: no output and no file change for 4s") as stall:
        _perform(agent, script.binary, _request(project), stalled, stall_seconds=4, timeout_seconds=60)
    assert stall.value.kind == "stall" and _gone(stalled.processes[0]["pgid"]) and not _hung(project)
