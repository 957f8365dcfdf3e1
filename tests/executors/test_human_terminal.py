"""Issues 14 and 25 at a real terminal: `stepline run … --executor human` asks each menu once, as its options.

The person types each step's output, picks [C] from the step's menu (offered as keys and labels) and gives a
summary; the runtime must not then ask the same menu again ("Select an option: …"). A skill's step shows the step,
not the runtime's notes to a model, and Ctrl-C at a prompt (the executor's, or the runtime's own menu prompt
when another executor does the work) stops the run at once, resumable. Driven in a private
tmux server (its own ``-L`` socket, killed afterwards) and read back with ``capture-pane``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "project"
WORKFLOW = "_bmad/demo/workflows/menus"
MENU = "Choose [A/"  # the executor's prompt for the step's menu ("Choose [A/P/C] (Enter: C): "), options listed above
ASKED_AGAIN = " asks:"  # the runtime's own prompt for a menu ("step-02-draft asks:"): never, once the executor asked it
OUTPUT_PROMPT = "Type the step's output"
SUMMARY_PROMPT = "Summary (optional)"


def _tmux() -> str:
    found = shutil.which("tmux")
    if found is None and shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", "tmux"], capture_output=True, timeout=300, check=False)
        found = shutil.which("tmux")
    if found is None:
        pytest.skip("tmux is not installed and could not be installed (`apt-get install -y tmux`): the terminal "
                    "test needs it")
    return found


class Terminal:
    """One tmux session on a private server: type into it, read its whole scrollback."""

    def __init__(self, tmux: str, socket: str) -> None:
        self.tmux, self.socket = tmux, socket

    def cmd(self, *args: str) -> str:
        done = subprocess.run([self.tmux, "-L", self.socket, "-f", "/dev/null", *args], capture_output=True,
                              text=True, timeout=30, check=True)
        return done.stdout

    def screen(self) -> str:
        return self.cmd("capture-pane", "-p", "-J", "-t", "t", "-S", "-", "-E", "-")

    def type(self, *lines: str) -> None:
        for line in lines:
            if line:
                self.cmd("send-keys", "-t", "t", "-l", "--", line)
            self.cmd("send-keys", "-t", "t", "Enter")

    def wait_for(self, text: str, count: int = 1, timeout: float = 60.0) -> str:
        """Wait until ``text`` is on the screen ``count`` times; fail early if a menu is asked a second time."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if shown.count(text) >= count:
                return shown
            if shown.count(MENU) > 1 or ASKED_AGAIN in shown:
                pytest.fail(f"the menu was asked again:\n{shown}")
            if time.monotonic() > deadline:
                pytest.fail(f"{text!r} (x{count}) did not appear within {timeout:g}s:\n{shown}")
            time.sleep(0.1)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    tmux = _tmux()
    term = Terminal(tmux, f"stepline-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield term
    finally:
        subprocess.run([tmux, "-L", term.socket, "kill-server"], capture_output=True, timeout=30, check=False)


def test_a_person_at_the_terminal_is_asked_each_menu_once(tmp_path: Path, terminal: Terminal) -> None:
    """Output typed, [C] chosen, summary given: the run goes on to the next step without asking the menu again,
    and completes."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    stepline = Path(sys.executable).parent / "stepline"
    command = (f"{shlex.quote(str(stepline))} run {shlex.quote(str(project / WORKFLOW))} --executor human "
               f"--project-root {shlex.quote(str(project))}; echo STEPLINE-EXIT=$?; sleep 600")
    terminal.cmd("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", "-c", str(project),
                 f"env -u VISUAL -u EDITOR {command}")

    terminal.wait_for(OUTPUT_PROMPT, 1)  # step-01-start: no menu
    terminal.type("Notes begin here.", ".")
    terminal.wait_for(SUMMARY_PROMPT, 1)
    terminal.type("started")

    terminal.wait_for(OUTPUT_PROMPT, 2)  # step-02-draft: output, then its menu, then the summary
    terminal.type("- one line per item", ".")
    terminal.wait_for(MENU, 1)
    terminal.type("C")
    terminal.wait_for(SUMMARY_PROMPT, 2)
    terminal.type("drafted")

    terminal.wait_for(OUTPUT_PROMPT, 3)  # step-03-done, not the same menu again
    terminal.type("Closed.", ".")
    terminal.wait_for(SUMMARY_PROMPT, 3)
    terminal.type("done")

    shown = terminal.wait_for("STEPLINE-EXIT=", 1)
    assert "STEPLINE-EXIT=0" in shown, shown
    assert shown.count(MENU) == 1, shown  # step 2's menu was asked exactly once
    assert ASKED_AGAIN not in shown
    document = (project / "out" / "notes-demo.md").read_text(encoding="utf-8")
    assert "- one line per item" in document and "stepsCompleted: [1, 2, 3]" in document


CORPUS_V611 = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.11.0"
EPICS = "_bmad/bmm/plan/bmad-create-epics-and-stories"


@pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_a_skills_menus_are_offered_as_options_and_ctrl_c_stops_at_once(tmp_path: Path, terminal: Terminal) -> None:
    """bmad-create-epics-and-stories with the human executor: the activation's greeting (for a model) asks nothing,
    step-01 shows the step and its menu (not the runtime's notes to a model), [C] moves on to step-02's
    [A]/[P]/[C] menu, asked once; Ctrl-C there stops the run at once, saying how to resume, and `list` and
    `status` show it interrupted."""
    from stepline.bmad import install_bmad

    project = tmp_path / "project"
    install_bmad(CORPUS_V611, project, {"user_name": "Ada"})
    stepline = Path(sys.executable).parent / "stepline"
    command = (f"{shlex.quote(str(stepline))} run {EPICS} --executor human -C {shlex.quote(str(project))}; "
               "echo STEPLINE-EXIT=$?; sleep 600")
    terminal.cmd("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", "-c", str(project),
                 f"env -u VISUAL -u EDITOR {command}")

    first = terminal.wait_for("Choose [C] (Enter: C): ", 1)
    assert "Greet" not in first and "The runtime presents" not in first and "set `choice`" not in first, first
    assert "Validate Prerequisites" in first  # the step's own text
    terminal.type("")  # Enter: [C]
    terminal.wait_for(SUMMARY_PROMPT, 1)
    terminal.type("requirements confirmed")
    second = terminal.wait_for("Choose [A/P/C] (Enter: C): ", 1)
    assert ASKED_AGAIN not in second
    menu = [" ".join(line.split()) for line in second.splitlines()]  # one option a line, the default marked
    assert "│ [A] Advanced Elicitation │" in menu and "│ [C] Continue (default: Enter) │" in menu, second
    assert "are side trips" in second, second
    started = time.monotonic()
    terminal.cmd("send-keys", "-t", "t", "C-c")
    shown = terminal.wait_for("STEPLINE-EXIT=", 1, timeout=15)
    assert time.monotonic() - started < 10 and "STEPLINE-EXIT=130" in shown, shown
    (run_dir,) = (project / ".stepline" / "runs").iterdir()
    said = " ".join(shown.split())  # the CLI's console wraps long lines
    assert f"interrupted at step-02-design-epics: the run stays resumable; `stepline resume {run_dir.name}`" in said

    def cli(*args: str) -> str:
        done = subprocess.run([str(stepline), *args, "-C", str(project)], capture_output=True, text=True,
                              timeout=60, check=False)
        return done.stdout + done.stderr

    assert "interrupted" in cli("list")
    assert "interrupted" in cli("status", run_dir.name).splitlines()[0]


def test_ctrl_c_at_the_runtimes_own_menu_prompt_stops_at_once(tmp_path: Path, terminal: Terminal) -> None:
    """Another executor (dry-run) does the work and the runtime asks the step's menu at the terminal itself:
    Ctrl-C at that prompt stops the run at once (exit 130, not after the next Enter), says how to resume this run,
    and `list` and `status` show it interrupted."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    stepline = Path(sys.executable).parent / "stepline"
    command = (f"{shlex.quote(str(stepline))} run {shlex.quote(str(project / WORKFLOW))} --executor dry-run "
               f"--project-root {shlex.quote(str(project))}; echo STEPLINE-EXIT=$?; sleep 600")
    terminal.cmd("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", "-c", str(project), command)

    deadline = time.monotonic() + 60
    while ASKED_AGAIN not in terminal.screen():  # step-02's menu, asked by the runtime (not wait_for: it fails on it)
        assert time.monotonic() < deadline, terminal.screen()
        time.sleep(0.1)
    time.sleep(0.3)  # the prompt is reading
    started = time.monotonic()
    terminal.cmd("send-keys", "-t", "t", "C-c")
    deadline = started + 15
    while "STEPLINE-EXIT=" not in (shown := terminal.screen()):
        assert time.monotonic() < deadline, f"Ctrl-C did not stop the run:\n{shown}"
        time.sleep(0.1)
    assert time.monotonic() - started < 10 and "STEPLINE-EXIT=130" in shown, shown
    (run_dir,) = (project / ".stepline" / "runs").iterdir()
    assert f"`stepline resume {run_dir.name}`" in " ".join(shown.split()), shown
    assert "Traceback" not in shown, shown

    def cli(*args: str) -> str:
        done = subprocess.run([str(stepline), *args, "--project-root", str(project)], capture_output=True,
                              text=True, timeout=60, check=False)
        return done.stdout + done.stderr

    assert "interrupted" in cli("list")
    assert "interrupted" in cli("status", run_dir.name).splitlines()[0]
