"""What a docs page's examples need around them, put in place by the example test as a user's machine would have
it: a CCW session made by CCW's planner, model servers (the scripted fakes of tests/fakes), the agent CLIs, a Ray
cluster, a trace collector, a server running in the background. A page asks for one with ``% example: setup NAME``;
each is a context manager on the page's :class:`Page` (its environment, its substitutions, its clean-up)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from fakes import agents
from fakes.fake_anthropic import FakeAnthropic
from fakes.fake_anthropic import responder as anthropic_responder
from fakes.fake_openai import FakeOpenAI
from fakes.fake_openai import responder as openai_responder
from fakes.policy import Call, Conversation, Policy

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
CORPUS = ROOT.parent / "shared" / "corpus"
#: Folders beside the page's project a page may name, and what they are: ``../BMAD-METHOD`` is a BMAD checkout.
BESIDE = {"BMAD-METHOD": CORPUS / "bmad" / "v6.11.0", "BMAD-METHOD-alpha.23": CORPUS / "bmad" / "v6.0.0-alpha.23",
          "bmad-extras": CORPUS / "bmad" / "extras", "stepline": ROOT}


@dataclass
class Page:
    """One page's run: its project, the environment and folder its commands run in, the text put in place of what
    a page names that is the reader's own (a server's address), and what to stop when the page is done."""

    tmp: Path
    project: Path
    env: dict[str, str]
    stack: contextlib.ExitStack
    cwd: Path = field(init=False)
    substitutions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cwd = self.project

    def substitute(self, text: str) -> str:
        for mine, actual in self.substitutions.items():
            text = text.replace(mine, actual)
        return text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes] | None, what: str, log: Path | None = None) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port`` (``process`` dying first fails)."""
    deadline = time.monotonic() + 90
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if process is not None and process.poll() is not None:
            output = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"{what} exited {process.returncode} before it listened on {port}\n{output}")
        assert time.monotonic() < deadline, f"{what} did not listen on {port} within 90 s"
        time.sleep(0.05)


def _module(path: Path) -> ModuleType:
    """A helper module of another test folder, loaded by its path (its folder is not on sys.path here)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def beside(page: Page, text: str) -> None:
    """The folders beside the project the page's text names (``../BMAD-METHOD``, ``../stepline``), linked."""
    for name, target in BESIDE.items():
        if f"../{name}" in text:
            assert target.is_dir(), f"{target} is missing: the page's examples need it as ../{name}"
            (page.tmp / name).symlink_to(target.resolve())


@contextlib.contextmanager
def ccw_sessions(page: Page) -> Iterator[None]:
    """Two active CCW sessions and an archived one, as CCW's planner leaves them in a project."""
    shutil.copytree(TESTS / "fixtures" / "ccw" / "project-active" / ".workflow", page.project / ".workflow")
    yield


def _agent_play(conversation: Conversation) -> list[Call]:
    """A coding agent doing a stepline step over its MCP server: get_step, then its work, then finish."""
    if conversation.turns == 0:
        return [("mcp__stepline__get_step", {})]
    if conversation.turns > 1 or not conversation.results:
        return []
    step = json.loads(conversation.results[0])
    if step["kind"] == "decide":
        return [("mcp__stepline__decide", {"value": False, "reason": "the agent takes the default branch"})]
    calls: list[Call] = []
    if step.get("hints", {}).get("output"):
        calls.append(("mcp__stepline__write_output", {"content": f"# {step['title']}\n\nWritten by the agent.\n"}))
    return [*calls, ("mcp__stepline__finish", {"summary": f"did {step['step_id']}"})]


def _model(policy: Policy) -> Callable[[Conversation], list[Call]]:
    """One fake model for both kinds of client: stepline's LLM executors offer the step protocol as tools and get
    the policy's answers; an agent CLI (claude) offers its own tools and does the step over MCP."""

    def play(conversation: Conversation) -> list[Call]:
        return policy(conversation) if "finish" in conversation.tools else _agent_play(conversation)

    return play


@contextlib.contextmanager
def models(page: Page) -> Iterator[None]:
    """An OpenAI-compatible server where the page says ``http://127.0.0.1:11434/v1`` (Ollama's address), the
    Anthropic API for the anthropic executor and for ``claude``, and the agent CLIs on the PATH: the real ones
    scripts/agents.sh installs when they are there, else the fake ones of tests/fakes/bin."""
    play = _model(Policy("scripted model"))
    with FakeOpenAI().running() as openai, FakeAnthropic().running() as anthropic:
        openai.responder = openai_responder(play)
        anthropic.responder = anthropic_responder(play)
        page.substitutions["http://127.0.0.1:11434/v1"] = openai.base_url
        home = page.tmp / "home"
        home.mkdir()
        clis = agents.BIN if (agents.BIN / "claude").exists() else TESTS / "fakes" / "bin"
        page.env.update(HOME=str(home), ANTHROPIC_BASE_URL=anthropic.base_url, ANTHROPIC_API_KEY="sk-ant-example",
                        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", PATH=f"{page.env['PATH']}{os.pathsep}{clis}")
        yield


@contextlib.contextmanager
def ray_cluster(page: Page) -> Iterator[None]:
    """A one-node Ray cluster on 127.0.0.1 where the page says ``HEAD:6379``, stopped by process id afterwards."""
    nodes = _module(TESTS / "distributed" / "ray_nodes.py")
    port = nodes.free_port()
    log = page.tmp / "ray-head.log"
    temp = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths must fit in 107 bytes
    page.stack.callback(shutil.rmtree, temp, True)
    env = {**page.env, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    head = nodes.start_node(["--head", "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false",
                             "--node-ip-address", "127.0.0.1", "--object-store-memory", str(80 * 1024 * 1024),
                             "--disable-usage-stats", "--temp-dir", str(temp)], log, env)
    try:
        nodes.wait_for_port(port, head, log)
        page.substitutions["HEAD:6379"] = f"127.0.0.1:{port}"
        page.env["RAY_AUTH_MODE"] = "disabled"
        yield
    finally:
        left = nodes.stop_nodes([head])
        assert not left, f"Ray processes left after the cluster was stopped: {left}"


@contextlib.contextmanager
def trace_collector(page: Page) -> Iterator[None]:
    """An OTLP/HTTP receiver where the page says ``http://127.0.0.1:4318``; the page must send it spans."""
    receiver = _module(TESTS / "telemetry" / "receiver.py").Receiver()
    with receiver.running():
        page.substitutions["http://127.0.0.1:4318"] = receiver.url
        yield
        names = {span.name.split()[0] for span in receiver.spans}
        assert "invoke_workflow" in names, f"the collector got no run's trace: {sorted(names)}"


@contextlib.contextmanager
def claude(page: Page) -> Iterator[None]:
    """The real ``claude`` CLI (scripts/agents.sh installs it; the page is skipped, saying so, without it), with
    the model servers of :func:`models`."""
    agents.binary("claude")
    with models(page):
        yield


SETUPS: dict[str, Callable[[Page], contextlib.AbstractContextManager[None]]] = {
    "ccw-sessions": ccw_sessions, "claude": claude, "models": models, "ray-cluster": ray_cluster,
    "trace-collector": trace_collector}


def port(page: Page, number: str) -> None:
    """A fixed port the page names (a server's default) becomes a free one for the test."""
    page.substitutions[f":{number}"] = f":{free_port()}"
    page.substitutions[f"--port {number}"] = page.substitutions[f":{number}"].replace(":", "--port ")


def background(page: Page, command: str, port_named: str) -> None:
    """``command`` runs until the page is done, as in a terminal of its own; the page goes on once it listens on
    the port it names (after substitution). Stopped with SIGTERM (as Ctrl-C would), and must exit."""
    number = int(page.substitute(f":{port_named}").lstrip(":"))
    log = page.tmp / f"background-{number}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=page.cwd, env=page.env, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def stop() -> None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise AssertionError(f"`{command}` did not stop on SIGTERM\n{log.read_text(errors='replace')}") from None

    page.stack.callback(stop)
    wait_for_port(number, process, f"`{command}`", log)


def assert_mentions(files: list[Path], commands: list[str]) -> None:
    """Each command is held by one of ``files`` (the files a skip names as running it instead)."""
    texts = [path.read_text(encoding="utf-8") for path in files]
    for command in commands:
        needles = [command, *(word for word in command.split() if "/" in word)]
        assert any(needle in text for needle in needles for text in texts), (
            f"`{command}` is in none of {[str(p.relative_to(ROOT)) for p in files]}")


__all__ = ["BESIDE", "SETUPS", "Page", "assert_mentions", "background", "beside", "port"]
