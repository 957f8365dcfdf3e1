"""The sprint loop with a real agent CLI: claude (pinned in tests/agents/, installed by scripts/agents.sh) driven by
the scripted fake Anthropic server. The model's script edits the files with claude's own tools (Write, Bash) and
reports through stepline's MCP tools (finish, loaded with ToolSearch as claude 2.1 defers them); stepline verifies,
reviews and commits. A SIGKILL of the loop mid-build leaves no claude behind, and the resumed build starts from the
stage's start: each change is committed once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, HERE, git, make_project

from fakes import agents
from fakes.fake_anthropic import FakeAnthropic, responder
from fakes.policy import Call, Conversation
from fakes.processes import alive

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

FINISH = "mcp__stepline__finish"
OPERATORS = {"add": "+", "sub": "-", "mul": "*"}
_STEP = re.compile(r"^# Step (?P<step>\S+): (?:build story (?P<built>\S+)|review (?P<reviewed>[^:\s]+))", re.M)


class Model:
    """The scripted model: per request, what claude is to do with its own tools and stepline's; ``kill`` SIGKILLs
    the loop (``loop_pid``) at a build's second turn, once its first turn's edits are made."""

    def __init__(self) -> None:
        self.kill: str | None = None
        self.loop_pid = 0
        self.requests: list[str] = []

    def play(self, conversation: Conversation) -> list[Call]:
        found = _STEP.search(conversation.prompt)
        if not conversation.tools or found is None:
            return []  # a side request of claude's (a title, a summary)
        self.requests.append(f"{found['step']}:{conversation.turns}")
        if found["reviewed"]:
            return [(FINISH, {"summary": "none"})] if conversation.turns == 0 else []
        key = found["built"]
        workspace = re.search(r"^Implement BMAD story `\S+` in (\S+), unattended\.$", conversation.prompt, re.M)[1]
        story = re.search(r"^## The story \((.+)\)$", conversation.prompt, re.M)[1]
        name = key.split("-")[2]
        if conversation.turns == 0:
            return [("Write", {"file_path": f"{workspace}/calc_{name}.py",
                               "content": f"def {name}(a, b):\n    return a {OPERATORS[name]} b\n"}),
                    ("Write", {"file_path": f"{workspace}/tests/test_{name}.py",
                               "content": f"import unittest\n\nfrom calc_{name} import {name}\n\n\n"
                                          f"class Test(unittest.TestCase):\n    def test_{name}(self):\n"
                                          f"        self.assertEqual({name}(6, 3), 6 {OPERATORS[name]} 3)\n"}),
                    ("Bash", {"command": f"echo '- story {key}: a change made once' >> {workspace}/NOTES.md && "
                                         f"sed -i 's/^status: .*/status: review/' {story}",
                              "description": "note the change and mark the story for review"})]
        if conversation.turns == 1 and self.kill == key:
            self.kill = None
            os.kill(self.loop_pid, signal.SIGKILL)  # the loop dies while its agent is mid-build
            return [("Bash", {"command": f"python3 -c 'import time; time.sleep(60)' {workspace}",
                              "description": "think"})]
        return [(FINISH, {"summary": f"{name}() with its test"})] if conversation.turns == 1 else []


@pytest.fixture
def claude(tmp_path: Path) -> Path:
    return agents.binary("claude")


def _project(tmp_path: Path, claude: Path) -> Path:
    root = make_project(tmp_path / "calc", layers=1)
    (root / "config" / "runtime.yaml").write_text(
        f"executors:\n  cli-agent: {{agent: claude, command: {claude}, exit_grace_seconds: 10, stall_seconds: 60}}\n")
    git(root, "commit", "-q", "-am", "the real claude")
    return root


def _loop(root: Path, server: FakeAnthropic, home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **agents.claude_env(home, server.base_url)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env.update(CHECKS_LOG=str(home.parent / "checks.log"), GIT_AUTHOR_NAME="Agent", GIT_AUTHOR_EMAIL="a@example.com",
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


def test_the_real_claude_builds_three_stories_stepline_reviews_and_commits_each_once(
        tmp_path: Path, claude: Path, fake_anthropic: FakeAnthropic) -> None:
    model = Model()
    fake_anthropic.responder = responder(model.play, usage=(1500, 80))
    root = _project(tmp_path, claude)
    loop = _loop(root, fake_anthropic, tmp_path / "home", "run", "--max-stories", "3", "--json")
    out, err = loop.communicate(timeout=600)
    assert loop.returncode == 0, err[-3000:]
    results = json.loads(out)
    assert [(r["key"], r["outcome"]) for r in results] == [
        ("1-1-add", "committed"), ("1-2-sub", "committed"), ("1-3-mul", "committed")]
    assert _story_commits(root) == Counter({"1-1-add": 1, "1-2-sub": 1, "1-3-mul": 1})
    assert git(root, "show", "--format=", "--name-only", "HEAD").split() == [
        "NOTES.md", f"{ARTIFACTS}/1-3-mul.md", "calc_mul.py", "tests/test_mul.py"]
    assert (root / "NOTES.md").read_text().count("a change made once") == 3
    # Each build: claude's edits, stepline's finish, its closing text; each review: the finish and the closing text.
    assert Counter(model.requests) == Counter({"build:0": 3, "build:1": 3, "build:2": 3, "review:0": 3,
                                               "review:1": 3})
    assert all(r["usage"]["input_tokens"] >= 3 * 1500 for r in results)
    assert _left_in(root) == []


def test_a_sigkill_of_the_loop_mid_build_leaves_no_claude_and_the_resume_commits_each_change_once(
        tmp_path: Path, claude: Path, fake_anthropic: FakeAnthropic) -> None:
    model = Model()
    fake_anthropic.responder = responder(model.play, usage=(1500, 80))
    root = _project(tmp_path, claude)
    model.kill = "1-1-add"
    loop = _loop(root, fake_anthropic, tmp_path / "home", "run", "--story", "1-1")
    model.loop_pid = loop.pid
    loop.communicate(timeout=300)
    assert loop.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5  # the supervisor sees its driver gone within a tick
    while _left_in(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _left_in(root) == []  # claude and the command it ran died with the loop
    assert (root / "NOTES.md").read_text() == "- story 1-1-add: a change made once\n"  # its first turn was made
    resumed = _loop(root, fake_anthropic, tmp_path / "home", "resume")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    assert _story_commits(root) == Counter({"1-1-add": 1})
    assert git(root, "show", "HEAD:NOTES.md") == "- story 1-1-add: a change made once\n"
    kept = git(root, "for-each-ref", "--format=%(refname)", "refs/stepline/preserve/").split()
    assert kept == ["refs/stepline/preserve/1-1-add/build/1"]
    assert _left_in(root) == []
