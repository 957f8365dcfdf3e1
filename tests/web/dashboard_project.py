"""A project with runs of every kind the dashboard shows, built by the engine itself; a client of its app."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from stepline import Engine
from stepline.engine import HumanChannel, RuntimeConfig
from stepline.families import load_workflow
from stepline.interfaces.web import create_app

TOKEN = "test-token-0123456789abcdef"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NOTES = "# Release 2.0\n\n## Highlights\n\n- **Faster** resume\n\n<script>alert('x')</script>\n"


def evidence(record_id: str, level: str, **extra: Any) -> dict[str, Any]:
    """A QUINT evidence record for recordEvidence."""
    return {"id": record_id, "claim": "the notes match the change log", "level": level, "source": "review",
            "date": "2026-01-01", "valid_until": "2099-12-31", "congruence": "CL2", "reliability": 0.9,
            "wlnk": None, "carrier_ref": "docs/notes.md", **extra}


GATED = {"id": "release", "steps": [
    {"id": "draft", "name": "Draft the notes", "body": "Draft.", "outputs": ["docs/notes.md"]},
    {"id": "announce", "name": "Announce", "body": "Announce.", "human_gate": "required",
     "outputs": ["docs/announce.txt"]},
]}
GATED_SCRIPT = {"steps": {
    "draft": [{"write_output": {"content": NOTES, "mode": "replace"}}, {"finish": {"summary": "drafted"}}],
    "announce": [{"write_output": {"content": "2.0 is out\n", "mode": "replace"}}, {"finish": {"summary": "sent"}}],
}}
EVIDENCED = {"id": "checked", "steps": [
    {"id": "review", "name": "Review", "body": "Review.", "outputs": ["docs/review.md"], "evidence": "L1"},
]}
EVIDENCED_SCRIPT = {"steps": {"review": [
    {"write_output": {"content": "# Review\n\nAll good.\n", "mode": "replace"}},
    {"call_tool": {"name": "recordEvidence", "args": evidence("ev-strong", "L1")}},
    {"call_tool": {"name": "recordEvidence",
                   "args": evidence("ev-old", "L0", date="2019-01-01", valid_until="2020-01-01")}},
    {"finish": {"summary": "reviewed"}},
]}}
ASKING = {"id": "survey", "steps": [{"id": "colour", "name": "Pick a colour", "body": "Ask."}]}
ASKING_SCRIPT = {"steps": {"colour": [{"ask": {"question": "Which colour?", "choices": ["red", "blue"]}},
                                      {"finish": {"summary": "asked"}}]}}


def start_run(project: Path, workflow: dict[str, Any], script: dict[str, Any], name: str) -> str:
    """Run ``workflow`` with the scripted executor, non-interactive (a gate blocks it); return the run id."""
    (project / f"{name}.yaml").write_text(yaml.safe_dump(workflow), encoding="utf-8")
    (project / f"{name}.script.yaml").write_text(yaml.safe_dump(script), encoding="utf-8")
    engine = Engine(project_root=project, executor="scripted", mode="non-interactive",
                    executor_options={"script": str(project / f"{name}.script.yaml")},
                    human=HumanChannel(interactive=False))
    return asyncio.run(engine.start(load_workflow(project / f"{name}.yaml"))).run_id


@dataclass
class Project:
    """The runs of the test project, by what they show."""

    root: Path
    blocked: str
    completed: str
    question: str
    damaged_journal: str
    damaged_manifest: str
    child: str

    @property
    def runs(self) -> Path:
        return self.root / ".stepline" / "runs"

    @property
    def question_gate(self) -> str:
        """The id of the question the ``question`` run waits on."""
        gates = read_json(self.runs / self.question / "gates.json")
        return str(gates[0]["gate_id"])


def copy_run(runs: Path, run_id: str, new_id: str) -> Path:
    """A copy of a run under another id (every record rewritten to it)."""
    target = runs / new_id
    shutil.copytree(runs / run_id, target)
    for name in ("journal.jsonl", "manifest.json"):
        path = target / name
        path.write_bytes(path.read_bytes().replace(run_id.encode(), new_id.encode()))
    (target / "lock").unlink(missing_ok=True)
    return target


def build_project(root: Path) -> Project:
    """Runs: blocked at a human gate, completed with evidence, blocked on a question, two damaged ones; and a
    CCW session."""
    root.mkdir(parents=True, exist_ok=True)
    blocked = start_run(root, GATED, GATED_SCRIPT, "gated")
    completed = start_run(root, EVIDENCED, EVIDENCED_SCRIPT, "checked")
    question = start_run(root, ASKING, ASKING_SCRIPT, "asking")
    runs = root / ".stepline" / "runs"
    broken = copy_run(runs, completed, "run-20200101000000-0000dead")
    lines = (broken / "journal.jsonl").read_bytes().split(b"\n")
    lines[2] = b'{"seq": 3, "this is": "not a record"}'
    (broken / "journal.jsonl").write_bytes(b"\n".join(lines))
    unreadable = copy_run(runs, completed, "run-20200101000000-0000beef")
    (unreadable / "manifest.json").write_text("{not json", encoding="utf-8")
    child = copy_run(runs, completed, "run-20990101000000-0000c41d")  # as if the blocked run had invoked it
    manifest = read_json(child / "manifest.json")
    manifest["parent_run_id"] = blocked
    (child / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    shutil.copytree(FIXTURES / "ccw" / "project-flat" / ".workflow", root / ".workflow")
    session = root / ".workflow" / "active" / "WFS-report-export"
    (session / ".summaries").mkdir(exist_ok=True)
    (session / ".summaries" / "IMPL-001-summary.md").write_text("# IMPL-001\n\nDid **the thing**.\n", encoding="utf-8")
    return Project(root=root, blocked=blocked, completed=completed, question=question,
                   damaged_journal=broken.name, damaged_manifest=unreadable.name, child=child.name)


def client_for(project: Project) -> TestClient:
    """A client of the project's dashboard (no credentials)."""
    app = create_app(project.root, RuntimeConfig(), TOKEN)
    return TestClient(app, base_url="http://127.0.0.1:8765")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_slow_workflow(root: Path, steps: int = 3, pause: float = 0.4, *, changes: bool = False) -> Path:
    """A workflow whose steps each run ``sleep pause`` (a shell tool, allowed without approval by the project's
    config) and whose last step waits at a human gate: a run another process drives, slowly. ``changes``: each
    step also adds a line to CHANGES.md, which the gated step says it ships (writing RELEASE.md)."""
    config = root / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "runtime.yaml").write_text(yaml.safe_dump({"tools": {"risk_policy": {"high_requires_approval": False}}}),
                                         encoding="utf-8")
    edit = " && echo '- change {n}' >> CHANGES.md" if changes else ""
    ship = ("Tag the release and publish **CHANGES.md** to the users.\n\n- check the changes below\n- then tag"
            if changes else "Ship.")
    spec = {"id": "slow", "steps": [
        *({"id": f"work-{n}", "name": f"Work {n}", "body": "Work.",
           "tools": [{"name": "shell", "args": {"command": f"sleep {pause}{edit.format(n=n)}"}, "required": True}]}
          for n in range(1, steps + 1)),
        {"id": "ship", "name": "Ship it", "body": ship, "human_gate": "required",
         **({"outputs": ["RELEASE.md"]} if changes else {})},
    ]}
    path = root / "slow.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def stepline_command(root: Path, *args: str) -> list[str]:
    """The command line of ``stepline ARGS -C root`` in this interpreter."""
    return [sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(root)]


class Server:
    """``stepline serve`` in a process of its own on a free port of 127.0.0.1; stop it with :meth:`stop`."""

    def __init__(self, root: Path, *extra: str) -> None:
        self.process = subprocess.Popen(stepline_command(root, "serve", "--port", "0", *extra),
                                        stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        self.lines: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.lines.append(line.strip())
            found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
            if found:
                self.url = found.group(1)
                if "--token" not in extra:
                    self.lines.append(self.process.stderr.readline().strip())  # the token line
                return
        self.stop()
        raise AssertionError(f"stepline serve did not start: {self.lines}")

    def stop(self) -> None:
        """Stop the server (Ctrl-C) and wait for it; :attr:`lines` then holds all it printed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None and not self.process.stderr.closed:
            self.lines += [line.rstrip() for line in self.process.stderr]  # what it said after it started
            self.process.stderr.close()
