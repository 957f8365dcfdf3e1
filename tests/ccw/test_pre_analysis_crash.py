"""A CCW task's pre_analysis command is journaled as an intent before it starts, and a resume that finds the
intent without its result never runs the command again silently (issue 28 item 1): it asks at the gate
``rerun:shell:<call>``, as the step protocol's ``call_tool`` does. SIGKILL `stepline ccw execute` while
commands that append to a file run, resume, and count the appends."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from ccw.test_ccw_crash import generate

#: STEPLINE_CCW_KILL_TASKS=30 runs the issue's 30-task session (a kill per new command, ~30 kills).
TASKS = int(os.environ.get("STEPLINE_CCW_KILL_TASKS", "4"))


def _session(project: Path) -> Path:
    """A session whose every task first appends its id to effects.log, then takes a moment."""
    session_dir = generate(project, TASKS, seed=5, max_deps=1)
    for path in (session_dir / ".task").glob("IMPL-*.json"):
        task = json.loads(path.read_text(encoding="utf-8"))
        task.setdefault("flow_control", {})["pre_analysis"] = [{
            "step": "mark", "action": "append", "output_to": "mark", "on_error": "fail",
            "command": f"bash(echo {task['id']} >> effects.log && sleep 0.4)"}]
        path.write_text(json.dumps(task, indent=2), encoding="utf-8")
    return session_dir


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)],
                          capture_output=True, text=True, timeout=120)


def _execute(project: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "stepline.interfaces.cli", "ccw", "execute", "-y", "--executor",
                             "dry-run", "-q", "-C", str(project), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _appends(project: Path) -> Counter[str]:
    log = project / "effects.log"
    return Counter(log.read_text(encoding="utf-8").split()) if log.exists() else Counter()


def _pending_rerun_gates(project: Path) -> list[tuple[str, str]]:
    shown = _cli(project, "gates", "--json")
    assert shown.returncode == 0, shown.stderr
    return [(gate["run_id"], gate["gate_id"]) for gate in json.loads(shown.stdout)
            if gate["gate_id"].startswith("rerun:shell:")]


def _kill_orphans(project: Path) -> None:
    """The killed process's command keeps running in its own session: let it end before counting (a child
    forked just before the kill has not exec'd its shell yet: give it a moment to show)."""
    time.sleep(0.5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = subprocess.run(["pgrep", "-f", "echo IMPL-.* >> effects.log"], capture_output=True, text=True)
        mine = [pid for pid in alive.stdout.split() if _cwd(int(pid)) == project]
        if not mine:
            return
        time.sleep(0.05)


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def test_a_killed_pre_analysis_command_is_never_run_twice(project: Path) -> None:
    _session(project)
    rng = random.Random(28)
    kills = gated = 0
    finished = False
    while not finished:
        proc = _execute(project)
        deadline = time.monotonic() + 10
        before = sum(_appends(project).values())
        while sum(_appends(project).values()) == before and proc.poll() is None and time.monotonic() < deadline:
            assert kills < 3 * TASKS, "the session never finished"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))  # inside the command, mostly: its append done, its result not journaled
        proc.send_signal(signal.SIGKILL)
        code = proc.wait()
        kills += code == -signal.SIGKILL
        finished = code == 0
        assert code in (0, 9, -signal.SIGKILL), proc.stderr.read() if proc.stderr else code
        _kill_orphans(project)
        assert max(_appends(project).values(), default=0) <= 1, _appends(project)
        gates = _pending_rerun_gates(project)
        gated += len(gates)
        for run_id, gate_id in gates:  # decided as a person who looks would: reject if it ran, else approve
            task = gate_id.split(":")[2].split("/")[0]
            decision = "reject" if _appends(project)[task] else "approve"
            decided = _cli(project, decision, run_id, gate_id, "--by", "test")
            assert decided.returncode == 0, decided.stderr
    assert kills >= 1 and gated >= kills, (kills, gated)  # every kill left a command without its result
    print(f"\n{TASKS} tasks: {kills} SIGKILLs, {gated} rerun gates, commands run twice: "
          f"{sum(count > 1 for count in _appends(project).values())}")
    assert _appends(project) == Counter({f"IMPL-{k}": 1 for k in range(1, TASKS + 1)})


def test_a_resume_asks_before_running_an_interrupted_command_again(project: Path) -> None:
    """The intent is journaled before the command starts; killed mid-command, the next execute blocks (exit 9)
    at the rerun gate without running it; approved, it runs again (once more, as the person chose)."""
    _session(project)
    proc = _execute(project, "-j", "1")  # one task at a time: the kill interrupts exactly one command
    deadline = time.monotonic() + 10
    while not _appends(project) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _kill_orphans(project)
    first = _appends(project)
    assert set(first.values()) == {1}
    again = _execute(project, "-j", "1")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 9, (out, err)  # the other tasks ran; the interrupted one waits for a person
    assert max(_appends(project).values()) == 1
    gates = _pending_rerun_gates(project)
    assert sorted(gate.split("/")[0] for _, gate in gates) == sorted(f"rerun:shell:{task}" for task in first)
    for run_id, gate_id in gates:
        approved = _cli(project, "approve", run_id, gate_id, "--by", "test")
        assert approved.returncode == 0, approved.stderr
    done = _execute(project)
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, (out, err)
    assert _appends(project) == Counter({f"IMPL-{k}": 2 if f"IMPL-{k}" in first else 1 for k in range(1, TASKS + 1)})


def test_an_approved_rerun_killed_again_is_asked_about_again(project: Path) -> None:
    """The approval at `rerun:shell:<call>` covers one run: SIGKILLed during the approved rerun, the next
    execute blocks (exit 9) at `rerun:shell:<call>#2` without running the command a third time."""
    session_dir = generate(project, 1, seed=5, max_deps=0)
    held = "echo IMPL-1 >> effects.log && while [ ! -e go ]; do sleep 0.02; done && echo end >> ended.log"
    task_file = session_dir / ".task" / "IMPL-1.json"
    task = json.loads(task_file.read_text(encoding="utf-8"))
    task.setdefault("flow_control", {})["pre_analysis"] = [{
        "step": "mark", "action": "append", "output_to": "mark", "on_error": "fail", "command": f"bash({held})"}]
    task_file.write_text(json.dumps(task, indent=2), encoding="utf-8")

    def kill_while_held(appended: int) -> None:
        proc = _execute(project, "-j", "1")
        deadline = time.monotonic() + 60
        while sum(_appends(project).values()) < appended:
            assert proc.poll() is None and time.monotonic() < deadline, "the command never ran"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        (project / "go").touch()  # the command, in a session of its own, ends
        while not (project / "ended.log").exists() or len((project / "ended.log").read_text().split()) < appended:
            time.sleep(0.02)

    kill_while_held(1)
    (project / "go").unlink()
    blocked = _execute(project, "-j", "1")
    assert blocked.wait(timeout=120) == 9
    [(run_id, gate)] = _pending_rerun_gates(project)
    assert _cli(project, "approve", run_id, gate, "--by", "test").returncode == 0
    kill_while_held(2)  # the approved rerun, killed too

    again = _execute(project, "-j", "1")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 9, (out, err)
    assert _appends(project) == Counter({"IMPL-1": 2})  # asked, not run
    assert _pending_rerun_gates(project) == [(run_id, f"{gate}#2")]
