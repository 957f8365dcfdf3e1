"""bmm create-product-brief run for real: scripted end to end, just-in-time hand-over, and a SIGKILL mid-run."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from stepline import Engine
from stepline.bmad import install_bmad
from stepline.executors import Executor, StepRequest, StepSession
from stepline.executors._dryrun import DryRunExecutor
from stepline.families import load_workflow
from stepline.formats._frontmatter import read_frontmatter, read_frontmatter_file
from stepline.model import Event, Run

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.0.0-alpha.23"
SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "product-brief.script.yaml"
BRIEF = Path("_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md")
CHAIN = ["step-01-init", "step-02-vision", "step-03-users", "step-04-metrics", "step-05-scope", "step-06-complete"]

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not CORPUS.is_dir(), reason="shared/corpus is not available"),
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus installed once; each test copies it."""
    root = tmp_path_factory.mktemp("installed") / "brief"
    install_bmad(CORPUS, root)
    (root / "docs").mkdir()
    (root / "docs" / "brainstorming-session.md").write_text("# Brainstorming\n\nTea by post.\n", encoding="utf-8")
    return root


@pytest.fixture
def project(installed: Path, tmp_path: Path) -> Path:
    """A private copy of the installed project."""
    root = tmp_path / "brief"
    shutil.copytree(installed, root)
    return root.resolve()


def brief_of(project: Path) -> Path:
    (found,) = (project / "_bmad-output" / "planning-artifacts").glob("product-brief-*.md")
    return found


def run_in_process(project: Path, executor: Any = "scripted", listeners: list[Any] | None = None) -> Run:
    options = {"script": str(SCRIPT)} if executor == "scripted" else {}
    engine = Engine(project_root=project, executor=executor, executor_options=options, mode="yolo",
                    listeners=listeners)
    return asyncio.run(engine.start(load_workflow(project / BRIEF, project_root=project)))


def test_the_brief_is_built_step_by_step(project: Path) -> None:
    """Each step appends its section and the runtime grows stepsCompleted 1..6 as each step completes."""
    seen: list[list[int]] = []

    def listener(event: Event) -> None:
        if event.type == "WorkflowStepCompleted" and event.step_id in CHAIN:
            seen.append(read_frontmatter_file(brief_of(project)).data["stepsCompleted"])

    run = run_in_process(project, listeners=[listener])
    assert run.status.value == "completed", run.error
    assert seen == [list(range(1, n + 1)) for n in range(1, 7)]
    text = brief_of(project).read_text(encoding="utf-8")
    fm = read_frontmatter(text)
    assert fm.data["lastStep"] == 6 and fm.data["inputDocuments"] == ["docs/brainstorming-session.md"]
    assert "date: { system-date }" in text and "# Product Brief: brief" in text
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Vision", "## Users", "## Success Metrics", "## MVP Scope", "## Done"]
    assert run.steps["step-01b-continue"].status.value == "skipped"


class Recorder(Executor):
    """The dry-run executor, keeping the content of every request."""

    name = "recorder"
    pure = True

    def __init__(self) -> None:
        self.contents: dict[str, str] = {}
        self.inner = DryRunExecutor()

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.kind == "work":
            self.contents[request.step_id] = request.content
        await self.inner.perform(request, session)


def test_a_step_never_receives_text_of_the_next_one(project: Path) -> None:
    """The content handed over for step N holds its own body and no line that only step N+1 has."""
    recorder = Recorder()
    run = run_in_process(project, executor=recorder)
    assert run.status.value == "completed", run.error
    files = {s.id: Path(str(s.meta["file"])) for s in run.workflow.steps if s.id in CHAIN}
    for current, following in itertools.pairwise(CHAIN):
        mine = files[current].read_text(encoding="utf-8")
        theirs = read_frontmatter(files[following].read_text(encoding="utf-8")).body
        unique = [line for line in theirs.splitlines() if len(line) > 25 and line not in mine]
        assert unique, following
        title = next(line for line in read_frontmatter(mine).body.splitlines() if line.startswith("# "))
        assert title in recorder.contents[current]  # its own text (the control prose is left out)
        leaked = [line for line in unique if line in recorder.contents[current]]
        assert not leaked, f"{current} was handed text of {following}: {leaked[:2]}"


def _cli(project: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "stepline.interfaces.cli", *args, "--project-root", str(project),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _completed(project: Path) -> set[str]:
    done: set[str] = set()
    for journal in (project / ".stepline" / "runs").glob("*/journal.jsonl"):
        for line in journal.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.endswith("}") else {}
            if record.get("type") == "WorkflowStepCompleted":
                done.add(record["step_id"])
    return done


@pytest.mark.slow
def test_killed_after_step_3_continues_at_step_4(project: Path, tmp_path: Path) -> None:
    """SIGKILL after step 3 completes; running again (document continuation) and `resume` both go on at step 4
    and end with the document an uninterrupted run writes."""
    reference = tmp_path / "reference"
    shutil.copytree(project, reference)
    assert run_in_process(reference).status.value == "completed"
    expected = brief_of(reference).read_text(encoding="utf-8")

    # Step 4 starts by reading a FIFO nobody writes: the killed run is held at a known point, not raced.
    os.mkfifo(project / "hold.fifo")
    script = yaml.safe_load(SCRIPT.read_text(encoding="utf-8"))
    script["steps"]["step-04-metrics"].insert(0, {"read": {"path": "hold.fifo"}})
    held = tmp_path / "held.yaml"
    held.write_text(yaml.safe_dump(script), encoding="utf-8")
    process = _cli(project, "run", str(project / BRIEF), "--script", str(held), "--yolo")
    deadline = time.monotonic() + 60
    while "step-03-users" not in _completed(project):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert read_frontmatter_file(brief_of(project)).data["stepsCompleted"] == [1, 2, 3]
    (run_dir,) = (project / ".stepline" / "runs").iterdir()
    (project / "hold.fifo").unlink()
    fresh = tmp_path / "fresh"  # a new run reads the document anew, so it may run in a copy
    shutil.copytree(project, fresh)

    again = _cli(fresh, "run", str(fresh / BRIEF), "--script", str(SCRIPT), "--yolo", "--json")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err.decode()
    summary = json.loads(out)
    started = [s["step_id"] for s in summary["steps"] if s["status"] == "completed"]
    assert started == ["workflow-init", "step-04-metrics", "step-05-scope", "step-06-complete"], summary
    assert brief_of(fresh).read_text(encoding="utf-8") == expected

    later = _cli(project, "resume", run_dir.name, "--script", str(SCRIPT))  # the killed run, where it ran
    out, err = later.communicate(timeout=60)
    assert later.returncode == 0, (out + err).decode()
    assert brief_of(project).read_text(encoding="utf-8") == expected
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()]
    resumed_at = next(i for i, e in enumerate(events) if e["type"] == "WorkflowResumed")
    after = [e["step_id"] for e in events[resumed_at:] if e["type"] == "WorkflowStepCompleted"]
    assert after == ["step-04-metrics", "step-05-scope", "step-06-complete"]
