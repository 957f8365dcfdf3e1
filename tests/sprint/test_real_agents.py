"""The sprint loop with the real agent CLIs (pinned in tests/agents/, installed by scripts/agents.sh): claude driven
by the scripted fake Anthropic server, codex by the fake OpenAI Responses server. The model's script edits the
files with the CLI's own tools (claude: Write and Bash; codex: its shell) and reports through stepline's MCP tools
(claude loads the deferred finish with ToolSearch); stepline verifies, reviews and commits. A SIGKILL of the loop
mid-build leaves no agent behind, and the resumed build starts from the stage's start: each change committed once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sprint_kit import ARTIFACTS, BMAD, HERE, add_config, git, make_project

from fakes import agents
from fakes.fake_anthropic import responder as anthropic_responder
from fakes.fake_openai import responder as openai_responder
from fakes.policy import Call, Conversation
from fakes.processes import alive

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

FINISH = "mcp__stepline__finish"
OPERATORS = {"add": "+", "sub": "-", "mul": "*"}
_STEP = re.compile(r"^# Step (?P<step>\S+): (?:build story (?P<built>\S+)|review (?P<reviewed>[^:\s]+))", re.M)


class Model:
    """The scripted model: per request, what the agent is to do with its own tools and stepline's; ``kill``
    SIGKILLs the loop (``loop_pid``) at a build's second turn, once its first turn's edits are made."""

    def __init__(self, cli: str) -> None:
        self.cli = cli
        self.kill: str | None = None
        self.loop_pid = 0
        self.requests: list[str] = []
        self.hang_first: set[str] = set()  # stories whose first build runs a command that hangs (a stall)
        self.builds: Counter[str] = Counter()
        self.notes = True  # each build appends to NOTES.md (stories built at once then conflict when they merge)
        self.orphan = False  # ``kill`` takes the agent's supervisor too: the agent goes on with no one to stop it

    def shell(self, command: str) -> Call:
        if self.cli == "codex":
            return "exec_command", {"cmd": command}
        return "Bash", {"command": command, "description": "run it"}

    def play(self, conversation: Conversation) -> list[Call]:
        found = _STEP.search(conversation.prompt)
        if not conversation.tools or found is None:
            return []  # a side request of the CLI's (a title, a summary)
        self.requests.append(f"{found['step']}:{conversation.turns}")
        if found["reviewed"]:
            return [(FINISH, {"summary": "none"})] if conversation.turns == 0 else []
        key = found["built"]
        workspace = re.search(r"^Implement BMAD story `\S+` in (\S+), unattended\.$", conversation.prompt, re.M)[1]
        story = re.search(r"^## The story \((.+)\)$", conversation.prompt, re.M)[1]
        name = key.split("-")[2]
        if conversation.turns == 0:
            self.builds[key] += 1
            if key in self.hang_first and self.builds[key] == 1:
                return [self.shell(f"python3 -c 'import time; time.sleep(60)' {workspace}")]
            module = [f"def {name}(a, b):", f"    return a {OPERATORS[name]} b"]
            test = ["import unittest", "", f"from calc_{name} import {name}", "", "",
                    "class Test(unittest.TestCase):", f"    def test_{name}(self):",
                    f"        self.assertEqual({name}(6, 3), 6 {OPERATORS[name]} 3)"]
            note = (f"echo '- story {key}: a change made once' >> {workspace}/NOTES.md && " if self.notes else "") + \
                f"sed -i 's/^status: .*/status: review/' {story}"
            if self.cli == "codex":  # its files written with its shell
                lines = " ".join(f"'{line}'" for line in module)
                tests = " ".join(f"'{line}'" for line in test)
                return [self.shell(f"cd {workspace} && printf '%s\\n' {lines} > calc_{name}.py && mkdir -p tests && "
                                   f"printf '%s\\n' {tests} > tests/test_{name}.py && {note}")]
            return [("Write", {"file_path": f"{workspace}/calc_{name}.py", "content": "\n".join(module) + "\n"}),
                    ("Write", {"file_path": f"{workspace}/tests/test_{name}.py", "content": "\n".join(test) + "\n"}),
                    self.shell(note)]
        if conversation.turns == 1 and self.kill == key:
            self.kill = None
            if self.orphan:  # its supervisor dies with the loop; then, once the resume has put the checkout back,
                # the agent makes its edit again (the journal records the put-back's result)
                for supervisor in _supervisors_of(self.loop_pid):
                    os.kill(supervisor, signal.SIGKILL)
                os.kill(self.loop_pid, signal.SIGKILL)
                again = (f"until grep -qs '\"preserved\"' {workspace}/.stepline/runs/*/journal.jsonl; do sleep 0.02; "
                         f"done; echo '- story {key}: a change made once' >> {workspace}/NOTES.md")
                return [self.shell(f"timeout 300 sh -c \"{again}\"")]
            os.kill(self.loop_pid, signal.SIGKILL)  # the loop dies while its agent is mid-build
            return [self.shell(f"python3 -c 'import time; time.sleep(60)' {workspace}")]
        return [(FINISH, {"summary": f"{name}() with its test"})] if conversation.turns == 1 else []


def _supervisors_of(pid: int) -> list[int]:
    """The agent supervisors the process ``pid`` started."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
            if parent == pid and b"_supervisor.py" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


@dataclass
class Agent:
    name: str
    binary: Path
    server: Any
    env: dict[str, str]


@pytest.fixture(params=["claude", "codex"])
def agent(request: pytest.FixtureRequest, tmp_path: Path) -> Agent:
    """A real CLI pointed at its fake model server, as a user's setup would (a HOME of its own)."""
    name = str(request.param)
    binary = agents.binary(name)
    home = tmp_path / "home"
    if name == "claude":
        server = request.getfixturevalue("fake_anthropic")
        return Agent(name, binary, server, agents.claude_env(home, server.base_url))
    server = request.getfixturevalue("fake_openai")
    return Agent(name, binary, server, agents.codex_env(home, server.base_url))


def _script(agent: Agent) -> Model:
    model = Model(agent.name)
    respond = anthropic_responder if agent.name == "claude" else openai_responder
    agent.server.responder = respond(model.play, usage=(1500, 80))
    return model


def _project(tmp_path: Path, agent: Agent, isolation: str = "none") -> Path:
    root = make_project(tmp_path / "calc", layers=1, isolation=isolation)
    (root / "config" / "runtime.yaml").write_text(
        f"executors:\n  cli-agent: {{agent: {agent.name}, command: {agent.binary}, exit_grace_seconds: 10, "
        "stall_seconds: 60}\n")
    git(root, "commit", "-q", "-am", f"the real {agent.name}")
    return root


def _loop(root: Path, agent: Agent, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **agent.env}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env.update(CHECKS_LOG=str(root.parent / "checks.log"), GIT_AUTHOR_NAME="Agent", GIT_AUTHOR_EMAIL="a@example.com",
               GIT_COMMITTER_NAME="Agent", GIT_COMMITTER_EMAIL="a@example.com")
    return subprocess.Popen([sys.executable, str(HERE / "crash_child.py"), "sprint", *args, "-C", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _left_in(root: Path) -> list[str]:
    """The processes still running in the project (their working folder in it): claude, what it started."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "cwd").startswith(str(root)) and alive(int(proc.name)):
                found.append(f"{proc.name} {(proc / 'cmdline').read_bytes()[:200]!r}")
        except OSError:
            continue
    return found


def _story_commits(root: Path) -> Counter[str]:
    return Counter(git(root, "log", "--format=%(trailers:key=Stepline-Story,valueonly)").split())


def test_the_real_agent_builds_three_stories_stepline_reviews_and_commits_each_once(
        tmp_path: Path, agent: Agent) -> None:
    model = _script(agent)
    root = _project(tmp_path, agent)
    loop = _loop(root, agent, "run", "--max-stories", "3", "--json")
    out, err = loop.communicate(timeout=600)
    assert loop.returncode == 0, err[-3000:]
    results = json.loads(out)
    assert [(r["key"], r["outcome"]) for r in results] == [
        ("1-1-add", "committed"), ("1-2-sub", "committed"), ("1-3-mul", "committed")]
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1, "1-3-mul": 1})
    assert git(root, "show", "--format=", "--name-only", "HEAD").split() == [
        "NOTES.md", f"{ARTIFACTS}/1-3-mul.md", "calc_mul.py", "tests/test_mul.py"]
    assert (root / "NOTES.md").read_text().count("a change made once") == 3
    # Each build: the agent's edits, stepline's finish, its closing text; each review: the finish, the closing text.
    assert Counter(model.requests) == Counter({"build:0": 3, "build:1": 3, "build:2": 3, "review:0": 3,
                                               "review:1": 3})
    assert all(r["usage"]["input_tokens"] >= 3 * 1500 for r in results)  # the whole prompt, cached part included
    assert _left_in(root) == []


def test_a_sigkill_of_the_loop_mid_build_leaves_no_agent_and_the_resume_commits_each_change_once(
        tmp_path: Path, agent: Agent) -> None:
    model = _script(agent)
    root = _project(tmp_path, agent)
    model.kill = "1-1-add"
    loop = _loop(root, agent, "run", "--story", "1-1")
    model.loop_pid = loop.pid
    loop.communicate(timeout=300)
    assert loop.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5  # the supervisor sees its driver gone within a tick
    while _left_in(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _left_in(root) == []  # the agent and the command it ran died with the loop
    assert (root / "NOTES.md").read_text() == "- story 1-1-add: a change made once\n"  # its first turn was made
    resumed = _loop(root, agent, "resume")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    assert _story_commits(root) == Counter({"1-1-add": 1})
    assert git(root, "show", "HEAD:NOTES.md") == "- story 1-1-add: a change made once\n"
    kept = git(root, "for-each-ref", "--format=%(refname)", "refs/stepline/preserve/").split()
    assert kept == ["refs/stepline/preserve/1-1-add/build/1"]
    assert _left_in(root) == []


def test_the_real_claude_left_running_with_its_supervisor_killed_is_stopped_before_the_resume_puts_anything_back(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The loop and the agent's supervisor are SIGKILLed mid-build; the real claude goes on and runs a command that
    waits for the checkout to be put back, then appends its line again. The resume stops it first (its journaled
    pid, start time and boot id; its process group, waited for): the story's commit holds the line once."""
    server = request.getfixturevalue("fake_anthropic")
    private = tmp_path / "tmp"
    private.mkdir()
    agent = Agent("claude", agents.binary("claude"), server,
                  {**agents.claude_env(tmp_path / "home", server.base_url), "TMPDIR": str(private)})
    model = _script(agent)
    model.kill, model.orphan = "1-1-add", True
    root = _project(tmp_path, agent)
    loop = _loop(root, agent, "run", "--story", "1-1")
    model.loop_pid = loop.pid
    loop.communicate(timeout=300)
    assert loop.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 60
    while not _left_in(root) and time.monotonic() < deadline:  # claude runs its command: no one stops it
        time.sleep(0.1)
    assert _left_in(root)
    resumed = _loop(root, agent, "resume")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    assert _story_commits(root) == Counter({"1-1-add": 1})
    assert git(root, "show", "HEAD:NOTES.md") == "- story 1-1-add: a change made once\n"
    assert _left_in(root) == []
    assert list(private.glob("stepline-agent-*")) == []


def test_the_real_claude_s_rate_limit_and_stall_are_classified_and_spend_no_build_attempt(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A 429 from the model (claude told not to retry it) and a command that hangs (no output, no file change for
    stall_seconds): each is journaled with its kind, the build is tried again in the same stage, and with one
    build attempt per story both stories are still committed."""
    from fakes.fake_anthropic import fault

    server = request.getfixturevalue("fake_anthropic")
    agent = Agent("claude", agents.binary("claude"), server,
                  {**agents.claude_env(tmp_path / "home", server.base_url), "CLAUDE_CODE_MAX_RETRIES": "0"})
    model = _script(agent)
    model.hang_first = {"1-2-sub"}
    root = _project(tmp_path, agent, "worktree")  # (the agent's folder holds no .stepline/ of the loop's own)
    config = root / "config" / "sprint.yaml"
    config.write_text(config.read_text().replace("retries: {build: 3", "retries: {build: 1"))
    add_config(root, "stall_seconds: 20\nagent_retry_wait_seconds: 0\n", "one build each, a short stall limit")
    server.queue(fault(429, "rate limit reached for requests"))
    loop = _loop(root, agent, "run", "--max-stories", "2", "--json")
    out, err = loop.communicate(timeout=600)
    assert loop.returncode == 0, err[-3000:]
    results = json.loads(out)
    assert [r["outcome"] for r in results] == ["committed", "committed"]
    kinds = {}
    for result in results:
        raw = (root / ".stepline" / "runs" / result["run_id"] / "journal.jsonl").read_bytes().rstrip(b"\0").decode()
        records = [json.loads(line) for line in raw.splitlines() if line.strip()]
        kinds[result["key"]] = [e["data"]["result"]["kind"] for e in records
                                if e["type"] == "CallRecorded" and e["data"]["op"].startswith("sprint:agent-failure/")]
        assert '"step_id":"build@2"' not in raw  # the one build attempt was not spent
    assert kinds == {"1-1-add": ["rate-limit"], "1-2-sub": ["stall"]}
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1}) and _left_in(root) == []


def test_the_real_claude_builds_two_independent_stories_at_once_and_each_lands_once(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """`sprint run -j 2`: two stories that touch different files build and review at once, each in its worktree, with
    the real claude; both are merged onto the integration branch once, in sprint order; no process is left."""
    server = request.getfixturevalue("fake_anthropic")
    agent = Agent("claude", agents.binary("claude"), server, agents.claude_env(tmp_path / "home", server.base_url))
    model = _script(agent)
    model.notes = False
    root = _project(tmp_path, agent, "worktree")
    loop = _loop(root, agent, "run", "-j", "2", "--max-stories", "2", "--json")
    out, err = loop.communicate(timeout=600)
    assert loop.returncode == 0, err[-3000:]
    assert sorted((r["key"], r["outcome"]) for r in json.loads(out)) == [
        ("1-1-add", "committed"), ("1-2-sub", "committed")]
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1})
    assert git(root, "log", "--format=%s", "-2").splitlines() == ["story 1-2-sub: Story 1-2: sub",
                                                                  "story 1-1-add: Story 1-1: add"]  # sprint order
    events = [json.loads(line) for line in (root / ".stepline" / "sprint" / "loop.jsonl").read_text().splitlines()]
    order = [e["event"] for e in events if e["event"] in ("story-started", "story-ended")]
    assert order == ["story-started", "story-started", "story-ended", "story-ended"]  # at once
    assert Counter(model.requests) == Counter({"build:0": 2, "build:1": 2, "build:2": 2, "review:0": 2,
                                               "review:1": 2})  # nothing built again: no conflict, no rebuild
    checks = subprocess.run([sys.executable, "-m", "unittest", "discover", "-q", "-s", "tests"], cwd=root,
                            capture_output=True, text=True)
    assert checks.returncode == 0, checks.stderr
    assert git(root, "branch", "--list", "sprint/*").strip() == "" and _left_in(root) == []
