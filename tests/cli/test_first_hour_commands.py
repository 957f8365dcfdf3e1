"""What a new user meets in the first hour with the CLI: deciding without --by, answering (a wrong option refused at
once, answer and go on in one command), the terminal prompt, doctor over every run, validate --json's counts,
the answers `show` prints, and a `diff` that never says None."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stepline.engine import terminal_prompt
from stepline.executors import MenuOption
from stepline.interfaces.cli._app import run_cli

GATED = """id: release
steps:
  - id: draft
    body: Draft.
    outputs: [docs/notes.md]
  - id: announce
    body: Announce.
    human_gate: required
    outputs: [docs/announce.txt]
"""
ASKING = """id: survey
steps:
  - id: colour
    name: Pick a colour
    body: Ask.
    outputs: [docs/colour.md]
"""
SCRIPT = """steps:
  draft: [{write_output: {content: "notes\\n"}}, {finish: {summary: drafted}}]
  announce: [{write_output: {content: "out\\n"}}, {finish: {summary: sent}}]
  colour:
    - ask: {question: "Which colour?", choices: [red, blue]}
    - write_output: {content: "chosen\\n"}
    - finish: {summary: asked}
"""
MICROFILE = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "project"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "gated.yaml").write_text(GATED, encoding="utf-8")
    (root / "asking.yaml").write_text(ASKING, encoding="utf-8")
    (root / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    return root.resolve()


def cli(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_cli([*args, "-C", str(project)])
    out, err = capsys.readouterr()
    return code, out, err


def blocked(capsys: pytest.CaptureFixture[str], project: Path, workflow: str) -> str:
    code, out, _ = cli(capsys, project, "run", workflow, "--script", "script.yaml", "--non-interactive", "-q")
    assert code == 9, out
    return re.search(r"run (run-\S+) blocked", out).group(1)  # type: ignore[union-attr]


def approvals(project: Path, run_id: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = json.loads((project / ".stepline" / "runs" / run_id / "approvals.json").read_text())
    return found


def stepline(project: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stepline.interfaces.cli", *args, "-C", str(project)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_approve_and_reject_without_by_record_git_user_name_else_the_login_name(
        project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`approve RUN` used to fail without --by. In a git work tree it records git's user.name; elsewhere (no git
    identity at all) the login name."""
    first = blocked(capsys, project, "gated.yaml")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "config", "user.name", "Grace Hopper"], check=True)
    code, out, _ = cli(capsys, project, "approve", first)
    assert code == 0 and out.startswith("approved step:announce by Grace Hopper; continue with: stepline resume")
    assert approvals(project, first)[0]["approver"] == "Grace Hopper"

    shutil.rmtree(project / ".git")
    second = blocked(capsys, project, "gated.yaml")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull,
           "GIT_CONFIG_NOSYSTEM": "1", "LOGNAME": "ada", "USER": "ada", "LNAME": "ada", "USERNAME": "ada"}
    env.pop("GIT_AUTHOR_NAME", None)
    env.pop("GIT_COMMITTER_NAME", None)
    rejected = stepline(project, "reject", second, env=env)
    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stdout.startswith("rejected step:announce by ada;")
    assert [(a["decision"], a["approver"]) for a in approvals(project, second)] == [("rejected", "ada")]


def test_a_wrong_answer_is_refused_at_once_and_one_command_answers_and_goes_on(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`answer RUN green` to "Which colour? [red/blue]" used to be recorded and refused only at resume; now it is
    refused at once naming the options, nothing recorded. The run's last lines say the command that goes on, and
    `answer RUN BLUE --resume` answers (as the option's own spelling) and completes the run."""
    code, out, _ = cli(capsys, project, "run", "asking.yaml", "--script", "script.yaml", "--non-interactive", "-q")
    assert code == 9
    run_id = re.search(r"run (run-\S+) blocked", out).group(1)  # type: ignore[union-attr]
    assert f"answer it: stepline answer {run_id} red --resume   (one of: red, blue)" in out
    code, out, err = cli(capsys, project, "answer", run_id, "green")
    assert code == 2 and out == ""
    assert err.startswith("error: 'green' is not an answer to ask:colour/1/0/1 (Which colour?)")
    assert err.rstrip().endswith("(answer one of: red, blue)") and len(err.splitlines()) == 1
    assert not (project / ".stepline" / "runs" / run_id / "approvals.json").exists()

    code, out, err = cli(capsys, project, "answer", run_id, "BLUE", "--resume", "--by", "ada")
    assert code == 0, err
    assert f"run {run_id} completed: 1/1 steps" in out
    assert "answered ask:colour/1/0/1 with blue" in err and "resuming at colour (Pick a colour)" in err
    code, out, _ = cli(capsys, project, "show", run_id)
    assert code == 0
    answers = out[out.index("answers given:"):].splitlines()
    assert answers[1].split() == ["step", "answer", "by", "gate"]
    assert answers[2].split() == ["colour", "blue", "ada", "ask:colour/1/0/1"]


MENU = [MenuOption("A", "Advanced Elicitation", side_trip=True), MenuOption("P", "Party Mode", side_trip=True),
        MenuOption("C", "Continue", default=True)]


def test_the_terminal_prompt_names_the_step_lists_the_options_and_takes_enter_only_for_a_default(
        capsys: pytest.CaptureFixture[str]) -> None:
    typed = iter(["Z", "", "", "approve"])
    asked: list[str] = []

    def read(prompt: str) -> str:
        asked.append(prompt)
        return next(typed)

    question = "Select an option: [A] Advanced Elicitation  [P] Party Mode  [C] Continue"
    assert terminal_prompt(question, ["A", "P", "C"], read=read, step="step-02 (Draft)", menu=MENU) == "C"
    shown = capsys.readouterr().out.splitlines()
    assert shown == ["step-02 (Draft) asks:", "  [A] Advanced Elicitation", "  [P] Party Mode",
                     "  [C] Continue   (default: Enter)",
                     "  [A] Advanced Elicitation and [P] Party Mode are side trips: this menu comes back after",
                     "'Z' is not an option; answer one of: A (Advanced Elicitation), P (Party Mode), C (Continue) "
                     "(Enter: C)"]
    # No default: Enter is no answer, asked again; the label answers too.
    plain = [MenuOption("A", "Approve"), MenuOption("E", "Edit")]
    assert terminal_prompt("Select an option: [A] Approve  [E] Edit", ["A", "E"], read=read, step="s",
                           menu=plain) == "A"
    assert asked == ["> "] * 4 and next(typed, None) is None


def _in_a_terminal(project: Path, args: list[str], answers: list[str]) -> tuple[int, str]:
    """``stepline ARGS`` in a pseudo-terminal; each answer is typed once the screen ends with a prompt."""
    main, child = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "stepline.interfaces.cli", *args], cwd=project, stdin=child,
                               stdout=child, stderr=child, close_fds=True, env={**os.environ, "COLUMNS": "120"})
    os.close(child)
    screen = b""
    waiting = list(answers)
    while True:
        ready = select.select([main], [], [], 60)[0]
        assert ready, f"no output for 60 s: {screen.decode(errors='replace')}"
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
        if screen.rstrip().endswith(b">") and waiting:
            os.write(main, waiting.pop(0).encode() + b"\r")
    os.close(main)
    return process.wait(timeout=60), screen.decode("utf-8", "replace").replace("\r\n", "\n")


def test_a_menu_at_the_terminal_shows_its_step_and_options_one_per_line(tmp_path: Path) -> None:
    """The micro-file menus workflow, run in a terminal with the dry-run executor: each menu names its step and
    lists its options one per line with the default; a wrong key is refused naming the options; Enter takes the
    default; the run completes."""
    project = tmp_path / "project"
    shutil.copytree(MICROFILE, project)
    code, screen = _in_a_terminal(project, ["run", "_bmad/demo/workflows/menus", "--executor", "dry-run"],
                                  ["Z", "", "", "", ""])
    assert code == 0, screen
    assert "step-02-draft asks:\n  [A] Advanced Elicitation\n  [P] Party Mode\n" in screen
    assert "  [C] Continue   (default: Enter)\n" in screen
    assert "[A] Advanced Elicitation and [P] Party Mode are side trips: this menu comes back after" in screen
    assert "'Z' is not an option; answer one of: A (Advanced Elicitation), P (Party Mode)" in screen
    assert re.search(r"run run-\S+ completed", screen)


def test_doctor_without_a_run_checks_every_run(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = blocked(capsys, project, "gated.yaml")
    second = blocked(capsys, project, "asking.yaml")
    code, out, _ = cli(capsys, project, "doctor")
    assert code == 0 and out.splitlines()[-1] == "2 run(s) checked: 2 whole, 0 damaged"
    journal = project / ".stepline" / "runs" / second / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([*lines[:2], b'{"torn": \n', *lines[2:]]))
    code, out, _ = cli(capsys, project, "doctor")
    assert code == 6
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:-1]}
    assert rows == {first: "whole", second: "damaged"}
    assert out.splitlines()[-1] == f"2 run(s) checked: 1 whole, 1 damaged; see `stepline doctor {second}`"
    code, out, _ = cli(capsys, project, "doctor", "--json")
    assert code == 6 and {r["run_id"]: r["damaged"] for r in json.loads(out)} == {first: False, second: True}


def test_validate_json_gives_the_counts(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "broken.yaml").write_text("id: broken\nsteps:\n  - id: a\n    next: nowhere\n", encoding="utf-8")
    code, out, _ = cli(capsys, project, "validate", ".", "--json")
    found = json.loads(out)
    assert code == 10 and found["workflows"] == sum(found["kinds"].values()) >= 3
    severities = [d["severity"] for d in found["diagnostics"]]
    assert (found["errors"], found["warnings"]) == (severities.count("error"), len(severities) - found["errors"])
    assert any(d["path"].endswith("broken.yaml") and d["severity"] == "error" for d in found["diagnostics"])


def test_diff_never_says_none(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose question was answered against one still waiting on it: 'no answer', never 'None'."""
    answered = blocked(capsys, project, "asking.yaml")
    assert cli(capsys, project, "answer", answered, "red", "--resume")[0] == 0
    waiting = blocked(capsys, project, "asking.yaml")
    code, out, _ = cli(capsys, project, "diff", answered, waiting)
    assert "ask:colour/1/0/1: answered 'red' in A, no answer in B" in out
    assert "None" not in out and code == 12
