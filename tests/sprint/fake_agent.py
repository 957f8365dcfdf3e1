"""A fake coding agent for the sprint loop's tests: it edits files and commits as an agent would.

Invoked as ``claude`` by the cli-agent executor (``bin/claude``): it reads the MCP config from argv, asks
stepline for its step (``get_step``) over plain HTTP JSON-RPC (no SDK: each start must be cheap), then acts
by the step's stage (``build`` or ``review``) and the story, as ``FAKE_SPRINT`` (JSON: story prefix ->
behaviour) says:

``honest``  writes the story's module and test, marks the story ``review`` (its file and the board), commits;
``liar``    the first time only marks the story ``review`` and claims success (no code); then honest;
``breaker`` the first time writes its module but breaks an earlier story's code; then honest (and repairs);
``stubborn`` always writes a module whose test fails.
``noter``   builds honestly and has the story's line in NOTES.md (once, however often it is built);
``reporter`` builds honestly, then writes ``REPORT-<prefix>.md`` with stepline's ``write_output`` (logged with
            whether it landed in its folder and whether in the main checkout, ``FAKE_MAIN``);
``appender`` writes the story's module, appends a line to NOTES.md (twice if built twice on top of itself) and,
            killed mid-build (``FAKE_KILL``), goes on editing a second later as an orphaned agent would (with
            ``FAKE_ORPHAN``: its supervisor killed too, once the resume has put the checkout back);
``staller`` / ``quota`` / ``login`` the first time hangs silently / prints a 429 / a login prompt; then honest
            (``quota-reviewer``: an honest build, a review refused with a 429 the first time; ``crash-reviewer``: a
            review that crashes the first time, without a word to stepline; ``stale-rebase-reviewer``: a review that
            leaves in the story's worktree the state of a rebase killed as it began);
``filler``  builds honestly, the first time then fills the disk ``FAKE_FILL`` is on (a file there), as a build
            whose output takes the last free byte would;
``runaway`` the first time never ends: it starts a child, writes both pids to ``FAKE_PIDS``, and streams claude's
            per-message usage (1,000 tokens every 50 ms, each running total and its time in ``FAKE_TIMES``);
            then honest. ``runaway-reviewer``: an honest build, a review that runs away so.

Reviews answer ``none``, except that ``FAKE_REVIEW`` (JSON: ``<story prefix>:<layer>[:<step>]`` -> report)
gives a layer's report (of one review round, when the step is named).
``FAKE_BUILD_DELAY`` (JSON: story prefix -> seconds) makes that story's builds take so much longer;
``FAKE_BUILD_WAIT`` (JSON: story prefix -> path) makes them wait until the path exists.
Every call is appended to ``FAKE_LOG`` (JSON lines: story, stage, step, run, its MCP config file). ``FAKE_KILL`` =
``<story prefix>:<stage>`` with ``FAKE_KILL_MARKER``: the first such call SIGKILLs its parent (the stepline
process) halfway through its work, once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

FUNCTIONS = {"1-1": ("add", "a + b", 5), "1-2": ("sub", "a - b", -1), "1-3": ("mul", "a * b", 6),
             "1-4": ("div", "a / b", 2 / 3), "2-1": ("mod", "a % b", 2)}


class Mcp:
    """Just enough streamable-HTTP MCP client: initialize, then tools/call."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = headers  # the step's secret, as the MCP config gives it
        self.session: str | None = None
        self.ids = 0
        self._post({"jsonrpc": "2.0", "id": self._id(), "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "fake", "version": "1"}}})
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _id(self) -> int:
        self.ids += 1
        return self.ids

    def _post(self, body: dict[str, Any]) -> Any:
        headers = {**self.headers, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["mcp-session-id"] = self.session
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            self.session = response.headers.get("mcp-session-id") or self.session
            text = response.read().decode()
        if "id" not in body:
            return None
        for line in text.splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("id") == body["id"]:
                    return message
        return json.loads(text) if text.strip().startswith("{") else None

    def call(self, name: str, args: dict[str, Any]) -> Any:
        message = self._post({"jsonrpc": "2.0", "id": self._id(), "method": "tools/call",
                              "params": {"name": name, "arguments": args}})
        result = message["result"]
        if result.get("isError"):
            raise SystemExit(f"{name} failed: {result}")
        return result.get("structuredContent") or result


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _story_file(prefix: str) -> Path:
    found = sorted(Path("_bmad-output/implementation-artifacts").glob(f"{prefix}-*.md"))
    return found[0]


def _mark_review(prefix: str) -> None:
    story = _story_file(prefix)
    story.write_text(re.sub(r"^(status|Status):.*$", r"\1: review", story.read_text(), count=1, flags=re.M))
    board = Path("_bmad-output/implementation-artifacts/sprint-status.yaml")
    board.write_text(re.sub(rf"^(\s+{prefix}-[\w-]+:\s*)\S+", r"\1review", board.read_text(), count=1, flags=re.M))


def _write_module(prefix: str, correct: bool) -> None:
    name, expr, expected = FUNCTIONS[prefix]
    body = expr if correct else "None  # not done yet"
    Path(f"calc_{name}.py").write_text(f"def {name}(a, b):\n    return {body}\n")
    Path("tests").mkdir(exist_ok=True)
    args = "2, 3"
    Path(f"tests/test_{name}.py").write_text(
        f"import unittest\n\nfrom calc_{name} import {name}\n\n\nclass Test(unittest.TestCase):\n"
        f"    def test_{name}(self):\n        self.assertAlmostEqual({name}({args}), {expected!r})\n")


def _kill_point(prefix: str, stage: str, layer: str | None = None, run: str = "") -> None:
    """SIGKILL the stepline process here, once, when FAKE_KILL names this point; with FAKE_KILL_AFTER, only once
    the run's journal holds that text (another call's recorded result, say)."""
    wanted, marker = os.environ.get("FAKE_KILL", ""), os.environ.get("FAKE_KILL_MARKER", "")
    here = f"{prefix}:{stage}" + (f":{layer}" if layer and wanted.count(":") == 2 else "")
    if wanted != here or not marker or Path(marker).exists():
        return
    after = os.environ.get("FAKE_KILL_AFTER")
    journal = Path(".stepline/runs") / run / "journal.jsonl"
    deadline = time.monotonic() + 30
    while after and after not in journal.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.05)
    Path(marker).write_text("killed")
    _kill_stepline()
    sys.exit(9)


def _kill_stepline() -> None:
    """SIGKILL the stepline process (crash_child.py names it: a supervisor may stand between it and the agent)."""
    os.kill(int(os.environ.get("FAKE_STEPLINE_PID") or os.getppid()), signal.SIGKILL)


def _run_away() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["FAKE_PIDS"], "a", encoding="utf-8") as pids:
        pids.write(f"{os.getpid()} {child.pid}\n")
    total = 0
    with open(os.environ["FAKE_TIMES"], "a", encoding="utf-8") as times:
        for number in range(1, 100000):
            total += 1000
            message = {"id": f"msg_{number}", "role": "assistant", "content": [{"type": "text", "text": "thinking"}],
                       "usage": {"input_tokens": 900, "output_tokens": 100}}
            times.write(f"{total} {time.time()}\n")
            times.flush()
            print(json.dumps({"type": "assistant", "message": message, "session_id": "runaway"}), flush=True)
            time.sleep(0.05)


def _append_note(prefix: str) -> None:
    """An edit that is not idempotent: a build run again on top of it would make it twice."""
    with open("NOTES.md", "a", encoding="utf-8") as notes:
        notes.write(f"- story {prefix}: a change made once\n")


def _linger(prefix: str, run: str) -> None:
    """Killed mid-build (``FAKE_KILL`` = ``<prefix>:build``): the agent kills the loop halfway through its work and
    goes on as an agent whose driver died would — one more edit a second later — unless it dies with its driver.
    With ``FAKE_ORPHAN`` it kills its supervisor first (nothing is left to stop it), waits until the resume has put
    the checkout back (the run's journal records the put-back), and makes its edit again: the same line twice."""
    marker = os.environ.get("FAKE_KILL_MARKER", "")
    if os.environ.get("FAKE_KILL") != f"{prefix}:build" or not marker or Path(marker).exists():
        return
    with open(os.environ["FAKE_PIDS"], "a", encoding="utf-8") as pids:
        pids.write(f"{os.getpid()}\n")
    Path(marker).write_text("killed")
    if os.environ.get("FAKE_ORPHAN"):
        os.kill(os.getppid(), signal.SIGKILL)  # the supervisor
        _kill_stepline()
        journal = Path(os.environ.get("FAKE_MAIN") or ".") / ".stepline" / "runs" / run / "journal.jsonl"
        deadline = time.monotonic() + 300
        while '"preserved"' not in journal.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.02)
        _append_note(prefix)
        sys.exit(0)
    _kill_stepline()
    time.sleep(1.5)
    with open("NOTES.md", "a", encoding="utf-8") as notes:
        notes.write(f"- story {prefix}: an edit after its driver died\n")
    sys.exit(0)


def _fail_once(prefix: str, behaviour: str) -> None:
    """``staller``, ``quota``, ``login``: the first build of the story (a marker in ``FAKE_ONCE_DIR``) fails for a
    reason outside the work — silent and idle until stopped; a 429; a login prompt — then builds honestly
    (``crash``: it crashes, a failure of its own)."""
    marker = Path(os.environ["FAKE_ONCE_DIR"]) / f"{prefix}-{behaviour}"
    if marker.exists():
        return
    marker.write_text("failed once")
    with open(os.environ["FAKE_PIDS"], "a", encoding="utf-8") as pids:
        pids.write(f"{os.getpid()}\n")
    if behaviour == "staller":
        time.sleep(120)
    print({"quota": "API Error: 429 Too Many Requests: rate limit exceeded, retry later",
           "login": "Invalid API key · Please run /login",
           "crash": "Segmentation fault (core dumped)"}[behaviour], file=sys.stderr, flush=True)
    sys.exit(1)


def _fill_disk(prefix: str) -> None:
    """``filler``: once (a marker in ``FAKE_ONCE_DIR``), write ``FAKE_FILL`` until its disk has no room left."""
    marker = Path(os.environ["FAKE_ONCE_DIR"]) / f"{prefix}-filler"
    if marker.exists():
        return
    marker.write_text("filled once")
    with contextlib.suppress(OSError), open(os.environ["FAKE_FILL"], "wb") as fill:
        while True:
            fill.write(b"\0" * (1 << 20))
            fill.flush()


def build(prefix: str, behaviour: str, retry: bool, run: str) -> str:
    if behaviour in ("staller", "quota", "login"):
        _fail_once(prefix, behaviour)
    if behaviour == "noter":  # an honest build whose story's line is in NOTES.md once (its fixes add none)
        with open("NOTES.md", "a+", encoding="utf-8") as notes:
            notes.seek(0)
            if f"- story {prefix}: a change made once\n" not in notes.read():
                notes.write(f"- story {prefix}: a change made once\n")
    if behaviour == "appender":  # each build appends to NOTES.md; killed once mid-build when FAKE_KILL says
        _write_module(prefix, correct=True)
        _append_note(prefix)
        _linger(prefix, run)
        _mark_review(prefix)
        return f"Implemented story {prefix} with its note."
    if behaviour == "runaway" and not retry:
        _run_away()
    if behaviour == "liar" and not retry:
        _mark_review(prefix)
        return "Implemented the story and all its tests pass."
    if behaviour == "stubborn":
        _write_module(prefix, correct=False)
        _mark_review(prefix)
        _git("add", "-A")
        _git("commit", "-q", "--allow-empty", "-m", f"wip {prefix}")
        return "Done, tests pass (they do not)."
    _write_module(prefix, correct=True)
    if behaviour == "breaker" and not retry:
        Path("calc_add.py").write_text("def add(a, b):\n    return a - b  # oops\n")
    elif Path("calc_add.py").exists() and "oops" in Path("calc_add.py").read_text():
        Path("calc_add.py").write_text("def add(a, b):\n    return a + b\n")
    _kill_point(prefix, "build")
    _mark_review(prefix)
    _git("add", "-A")
    _git("commit", "-q", "-m", f"feat: story {prefix}")
    if behaviour == "filler":
        _fill_disk(prefix)
    return f"Implemented story {prefix} with its test."


def _main_status() -> str | None:
    """``git status --porcelain`` of the main checkout (``FAKE_MAIN``), as the agent sees it while it works."""
    main = os.environ.get("FAKE_MAIN")
    if not main:
        return None
    return subprocess.run(["git", "-C", main, "status", "--porcelain"], capture_output=True, text=True).stdout


def main() -> int:
    argv = sys.argv[1:]
    prompt = sys.stdin.read()
    config = json.loads(Path(argv[argv.index("--mcp-config") + 1]).read_text())
    server = config["mcpServers"]["stepline"]
    mcp = Mcp(server["url"], server.get("headers") or {})
    step = mcp.call("get_step", {})
    hints = step.get("hints") or {}
    stage, story = hints.get("stage"), str(hints.get("story") or "")
    prefix = "-".join(story.split("-")[:2])
    with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"story": story, "stage": stage, "step": step["step_id"], "run": step["run_id"],
                              "layer": hints.get("layer"), "cwd": os.getcwd(), "main_status": _main_status(),
                              "config": argv[argv.index("--mcp-config") + 1],
                              "prompt": prompt,
                              "told": prompt.split("## What failed last time (fix it)", 1)[1].split("##")[0].strip()
                              if "## What failed last time" in prompt else None})
                  + "\n")
    if stage == "build":
        time.sleep(float(json.loads(os.environ.get("FAKE_BUILD_DELAY", "{}")).get(prefix, 0)))
        if wait_for := json.loads(os.environ.get("FAKE_BUILD_WAIT", "{}")).get(prefix):
            deadline = time.monotonic() + 600
            while not Path(wait_for).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        behaviour = json.loads(os.environ.get("FAKE_SPRINT", "{}")).get(prefix, "honest")
        summary = build(prefix, behaviour, retry="What failed last time" in prompt, run=step["run_id"])
        if behaviour == "reporter":  # its report through stepline's write_output, as a dev agent's notes
            report = f"REPORT-{prefix}.md"
            written = mcp.call("write_output", {"content": f"report of story {prefix}\n", "path": report,
                                                "mode": "replace"})
            with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
                log.write(json.dumps({"story": story, "stage": "report", "written": written,
                                      "here": Path(report).is_file(),
                                      "in_main": (Path(os.environ["FAKE_MAIN"]) / report).exists()}) + "\n")
    else:
        _kill_point(prefix, "review", hints.get("layer"), step["run_id"])
        behaviour = json.loads(os.environ.get("FAKE_SPRINT", "{}")).get(prefix)
        if behaviour == "runaway-reviewer":
            _run_away()
        if behaviour == "quota-reviewer":
            _fail_once(prefix, "quota")
        if behaviour == "crash-reviewer":
            _fail_once(prefix, "crash")
        if behaviour == "stale-rebase-reviewer":  # what a rebase killed as it began leaves: git cannot read it
            state = subprocess.run(["git", "rev-parse", "--git-path", "rebase-merge"], capture_output=True, text=True)
            Path(state.stdout.strip()).mkdir(parents=True, exist_ok=True)
        reports = json.loads(os.environ.get("FAKE_REVIEW", "{}"))
        summary = reports.get(f"{prefix}:{hints.get('layer')}:{step['step_id']}",
                              reports.get(f"{prefix}:{hints.get('layer')}", "none"))
    mcp.call("finish", {"summary": summary})
    session = f"fake-{step['step_id']}"
    for event in ({"type": "system", "subtype": "init", "session_id": session},
                  {"type": "result", "subtype": "success", "is_error": False, "result": summary,
                   "session_id": session, "total_cost_usd": 0.0,
                   "usage": {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 500}}):
        print(json.dumps(event), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
