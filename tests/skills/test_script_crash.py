"""A skill's script killed with stepline while it runs (SIGKILL of a real `stepline run`), then `stepline resume`:
memlog.py's effect is read back from `.memlog.md` (there: recorded done; not there: run again), so its entry is
there exactly once; a script whose effect cannot be read back is not run again blindly (one line, exit 8)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import fake_openai
from fakes.policy import Call, Request
from stepline.model import Event
from stepline.store import read_journal

from .conftest import CORPUS_V611
from .test_openai import BUILD, MEMLOG, PRD, WORKSPACE, SkillPolicy

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("crash_child.py")
SLOW = Path(__file__).resolve().parent / "fixtures" / "slow" / "slow_script.py"
NOTE = "_bmad/scripts/note.py"
ENTRY = "- (event) section-finalize done"  # Finalize's memlog append


@pytest.fixture(scope="module")
def server() -> Iterator[fake_openai.FakeOpenAI]:
    """The fake OpenAI server, started once for the module."""
    with fake_openai.FakeOpenAI().running() as running:
        yield running


class NotePolicy(SkillPolicy):
    """The fake model runs the fixture's note.py where a step names it."""

    def _first(self, request: Request, tools: dict[str, dict[str, Any]]) -> list[Call]:
        calls = super()._first(request, tools)
        if request.kind == "work" and "note.py" in request.parts.get("Step instructions", ""):
            calls.append(("call_tool", {"name": "runScript", "args": {"script": NOTE, "args": ["--text", "hello"]}}))
        return calls


def _slow(project: Path, script: str, mode: str) -> Path:
    """Put the slow stand-in in place of ``script`` (the real one beside it); return the scripts folder."""
    target = project / script
    target.rename(target.with_name(target.stem + "_real.py"))
    shutil.copy(SLOW, target)
    (target.parent / "slow-mode").write_text(mode, encoding="utf-8")
    return target.parent


def _env(server: fake_openai.FakeOpenAI) -> dict[str, str]:
    return {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test",
            "STEPLINE_OPENAI_MODEL": "fake"}


def _kill_while_running(project: Path, server: fake_openai.FakeOpenAI, marker: Path, skill: Path,
                        *, with_script: bool) -> str:
    """Start `stepline run SKILL`, SIGKILL it once the script says it is running (and the script's process
    group too when ``with_script``: a machine that went down); return the run id."""
    proc = subprocess.Popen([sys.executable, str(CHILD), "-", "0", "--", "run", str(skill), "--executor", "openai",
                             "--yolo", "-C", str(project), "-q"], env=_env(server), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), ("the script never ran", proc.poll(), proc.communicate(timeout=30))
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    if with_script:
        os.killpg(os.getpgid(int(marker.read_text(encoding="utf-8"))), signal.SIGKILL)
    runs = [p.name for p in (project / ".stepline" / "runs").iterdir() if p.name.startswith("run-")]
    assert len(runs) == 1, runs
    return runs[0]


def _resume(project: Path, server: fake_openai.FakeOpenAI, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), "-", "0", "--", "resume", run_id, "-C", str(project), "-q"],
                          capture_output=True, text=True, timeout=180, env=_env(server))


def _events(project: Path, run_id: str) -> list[Event]:
    return list(read_journal(project / ".stepline" / "runs" / run_id / "journal.jsonl"))


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
@pytest.mark.parametrize(("mode", "with_script", "runs", "note"), [
    ("before append 60", True, 2, "its effect is not on disk: run again"),
    ("after append 60", True, 1, "its effect is on disk: recorded done, not rerun"),
    ("before append 2", False, 1, "its effect is on disk: recorded done, not rerun"),
], ids=["killed-before-its-entry", "killed-after-its-entry", "script-outlives-stepline"])
def test_memlog_append_killed_mid_run_lands_once(v611: Path, server: fake_openai.FakeOpenAI, mode: str,
                                                 with_script: bool, runs: int, note: str) -> None:
    """bmad-prd's memlog append, killed while memlog.py runs: after `stepline resume` the entry is in
    .memlog.md once, and memlog.py ran again only when its entry was not there (a script that outlived
    stepline is waited for first)."""
    server.reset()
    server.responder = fake_openai.responder(SkillPolicy())
    scripts = _slow(v611, MEMLOG, mode)
    run_id = _kill_while_running(v611, server, scripts / "memlog.running", PRD, with_script=with_script)
    (scripts / "slow-mode").unlink()
    resumed = _resume(v611, server, run_id)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    memlog = (v611 / WORKSPACE / ".memlog.md").read_text(encoding="utf-8")
    assert memlog.count(ENTRY) == 1, memlog
    assert (scripts / "memlog.calls").read_text(encoding="utf-8").split() == ["init"] + ["append"] * runs
    events = _events(v611, run_id)
    assert events[-1].type == "WorkflowCompleted"
    appends = [e.data for e in events if e.type == "CallRecorded" and e.data["op"] == "call_tool"
               and e.data["args"]["args"].get("args", [""])[0] == "append"]
    assert len(appends) == 1 and appends[0]["result"]["after_crash"].endswith(note)
    assert appends[0]["result"]["status"] == "ok"
    started = [e.data["args"] for e in events if e.type == "CallStarted" and e.data["op"] == "call_tool"]
    # a call run again journals its intent again first, its reruns counted (a crash during it is asked anew)
    assert [s["effect_before"]["command"] for s in started] == ["init"] + ["append"] * runs
    assert [s.get("reruns") for s in started] == [None, None, 1][:runs + 1]
    assert started[1]["effect_before"]["entry"] == ENTRY
    results = json.loads((v611 / ".stepline" / "runs" / run_id / "tool_results.json").read_text(encoding="utf-8"))
    assert sum(1 for r in results if r["args"].get("args", [""])[0] == "append") == 1


@pytest.mark.parametrize(("decide", "runs"), [("approve", 2), ("reject", 1)])
def test_a_script_whose_effect_cannot_be_checked_waits_for_a_person(mini: Path, server: fake_openai.FakeOpenAI,
                                                                    decide: str, runs: int) -> None:
    """A skill's script with no way to read its effect back, killed while it runs: the resume does not run it
    again but blocks the run (exit 9) at a gate naming the tool; approved, the script runs again; rejected (it
    had finished), it does not; either way the run then completes."""
    server.reset()
    server.responder = fake_openai.responder(NotePolicy())
    scripts = _slow(mini, NOTE, "before * 60")
    skill = mini / "_bmad" / "mini" / "tiny-doc"
    run_id = _kill_while_running(mini, server, scripts / "note.running", skill, with_script=True)
    (scripts / "slow-mode").unlink()
    blocked = _resume(mini, server, run_id)
    assert blocked.returncode == 9, (blocked.stdout, blocked.stderr)
    assert "Traceback" not in blocked.stderr
    said = " ".join((blocked.stdout + blocked.stderr).split())  # the terminal wraps long lines
    assert "tool 'runScript _bmad/scripts/note.py' was running when the process stopped and its effect cannot be " \
           "checked" in said, said
    assert (scripts / "note.calls").read_text(encoding="utf-8").split() == ["--text"]
    found = re.search(r"\(gate (rerun:runScript:on-activation/\S+)\)", said)
    assert found is not None, said
    gate = found[1]
    answered = subprocess.run([sys.executable, str(CHILD), "-", "0", "--", decide, run_id, gate, "--by", "tester",
                               "-C", str(mini)],
                              capture_output=True, text=True, timeout=60, env=_env(server))
    assert answered.returncode == 0, (answered.stdout, answered.stderr)
    resumed = _resume(mini, server, run_id)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    assert (scripts / "note.calls").read_text(encoding="utf-8").split() == ["--text"] * runs
    notes = mini / "notes.txt"
    assert (notes.read_text(encoding="utf-8") if notes.exists() else "") == "hello\n" * (runs - 1)
    recorded = [e.data["result"] for e in _events(mini, run_id) if e.type == "CallRecorded" and
                e.data["op"] == "call_tool"]
    assert len(recorded) == 1 and f"{decide.rstrip('e')}ed at gate {gate}" in recorded[0]["after_crash"]


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_a_step_file_skill_killed_mid_run_resumes_at_its_first_unfinished_step(
        v611: Path, server: fake_openai.FakeOpenAI) -> None:
    """bmad-build killed (SIGKILL) as step-03-implement starts: `stepline resume` continues there; the step files
    before it are not handed over again, and every step file of the chain is handed over once."""
    server.reset()
    server.responder = fake_openai.responder(SkillPolicy())
    first = subprocess.run([sys.executable, str(CHILD), '"step_id":"step-03-implement"', "1", "--", "run",
                            str(BUILD), "--executor", "openai", "--yolo", "-C", str(v611), "-q"],
                           capture_output=True, text=True, timeout=180, env=_env(server))
    assert first.returncode == -signal.SIGKILL, (first.stdout, first.stderr)
    run_id = next(p.name for p in (v611 / ".stepline" / "runs").iterdir() if p.name.startswith("run-"))
    before = _events(v611, run_id)
    resumed = _resume(v611, server, run_id)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    events = _events(v611, run_id)
    assert events[-1].type == "WorkflowCompleted"
    handed = [e.step_id for e in events if e.type == "CallRecorded"
              and e.data["op"] == "handover" and e.data["args"]["role"] == "step"]
    # once per visit (a step goes on after a route it took as a visit of its own: ``@2``)
    assert handed == ["step-01-clarify-and-route", "step-01-clarify-and-route@2", "step-02-plan", "step-03-implement",
                      "step-03-implement@2", "step-04-review", "step-05-present", "step-05-present@2"]
    after = events[len(before):]
    assert not [e for e in after if e.type == "WorkflowStepStarted" and e.step_id in (
        "activate", "on-activation", "step-01-clarify-and-route", "step-02-plan")]
    assert [e.step_id for e in after if e.type == "WorkflowStepCompleted"][:1] == ["step-03-implement"]
