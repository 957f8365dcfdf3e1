"""The fake model servers proven end to end with the real agent CLIs (tests/agents/, no stepline involved): each
CLI, run non-interactively in a temporary project with a temporary HOME and pointed at the server, writes a file
with its own tool because the scripted model told it to, and its output stream carries the usage the server sent.
How each CLI is driven is written down in :mod:`fakes.agents`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fakes import agents
from fakes.fake_anthropic import FakeAnthropic
from fakes.fake_anthropic import responder as fake_anthropic_responder
from fakes.fake_gemini import FakeGemini
from fakes.fake_gemini import responder as fake_gemini_responder
from fakes.fake_openai import FakeOpenAI
from fakes.fake_openai import responder as fake_openai_responder
from fakes.policy import Call, Play

HERE = Path(__file__).resolve().parent
#: What one fake model answer costs; each test checks the CLI's totals are made of it.
USAGE = (1234, 56)


def _finish_server(project: Path) -> list[str]:
    """The command line of an MCP server whose ``finish`` writes its summary to ``project/done.txt``."""
    return [sys.executable, str(HERE / "finish_server.py"), str(project / "done.txt")]


def _mcp_json(project: Path) -> Path:
    """``project/mcp.json`` naming the finish server ``stepline`` (claude's and qwen's ``--mcp-config``)."""
    command, *args = _finish_server(project)
    path = project / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"stepline": {"command": command, "args": args}}}))
    return path


def _write_then_finish(write: Call) -> Play:
    """The script of the MCP tests: the CLI's own tool writes a file, then stepline's ``finish`` is called."""
    return agents.turns([write], [("mcp__stepline__finish", {"summary": "wrote hello.txt"})])


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """Run a CLI to its end and return its JSON lines; a failure shows its output. The timeout only catches a hang:
    a run takes seconds, but opencode alone needs about 8 s of CPU, and minutes on a shared, loaded machine."""
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_claude_writes_a_file_with_its_own_tool(tmp_path: Path, project: Path, fake_anthropic: FakeAnthropic) -> None:
    claude = agents.binary("claude")
    env = agents.claude_env(tmp_path / "home", fake_anthropic.base_url)
    fake_anthropic.caching = True
    fake_anthropic.responder = fake_anthropic_responder(agents.turns(
        [("Write", {"file_path": str(project / "hello.txt"), "content": "hello from claude\n"})]), usage=USAGE)
    lines = _run([claude, "-p", "Write hello.txt.", "--output-format", "stream-json", "--verbose",
                  "--permission-mode", "acceptEdits"], project, env)
    assert (project / "hello.txt").read_text() == "hello from claude\n"
    assert len(fake_anthropic.requests) == 2 and all(r["stream"] for r in fake_anthropic.requests)
    result = lines[-1]
    assert result["type"] == "result" and result["subtype"] == "success", result
    usage = result["usage"]
    # the fake caches claude's marked prefix: the first request writes it, the second reads it
    assert usage["cache_creation_input_tokens"] == usage["cache_read_input_tokens"] > 0
    assert usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"] \
        == USAGE[0] * 2
    assert usage["output_tokens"] == USAGE[1] * 2
    assert result["session_id"] and result["total_cost_usd"] > 0


def test_claude_calls_a_deferred_mcp_tool_through_toolsearch(tmp_path: Path, project: Path,
                                                            fake_anthropic: FakeAnthropic) -> None:
    claude = agents.binary("claude")
    env = agents.claude_env(tmp_path / "home", fake_anthropic.base_url)
    fake_anthropic.responder = fake_anthropic_responder(_write_then_finish(
        ("Write", {"file_path": str(project / "hello.txt"), "content": "hello from claude\n"})), usage=USAGE)
    lines = _run([claude, "-p", "Write hello.txt, then finish.", "--output-format", "stream-json", "--verbose",
                  "--permission-mode", "acceptEdits", "--mcp-config", _mcp_json(project), "--strict-mcp-config",
                  "--allowedTools", "mcp__stepline"], project, env)
    assert (project / "hello.txt").read_text() == "hello from claude\n"
    assert (project / "done.txt").read_text() == "wrote hello.txt"
    offered = [[t["name"] for t in r["tools"]] for r in fake_anthropic.requests]
    # the MCP tool is not offered until ToolSearch loaded it: Write, ToolSearch, finish, the end
    assert "mcp__stepline__finish" not in offered[1] and "mcp__stepline__finish" in offered[2]
    assert {"name": "stepline", "status": "connected"}.items() <= lines[0]["mcp_servers"][0].items()
    assert lines[-1]["usage"]["output_tokens"] == USAGE[1] * len(fake_anthropic.requests) == USAGE[1] * 4


def test_codex_runs_a_command_and_calls_an_mcp_tool(tmp_path: Path, project: Path, fake_openai: FakeOpenAI) -> None:
    codex = agents.binary("codex")
    env = agents.codex_env(tmp_path / "home", fake_openai.base_url, mcp={"stepline": _finish_server(project)})
    fake_openai.caching = True
    fake_openai.responder = fake_openai_responder(_write_then_finish(
        ("exec_command", {"cmd": "printf 'hello from codex\\n' > hello.txt"})), usage=USAGE)
    lines = _run([codex, "exec", "--json", "--skip-git-repo-check", "-C", project, "-s", "workspace-write",
                  "Write hello.txt, then finish."], project, env)
    assert (project / "hello.txt").read_text() == "hello from codex\n"
    assert (project / "done.txt").read_text() == "wrote hello.txt"
    assert all(r["stream"] for r in fake_openai.requests) and len(fake_openai.requests) == 3
    items = [line["item"] for line in lines if line["type"] == "item.completed"]
    calls = [item for item in items if item["type"] == "mcp_tool_call"]
    assert [(c["server"], c["tool"], c["status"]) for c in calls] == [("stepline", "finish", "completed")]
    usage = next(line["usage"] for line in lines if line["type"] == "turn.completed")
    assert (usage["input_tokens"], usage["output_tokens"]) == (USAGE[0] * 3, USAGE[1] * 3)
    assert 0 < usage["cached_input_tokens"] < usage["input_tokens"]  # the later requests repeat the first's prefix
    assert lines[0]["type"] == "thread.started" and lines[0]["thread_id"]


def test_gemini_writes_a_file_and_calls_an_mcp_tool(tmp_path: Path, project: Path, fake_gemini: FakeGemini) -> None:
    gemini = agents.binary("gemini")
    env = agents.gemini_env(tmp_path / "home", fake_gemini.base_url, mcp={"stepline": _finish_server(project)})
    fake_gemini.responder = fake_gemini_responder(_write_then_finish(
        ("write_file", {"file_path": str(project / "hello.txt"), "content": "hello from gemini\n"})), usage=USAGE)
    lines = _run([gemini, "-p", "Write hello.txt, then finish.", "--output-format", "stream-json", "--approval-mode",
                  "yolo", "--skip-trust", "-m", "fake-gemini", "--allowed-mcp-server-names", "stepline"], project, env)
    assert (project / "hello.txt").read_text() == "hello from gemini\n"
    assert (project / "done.txt").read_text() == "wrote hello.txt"
    assert [r["model"] for r in fake_gemini.requests] == ["fake-gemini"] * 3
    used = [line["tool_name"] for line in lines if line["type"] == "tool_use"]
    assert used == ["write_file", "mcp_stepline_finish"]
    stats = lines[-1]["stats"]
    assert lines[-1]["status"] == "success" and lines[0]["session_id"]
    assert (stats["input_tokens"], stats["output_tokens"]) == (USAGE[0] * 3, USAGE[1] * 3)


def test_qwen_writes_a_file_and_calls_an_mcp_tool(tmp_path: Path, project: Path, fake_openai: FakeOpenAI) -> None:
    qwen = agents.binary("qwen")
    fake_openai.responder = fake_openai_responder(_write_then_finish(
        ("write_file", {"file_path": str(project / "hello.txt"), "content": "hello from qwen\n"})), usage=USAGE)
    lines = _run([qwen, "--auth-type", "openai", "--output-format", "stream-json", "--approval-mode", "yolo",
                  "--mcp-config", _mcp_json(project), "Write hello.txt, then finish."], project,
                 agents.qwen_env(tmp_path / "home", fake_openai.base_url))
    assert (project / "hello.txt").read_text() == "hello from qwen\n"
    assert (project / "done.txt").read_text() == "wrote hello.txt"
    assert all(r["stream"] and r["stream_options"] == {"include_usage": True} for r in fake_openai.requests)
    result = lines[-1]
    assert result["type"] == "result" and result["subtype"] == "success" and result["session_id"]
    assert len(fake_openai.requests) == 3
    assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"]) == (USAGE[0] * 3, USAGE[1] * 3)


def test_opencode_writes_a_file_and_calls_an_mcp_tool(tmp_path: Path, project: Path, fake_openai: FakeOpenAI) -> None:
    opencode = agents.binary("opencode")
    env = agents.opencode_env(tmp_path / "home", fake_openai.base_url, mcp={"stepline": _finish_server(project)})
    fake_openai.responder = fake_openai_responder(_write_then_finish(
        ("write", {"filePath": str(project / "hello.txt"), "content": "hello from opencode\n"})), usage=USAGE)
    lines = _run([opencode, "run", "--format", "json", "Write hello.txt, then finish."], project, env)
    assert (project / "hello.txt").read_text() == "hello from opencode\n"
    assert (project / "done.txt").read_text() == "wrote hello.txt"
    tools = [(line["part"]["tool"], line["part"]["state"]["status"]) for line in lines if line["type"] == "tool_use"]
    assert tools == [("write", "completed"), ("stepline_finish", "completed")]
    steps = [line["part"]["tokens"] for line in lines if line["type"] == "step_finish"]
    assert [(t["input"], t["output"]) for t in steps] == [USAGE] * 3  # the title request is not a step
    assert len({line["sessionID"] for line in lines}) == 1


def test_mcp_inspector_lists_and_calls_an_mcp_servers_tools(project: Path) -> None:
    inspector = agents.binary("mcp-inspector-cli")
    server = _finish_server(project)

    def inspect(*method: str) -> dict[str, Any]:
        done = subprocess.run([str(inspector), "--cli", *server, "--method", *method], cwd=agents.INSPECTOR_CWD,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-2000:]
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    tools = inspect("tools/list")["tools"]
    assert [(t["name"], t["inputSchema"]["required"]) for t in tools] == [("finish", ["summary"])]
    assert inspect("tools/call", "--tool-name", "finish", "--tool-arg", "summary=checked")["content"] == [
        {"type": "text", "text": "finished"}]
    assert (project / "done.txt").read_text() == "checked"
