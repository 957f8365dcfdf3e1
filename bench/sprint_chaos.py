"""Chaos for the sprint loop: N trials of ``stepline sprint run -j 4`` over four stories, each SIGKILLed at random
moments (the loop alone, or the loop and every agent supervisor it started, which leaves the agents running as
orphans), then ``stepline sprint resume``d — killed again at random up to ``--kills`` times — until a resume runs to
its end. Prints, per trial and in total, tried / held / broke, whether every story was committed exactly once, the
loops that hung (no end in 600 s: what each was doing is printed) and the trials left blocked on a question.

Usage: ``python bench/sprint_chaos.py [--trials 20] [--kills 3] [--seed 1] [--orphans 0.5]``

A trial held when, after its last resume: the resume exited 0; every story is committed exactly once on the
integration branch, which has no merge commit and whose checks pass; story 1-4's agent appends a line to NOTES.md
on each build (an edit that is not idempotent) and the line is there once; the checkout is clean but for the
board; no process of the project is left; no agent's private folder is left in the trial's temporary directory.
Everything but the agent is real: BMAD v6.11 installed from the corpus, git, worktrees, the verify command, the
merges; the agent is tests/sprint's fake (each build takes 0–1.5 s more, at random, to vary where kills land).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "sprint"
sys.path.insert(0, str(TESTS))  # sprint_kit: the tests' project (BMAD installed once per process)

from sprint_kit import ARTIFACTS, BMAD, git, make_project  # noqa: E402

KEYS = ("1-1-add", "1-2-sub", "1-3-mul", "1-4-div")


def _children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if int((proc / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _supervisors(pid: int) -> list[int]:
    return [child for child in _children(pid) if b"_supervisor.py" in _cmdline(child)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _left_in(root: Path) -> list[str]:
    """Processes whose working folder is in the project (an agent, what it started, a check)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(proc / "cwd").startswith(str(root)):
                stat = (proc / "stat").read_text().rpartition(")")[2].split()
                if stat[0] not in ("Z", "X"):
                    found.append(f"{proc.name} {_cmdline(int(proc.name))[:120]!r}")
        except OSError:
            continue
    return found


def _where(root: Path) -> str:
    """What a hung loop was doing: the loop log's last records, each unfinished run's last journal records, the
    processes in the project."""
    log = root / ".stepline" / "sprint" / "loop.jsonl"
    lines = [f"loop: {line}" for line in log.read_text().splitlines()[-6:]] if log.is_file() else []
    for journal in sorted((root / ".stepline" / "runs").glob("*/journal.jsonl")):
        records = journal.read_text(errors="replace").splitlines()
        if records and '"WorkflowCompleted"' not in records[-1]:
            lines += [f"{journal.parent.name}: {record[:300]}" for record in records[-4:]]
    return " | ".join([*lines, f"left: {_left_in(root)}"])


def _loop(root: Path, command: str, env: dict[str, str]) -> subprocess.Popen[str]:
    args = ["-j", "4", "--max-stories", "4"] if command == "run" else []
    return subprocess.Popen([sys.executable, "-m", "stepline.interfaces.cli", "sprint", command, *args, "-C",
                             str(root), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def trial(number: int, base: Path, rng: random.Random, kills: int, orphans: float) -> tuple[bool, str, set[str]]:
    """One trial; (held, what happened, its marks: ``once`` every story committed exactly once, ``hung`` a loop
    hung, ``blocked`` the last loop stopped on a question, exit 9)."""
    root = make_project(base / f"calc-{number}", isolation="worktree")
    private = base / f"tmp-{number}"
    private.mkdir()
    env = {**os.environ, "FAKE_LOG": str(base / f"agents-{number}.jsonl"), "CHECKS_LOG": str(base / "checks.log"),
           "FAKE_SPRINT": json.dumps({"1-4": "appender"}), "TMPDIR": str(private),
           "FAKE_BUILD_DELAY": json.dumps({key[:3]: round(rng.uniform(0, 1.5), 2) for key in KEYS}),
           "GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.com",
           "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.com",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    said: list[str] = []
    marks: set[str] = set()
    command, killed = "run", 0
    while True:
        loop = _loop(root, command, env)
        if killed < kills:
            when = rng.uniform(0.3, 4.5)
            deadline = time.monotonic() + when
            while loop.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if loop.poll() is None:
                orphaned = rng.random() < orphans
                supervisors = _supervisors(loop.pid) if orphaned else []
                for pid in supervisors:  # their agents go on with no one to stop them
                    os.kill(pid, signal.SIGKILL)
                loop.send_signal(signal.SIGKILL)
                loop.communicate()
                killed += 1
                said.append(f"killed at {when:.1f}s" + (f" with {len(supervisors)} supervisor(s)" if orphaned else ""))
                command = "resume"
                continue
        try:
            _, err = loop.communicate(timeout=600)
        except subprocess.TimeoutExpired:  # a hang: what it was doing, then it is stopped
            said.append(f"{command} HUNG: {_where(root)}")
            marks.add("hung")
            loop.kill()
            _, err = loop.communicate()
        said.append(f"{command} exited {loop.returncode}")
        if command == "resume" and loop.returncode == 3 and "no sprint loop was started here" in err:
            command = "run"  # killed before the loop had started anything: a person runs it again
            continue
        break
    problems = []
    if loop.returncode == 9:
        marks.add("blocked")
    if loop.returncode != 0:
        problems.append(f"the last {command} exited {loop.returncode}: {err.strip().splitlines()[-1:]}")
    log = subprocess.run(["git", "-C", str(root), "log", "--format=%(trailers:key=Stepline-Story,valueonly)"],
                         capture_output=True, text=True)
    commits = Counter(log.stdout.split())
    if log.returncode != 0:
        problems.append(f"git log fails on the integration branch: {log.stderr.strip()[:200]}")
    elif commits != Counter(dict.fromkeys(KEYS, 1)):
        problems.append(f"story commits {dict(commits)}")
    else:
        marks.add("once")
    if git(root, "rev-list", "--count", "--merges", "HEAD").strip() != "0":
        problems.append("merge commits on the integration branch")
    notes = subprocess.run(["git", "-C", str(root), "show", "HEAD:NOTES.md"], capture_output=True, text=True).stdout
    if notes != "- story 1-4: a change made once\n":
        problems.append(f"NOTES.md is {notes!r}")
    if git(root, "status", "--porcelain", "--", ".", f":(exclude){ARTIFACTS}").strip():
        problems.append("the checkout is not clean")
    checks = subprocess.run([sys.executable, "-m", "unittest", "discover", "-q", "-s", "tests"], cwd=root,
                            capture_output=True, text=True)
    if checks.returncode != 0:
        problems.append("the integration branch's checks fail")
    if left := _left_in(root):
        problems.append(f"processes left: {left}")
    if folders := sorted(p.name for p in private.glob("stepline-agent-*")):
        problems.append(f"agent folders left: {folders}")
    return not problems, "; ".join(said + problems), marks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per trial at most (then a resume runs out)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--orphans", type=float, default=0.5, help="the share of kills that take the supervisors too")
    args = parser.parse_args()
    if not BMAD.is_dir():
        print(f"no BMAD release at {BMAD}: the chaos needs the corpus", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="sprint-chaos-"))
    held = 0
    marks: Counter[str] = Counter()
    try:
        for number in range(1, args.trials + 1):
            started = time.monotonic()
            ok, said, marked = trial(number, base, rng, rng.randint(1, args.kills), args.orphans)
            held += ok
            marks.update(marked)
            print(f"trial {number:2d}: {'held ' if ok else 'BROKE'} {time.monotonic() - started:5.1f}s  "
                  f"once: {'yes' if 'once' in marked else 'NO '}  {said}", flush=True)
    finally:
        if held == args.trials:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"the trials' projects are kept in {base}", file=sys.stderr)
    print(f"tried {args.trials}, held {held}, broke {args.trials - held}; every story committed exactly once in "
          f"{marks['once']}; hung {marks['hung']}; blocked {marks['blocked']} (-j 4, 4 stories, seed {args.seed})")
    return 0 if held == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
