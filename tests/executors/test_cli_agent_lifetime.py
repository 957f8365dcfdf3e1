"""An agent never outlives the step that owns it: a driver killed with SIGKILL while its agent works takes the agent
with it (the agent's supervisor sees its parent go), and when the supervisor is killed too, the resumed run finds
the agent by the process the journal recorded before it started, stops it, and only then runs the step again. The
fake agent makes one edit late in its run: a change made twice, or an agent still running, fails the test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.processes import alive, python_running_with
from stepline.executors.cli_agents._process import _group_alive

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"

WORKFLOW = """\
id: build
steps:
  - id: build
    name: Build
    body: "Build it."
    outputs: [out/build.md]
"""

DRIVER = """\
import sys
from stepline import resume_run, run_workflow

options = {"agent": "codex", "cd": sys.argv[2]}
if sys.argv[1] == "start":
    run = run_workflow(sys.argv[2] + "/flow.yaml", project_root=sys.argv[2], executor="cli-agent",
                       executor_options=options)
else:
    run = resume_run(sys.argv[3], project_root=sys.argv[2])
print(run.run_id, run.status.value)
"""


@pytest.fixture
def driver_env(tmp_path: Path) -> dict[str, str]:
    """The fake agents first on PATH, the edit they make once ``release`` exists, where they leave their pids."""
    return {**os.environ, "PATH": os.pathsep.join([str(FAKES), str(Path(sys.executable).parent),
                                                   os.environ.get("PATH", "")]),
            "FAKE_AGENT_BEHAVIOR": "slow-edit", "FAKE_AGENT_PIDS": str(tmp_path / "pids"),
            "FAKE_AGENT_RELEASE": str(tmp_path / "release")}


def _start(project: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    (project / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    return subprocess.Popen([sys.executable, "-c", DRIVER, "start", str(project)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(predicate: object, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "pids"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _agent_process(project: Path) -> dict[str, object]:
    """The agent process the run's journal recorded (its intent), the last one."""
    journal = next((project / ".stepline" / "runs").glob("*/journal.jsonl"))
    records = [json.loads(line) for line in journal.read_text().splitlines() if line.strip().startswith("{")]
    found = [r["data"]["args"] for r in records if r.get("type") == "CallStarted"
             and r["data"].get("op") == "agent_process"]
    assert found, "no agent process was journaled"
    return found[-1]


def _resume(project: Path, env: dict[str, str], release: Path, tmp_path: Path) -> str:
    """Resume the run; once its agent has started (the one a dead driver left stopped by then), let agents edit."""
    run_id = next((project / ".stepline" / "runs").glob("*/journal.jsonl")).parent.name
    resumed = subprocess.Popen([sys.executable, "-c", DRIVER, "resume", str(project), run_id], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(lambda: len(_pids(tmp_path)) == 2, "the resumed agent to start", timeout=90)
    release.touch()
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err[-3000:]
    return out


@pytest.mark.parametrize("kill_supervisor", [False, True], ids=["driver", "driver-and-supervisor"])
def test_a_killed_driver_leaves_no_agent_and_the_resume_makes_the_change_once(
        kill_supervisor: bool, project: Path, tmp_path: Path, driver_env: dict[str, str]) -> None:
    """SIGKILL the driver mid-build (and, the second time, the agent's supervisor with it): no agent is left to
    make its edit behind the resumed run's back (agents edit once released, after the resumed one started); the
    resume runs the agent once more; the edit is there once."""
    driver = _start(project, driver_env)
    _wait_for(lambda: _pids(tmp_path), "the agent to start")
    first = _pids(tmp_path)[0]
    process = _agent_process(project)  # journaled before the agent started
    assert process["agent"] == "codex" and process["start_ticks"] and os.getpgid(first) == process["pgid"]
    if kill_supervisor:  # both die at once: only the journal knows the agent now
        os.kill(int(process["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    driver.kill()
    driver.wait(10)
    if not kill_supervisor:  # its supervisor stops it within a moment, before any resume
        _wait_for(lambda: not alive(first), "the agent to die with its driver", timeout=10)
    else:  # only the journal knows it now: it waits for its release, alive
        assert alive(first)
    out = _resume(project, driver_env, Path(driver_env["FAKE_AGENT_RELEASE"]), tmp_path)
    assert out.split()[1] == "completed", out
    assert not alive(first)
    pids = _pids(tmp_path)
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)  # killed once, run once on resume
    assert (project / "edits.txt").read_text().splitlines() == [f"edit by {pids[1]}"]
    assert (project / "out" / "build.md").read_text().startswith("codex did build")
    log = next((project / ".stepline" / "runs").glob("*/logs/build.log")).read_text()
    stopped = f"stopped the agent a previous driver left running (process group {process['pgid']})"
    assert (stopped in log) == kill_supervisor  # the resume stopped it only where its supervisor could not


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_killed_driver_takes_the_real_agent_and_its_command_with_it(
        agent: str, project: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The real claude or codex, running a command for the step, is gone with the command it ran once its driver
    is SIGKILLed: nothing of the agent's process group, nor the command, is left."""
    from fakes import agents
    from fakes.fake_anthropic import responder as anthropic_responder
    from fakes.fake_openai import responder as openai_responder

    binary = agents.binary(agent)
    hang = f"python3 -c 'import time; time.sleep(60)' {project}"
    if agent == "claude":
        server = request.getfixturevalue("fake_anthropic")
        server.responder = anthropic_responder(agents.turns([("Bash", {"command": hang})]))
        env = agents.claude_env(tmp_path / "home", server.base_url)
    else:
        server = request.getfixturevalue("fake_openai")
        server.responder = openai_responder(agents.turns([("exec_command", {"cmd": hang})]))
        env = agents.codex_env(tmp_path / "home", server.base_url)
    (project / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.replace('"codex"', repr(agent)).replace(
        '"cd": sys.argv[2]', f'"cd": sys.argv[2], "command": {str(binary)!r}'), "start", str(project)],
        env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    _wait_for(lambda: _hung(project), "the agent's command to run", timeout=90)
    group = int(_agent_process(project)["pgid"])  # type: ignore[call-overload]
    driver.kill()
    driver.wait(10)
    _wait_for(lambda: not _group_alive(group) and not _hung(project), "the agent and its command to die", 15)


def _hung(project: Path) -> bool:
    """Whether the command an agent ran for ``project`` (named by its path) still runs."""
    return python_running_with(str(project))
