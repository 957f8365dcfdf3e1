"""The cli-agent executor with the real agent CLIs (pinned in tests/agents/, installed by scripts/agents.sh) against
the scripted fake model servers: each adapter's command line is accepted, its MCP configuration read (the scripted
model calls stepline's tools and they arrive), its step finished with a file changed by the CLI's own tool, its
usage and session id read from its real stream; a budget, a timeout and a stall stop its whole process group.
How each CLI is pointed at the fake server: :mod:`fakes.agents`."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fakes import agents
from fakes._script import Reply
from fakes.fake_anthropic import responder as anthropic_responder
from fakes.fake_gemini import responder as gemini_responder
from fakes.fake_openai import responder as openai_responder
from fakes.policy import Call, Conversation
from fakes.processes import python_running_with
from fakes.sessions import RecordingSession
from stepline.errors import (
    AgentNeedsPermission,
    AgentRateLimited,
    AgentStalled,
    AgentUnreachable,
    BudgetExceeded,
    ExecutorError,
)
from stepline.executors import StepRequest, Usage, create_executor
from stepline.executors.cli_agents._process import _group_alive

#: What one fake model answer uses; the usage stepline reads back is made of it.
USAGE = (1234, 56)


@dataclass
class Cli:
    """One real agent CLI pointed at its fake model server: how a script names its tools, and what the executor
    needs on top of the user's setup (``options``)."""

    name: str
    binary: Path
    serve: Any  # the fake server's responder is set by :meth:`script`
    responder: Callable[..., Any]
    options: dict[str, Any] = field(default_factory=dict)

    def script(self, *turns: list[Call]) -> None:
        """The fake model's answers, one list of tool calls per turn."""
        self.serve.responder = self.responder(agents.turns(*turns), usage=USAGE)

    def shell(self, command: str) -> Call:
        """A call of the CLI's own shell tool."""
        name = {"claude": "Bash", "codex": "exec_command", "opencode": "bash"}.get(self.name, "run_shell_command")
        args = {"cmd": command} if self.name == "codex" else {"command": command}
        return name, args | ({"description": "run it"} if self.name == "opencode" else {})

    def write(self, path: Path, text: str) -> Call:
        """A call of the CLI's own file-writing tool (codex writes with its shell)."""
        if self.name == "codex":
            return self.shell(f"printf '{text}' > {path.name}")
        if self.name == "opencode":
            return "write", {"filePath": str(path), "content": text}
        return ("Write" if self.name == "claude" else "write_file"), {"file_path": str(path), "content": text}


@pytest.fixture(params=["claude", "codex", "gemini", "qwen", "opencode"])
def cli(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """Each real CLI in turn, its environment pointing it at a fake model server as a user's setup would."""
    name = str(request.param)
    binary = agents.binary(name)
    home = tmp_path / "home"
    if name == "claude":
        server: Any = request.getfixturevalue("fake_anthropic")
        made = Cli(name, binary, server, anthropic_responder)
        env = agents.claude_env(home, server.base_url)
    elif name == "gemini":
        server = request.getfixturevalue("fake_gemini")
        made = Cli(name, binary, server, gemini_responder, {"model": "fake-gemini"})
        env = agents.gemini_env(home, server.base_url)
    else:
        server = request.getfixturevalue("fake_openai")
        made = Cli(name, binary, server, openai_responder,
                   {"extra_args": ["--auth-type", "openai"]} if name == "qwen" else {})
        env = {"codex": agents.codex_env, "qwen": agents.qwen_env, "opencode": agents.opencode_env}[name](
            home, server.base_url)
    _use_env(monkeypatch, env)
    return made


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
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


FINISH = "mcp__stepline__finish"


def _hang(cli: Cli, project: Path) -> Call:
    """A command that runs a minute (claude refuses a plain ``sleep``), named by the project's path in its
    arguments (codex runs commands in a pid namespace of their own)."""
    return cli.shell(f"python3 -c 'import time; time.sleep(60)' {project}")


def _hung(project: Path) -> bool:
    """Whether the command an agent ran for ``project`` (named by its path) still runs."""
    return python_running_with(str(project))


def _recorded_session(cli: Cli, record: dict[str, Any], parent: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``cli_session:ID`` variable a call recording ``record`` sets: with a CLI that reports a session's running
    usage (codex, qwen), that total (the ``parent`` session's and this call's), for the next call to take off."""
    known = {"agent": cli.name, "session_id": record["session_id"]}
    if cli.name in ("codex", "qwen"):
        before = Usage.from_record((parent or {}).get("usage") or {"calls": 0})
        known["usage"] = Usage.from_record(record["session_usage"]).to_record()
        assert Usage.from_record(record["session_usage"]).since(before) == Usage.from_record(record["usage"])
    return known


def test_the_real_cli_does_a_step_with_its_own_tool_and_finishes_over_mcp(project: Path, cli: Cli) -> None:
    """The real CLI writes the file with its own tool and calls stepline's finish (claude loads the deferred tool
    with ToolSearch first); stepline reads its session id and its usage from the real stream."""
    cli.script([cli.write(project / "hello.txt", f"hello from {cli.name}\n")], [(FINISH, {"summary": "wrote it"})])
    session = RecordingSession()
    _perform(cli.name, cli.binary, _request(project, cli_execution={"id": "E1"}), session, **cli.options)
    assert (project / "hello.txt").read_text() == f"hello from {cli.name}\n"
    assert session.calls[-1] == ("finish", None, "wrote it")
    record = session.memos[f"cli-agent:{cli.name}"]
    answers = record["usage"]["input_tokens"] / USAGE[0]  # each fake answer reports USAGE
    assert answers >= 2 and answers == int(answers), record["usage"]
    assert record["usage"]["output_tokens"] == USAGE[1] * answers
    assert ("set_var", "cli_session:E1", _recorded_session(cli, record)) in session.calls
    assert record["session_id"] and record["exit_status"] == 0
    assert [p["agent"] for p in session.processes] == [cli.name] and _gone(session.processes[0]["pgid"])


def test_a_budget_stop_kills_the_real_agents_process_group(project: Path, cli: Cli) -> None:
    """The model keeps running commands and never finishes; the first answer's usage crosses the call's budget: the
    call raises BudgetExceeded, journaled as stopped with its usage, and nothing of the agent is left. A CLI that
    streams usage per answer (claude, qwen, opencode) is stopped there; codex and gemini report usage only when
    their turn ends, so the budget is seen then."""
    cli.script(*[[cli.shell(f"echo step {n}")] for n in range(6)])
    session = RecordingSession()
    with pytest.raises(BudgetExceeded, match="tokens"):
        _perform(cli.name, cli.binary, _request(project), session, max_call_tokens=500, **cli.options)
    record = session.memos[f"cli-agent:{cli.name}"]
    assert record["stopped"] and record["usage"]["input_tokens"] >= USAGE[0]
    if cli.name in ("claude", "qwen", "opencode"):
        assert len([r for r in cli.serve.requests if r.get("tools")]) < 6
    assert _gone(session.processes[0]["pgid"])


def test_a_timeout_stops_the_real_agents_process_group(project: Path, cli: Cli) -> None:
    """An agent whose command hangs is stopped at its timeout (retryable); nothing of it is left, the command
    included; what it used before the stop is journaled: its answers' usage, streamed (opencode's once a step's
    tools have run) or, for codex and gemini, read from the session file they keep as they run."""
    cli.script([cli.shell("echo one")], [_hang(cli, project)])
    session = RecordingSession()
    limit = 30 if cli.name == "opencode" else 10  # opencode takes ~10 s of CPU to reach its first answer
    with pytest.raises(ExecutorError, match=f"within {limit}s") as caught:
        _perform(cli.name, cli.binary, _request(project), session, timeout_seconds=limit, **cli.options)
    assert caught.value.retryable and _gone(session.processes[0]["pgid"]) and not _hung(project)
    [(label, recorded)] = session.usages
    assert label == f"cli-agent:{cli.name}" and Usage.from_record(recorded).input_tokens >= USAGE[0], recorded


def test_the_real_cli_records_the_whole_prompt_and_its_cached_part(project: Path, cli: Cli) -> None:
    """With the model's prompt cache on, each CLI's usage is recorded one way: input is the whole prompt of every
    answer (the cached part included, counted once: qwen's input already holds it, claude's and opencode's leave it
    out), cache reads apart (gemini's ``stats.cached`` among them)."""
    cli.serve.caching = True
    cli.script([cli.shell("echo one")], [cli.shell("echo two")], [(FINISH, {"summary": "done"})])
    session = RecordingSession()
    _perform(cli.name, cli.binary, _request(project), session, **cli.options)
    used = Usage.from_record(session.memos[f"cli-agent:{cli.name}"]["usage"])
    answers = used.input_tokens / USAGE[0]
    assert answers >= 3 and answers == int(answers) and used.output_tokens == USAGE[1] * answers, used
    assert 0 < used.cache_read_tokens < used.input_tokens, used  # the later answers repeat the first's prefix


def test_each_answers_usage_holds_the_real_cli_to_its_budget_mid_turn(project: Path, cli: Cli) -> None:
    """The model answers twice, then holds its third answer past the call's timeout: the call is stopped for
    ``max_call_tokens`` by the usage the CLI reported for those two answers, while its turn is still on (codex and
    gemini report an answer's usage only in their session file, followed while they run), not at its timeout.
    The budget is two answers' input: claude's stream reports an answer's usage as the API's ``message_start``
    has it, its output counted as 1 token until the message ends."""
    answered: list[dict[str, Any]] = []
    plain = cli.responder(agents.turns(*[[cli.shell(f"echo step {n}")] for n in range(6)]), usage=USAGE)
    timeout = 90

    def held(body: dict[str, Any]) -> Reply:
        reply = plain(body)
        if body.get("tools"):
            answered.append(body)
        return Reply(reply.status, reply.body, timeout + 60.0) if len(answered) > 2 else reply

    cli.serve.responder = held
    session = RecordingSession()
    with pytest.raises(BudgetExceeded, match="tokens"):
        _perform(cli.name, cli.binary, _request(project), session, max_call_tokens=USAGE[0] * 2 - 1,
                 timeout_seconds=timeout, **cli.options)
    record = session.memos[f"cli-agent:{cli.name}"]
    assert record["stopped"] and Usage.from_record(record["usage"]).input_tokens >= 2 * USAGE[0], record
    assert _gone(session.processes[0]["pgid"])


@pytest.mark.parametrize("cli", ["claude", "codex"], indirect=True)
def test_a_stall_stops_the_real_agents_process_group(project: Path, cli: Cli) -> None:
    """An agent whose command hangs, printing nothing and changing no file, is stopped at its stall limit, long
    before its timeout, and told apart as a stall; nothing of it is left."""
    cli.script([_hang(cli, project)])
    session = RecordingSession()
    started = time.monotonic()
    with pytest.raises(AgentStalled, match=r"\[stall\]: no output and no file change for 4s") as caught:
        _perform(cli.name, cli.binary, _request(project), session, stall_seconds=4, timeout_seconds=120,
                 **cli.options)
    assert caught.value.kind == "stall" and time.monotonic() - started < 60
    assert _gone(session.processes[0]["pgid"]) and not _hung(project)


def test_a_rate_limit_and_an_unreachable_endpoint_are_told_apart_from_the_work(
        project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The real claude refused with a 429 raises AgentRateLimited, and pointed at a port nobody listens on
    AgentUnreachable: their kind in the message, so a caller need not count them as the work's failures."""
    from fakes.fake_anthropic import FakeAnthropic, fault

    binary = agents.binary("claude")
    server: FakeAnthropic = request.getfixturevalue("fake_anthropic")
    _use_env(monkeypatch, agents.claude_env(tmp_path / "home", server.base_url))
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")  # a user's claude retries a while first
    server.queue(*[fault(429, "rate limit reached for requests")] * 3)
    with pytest.raises(AgentRateLimited, match=r"claude hit a rate limit or quota in step 'build' \[rate-limit\]"):
        _perform("claude", binary, _request(project), RecordingSession())
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
        with pytest.raises(AgentUnreachable, match=r"\[connection\]") as caught:
            _perform("claude", binary, _request(project), RecordingSession())
    assert caught.value.kind == "connection" and caught.value.retryable


@pytest.mark.parametrize("agent", ["qwen", "gemini"])
def test_a_cli_that_cannot_run_unattended_names_the_setting(agent: str, project: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            request: pytest.FixtureRequest) -> None:
    """qwen without an auth type (nor OPENAI_MODEL), gemini without a selected auth method (its base URL set): one
    line naming the setting the user must give, as a permission/login stop (not retried)."""
    binary = agents.binary(agent)
    if agent == "qwen":
        env = agents.qwen_env(tmp_path / "home", request.getfixturevalue("fake_openai").base_url)
        del env["OPENAI_MODEL"]  # with a model named in the environment qwen 0.24 picks openai itself
    else:
        env = agents.gemini_env(tmp_path / "home", request.getfixturevalue("fake_gemini").base_url)
        (tmp_path / "home" / ".gemini" / "settings.json").write_text("{}")
    _use_env(monkeypatch, env)
    with pytest.raises(AgentNeedsPermission, match=r"\[permission\]") as caught:
        _perform(agent, binary, _request(project), RecordingSession())
    assert "security.auth.selectedType" in str(caught.value) and not caught.value.retryable


def test_analysis_mode_keeps_the_real_cli_from_writing(project: Path, cli: Cli) -> None:
    """In analysis mode the CLI's own file tool is refused (its approval mode: plan, read-only, editing tools
    denied) while stepline's tools still work: the step finishes and no file is written."""
    cli.script([cli.write(project / "hello.txt", "should not be written\n")], [(FINISH, {"summary": "looked"})])
    session = RecordingSession()
    _perform(cli.name, cli.binary, _request(project, cli_mode="analysis"), session, **cli.options)
    assert session.calls[-1] == ("finish", None, "looked")
    assert not (project / "hello.txt").exists()


@pytest.mark.parametrize("strategy", ["resume", "fork"])
def test_a_later_step_resumes_or_forks_the_real_agents_session(strategy: str, project: Path, cli: Cli) -> None:
    """A step with a CCW execution id records the CLI's session; a later step resuming it (claude, qwen and gemini
    ``--resume ID``, codex ``exec resume``, opencode ``run --session ID``) or forking it (claude and qwen
    ``--fork-session``, codex ``exec fork``, opencode ``--fork``, gemini ``--session-file`` of the session's file) is
    accepted by the real CLI and finishes: the model is sent the first step's conversation, a resume records the
    same session id and a fork a new one, and the usage recorded is this call's alone."""
    cli.script([(FINISH, {"summary": "first"})])
    first = RecordingSession()
    _perform(cli.name, cli.binary, _request(project, cli_execution={"id": "E1"}), first, **cli.options)
    recorded = next(call[2] for call in first.calls if call[0] == "set_var")
    answered: list[bool] = []

    def once(conversation: Conversation) -> list[Call]:  # the resumed conversation holds the first one's turns
        if not conversation.tools or answered:
            return []
        answered.append(True)
        return [(FINISH, {"summary": "second"})]

    cli.serve.responder = cli.responder(once, usage=USAGE)
    before = len(cli.serve.requests)
    second = RecordingSession()
    later = StepRequest(kind="work", run_id="run-real", step_id="next", title="Next", content="Go on.",
                        context={"project_root": str(project)}, variables={"cli_session:E1": recorded},
                        hints={"cli_execution": {"id": "E2", "strategy": strategy, "resume_from": "E1"}})
    _perform(cli.name, cli.binary, later, second, **cli.options)
    assert second.calls[-1] == ("finish", None, "second")
    resumed = [json.dumps(r) for r in cli.serve.requests[before:] if r.get("tools")]
    assert resumed and "Write hello.txt" in resumed[0]  # the first step's conversation came along
    record = second.memos[f"cli-agent:{cli.name}"]
    assert (record["session_id"] == recorded["session_id"]) == (strategy == "resume"), (record, recorded)
    assert ("set_var", "cli_session:E2", _recorded_session(cli, record, recorded)) in second.calls
    # each model answer reports USAGE: a total of the whole session would count the first step's answers too
    assert record["usage"]["output_tokens"] == USAGE[1] * len(resumed), record["usage"]


def test_a_gemini_fork_of_a_session_it_does_not_keep_is_refused_before_it_starts(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """gemini forks by importing the parent session's file: with no file of that session in the user's gemini home,
    the fork is one line naming the session and what to do instead, and gemini is not started."""
    binary = agents.binary("gemini")
    _use_env(monkeypatch, agents.gemini_env(tmp_path / "home", request.getfixturevalue("fake_gemini").base_url))
    parent = {"agent": "gemini", "session_id": "0badc0de-0000-4000-8000-000000000000"}
    later = StepRequest(kind="work", run_id="run-real", step_id="next", title="Next", content="Go on.",
                        context={"project_root": str(project)}, variables={"cli_session:E1": parent},
                        hints={"cli_execution": {"id": "E2", "strategy": "fork", "resume_from": "E1"}})
    session = RecordingSession()
    with pytest.raises(ExecutorError, match=r"^no gemini session 0badc0de-\S+ is kept under \S+/\.gemini/tmp/\*/chats, "
                                            r"so it cannot be forked \(resume it .*or start a new session\)$"):
        _perform("gemini", binary, later, session, model="fake-gemini")
    assert not session.processes
