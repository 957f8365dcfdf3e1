"""The MCP server a cli-agent step hands its agent serves only that agent: every request must carry the step's
secret, which the agent gets in its MCP configuration (a private file or its environment, never its command line).
Another local process that finds the port can neither finish the step nor write into the project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"

#: An MCP client with no secret: what any other local process that found the port could do.
INTRUDER = """
import asyncio, sys, urllib.error, urllib.request
from mcp import Client

try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b"{}", method="POST"), timeout=30)
except urllib.error.HTTPError as exc:
    print("HTTP", exc.code, flush=True)

async def main(url):
    async with Client(url) as client:
        await client.call_tool("write_output", {"content": "pwned\\n", "path": "pwned.md", "mode": "replace"})
        await client.call_tool("finish", {"summary": "the intruder finished it"})

asyncio.run(main(sys.argv[1]))
print("INTRUDED")
"""


def _wait(condition: object, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini", "qwen", "opencode"])
def test_an_intruder_that_finds_the_port_cannot_do_the_step(project: Path, tmp_path: Path, agent: str) -> None:
    (project / "flow.yaml").write_text("id: f\nsteps:\n  - id: outline\n    name: Outline\n    body: Outline it.\n"
                                       "    outputs: [out/outline.md]\n", encoding="utf-8")
    (project / "config").mkdir()
    (project / "config" / "runtime.yaml").write_text(f"executors:\n  cli-agent: {{agent: {agent}}}\n",
                                                     encoding="utf-8")
    log, pids, release = tmp_path / "agent.jsonl", tmp_path / "pids", tmp_path / "release"
    env = {**os.environ, "PATH": os.pathsep.join([str(FAKES), str(Path(sys.executable).parent), os.environ["PATH"]]),
           "FAKE_AGENT_LOG": str(log), "FAKE_AGENT_BEHAVIOR": "slow-edit", "FAKE_AGENT_PIDS": str(pids),
           "FAKE_AGENT_RELEASE": str(release), "GEMINI_CLI_HOME": str(tmp_path / "gemini-home")}
    run = subprocess.Popen([sys.executable, "-m", "stepline.interfaces.cli", "run", "flow.yaml", "-e", "cli-agent",
                            "--yolo", "-q", "--json", "-C", str(project)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: pids.exists(), "the agent never started")  # it holds until released: the step is open
        invocation = json.loads(log.read_text(encoding="utf-8").splitlines()[0])
        assert "Bearer" not in json.dumps(invocation["argv"])  # any local process can read a command line
        intruder = subprocess.run([sys.executable, "-c", INTRUDER, invocation["url"]], capture_output=True,
                                  text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                              if not k.startswith("STEPLINE_")})
        assert "INTRUDED" not in intruder.stdout and intruder.returncode != 0, intruder
        assert "HTTP 401" in intruder.stdout, intruder
        assert not (project / "pwned.md").exists()
        release.touch()
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, (out, err)
    assert json.loads(out)["status"] == "completed"
    assert not (project / "pwned.md").exists()
    assert (project / "out" / "outline.md").read_text(encoding="utf-8").startswith(f"{agent} did outline")
    journal = next((project / ".stepline" / "runs").glob("run-*/journal.jsonl")).read_text(encoding="utf-8")
    assert "the intruder finished it" not in journal and "pwned" not in journal
    assert f"{agent} finished outline" in journal
