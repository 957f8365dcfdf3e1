"""Issue 14 at a real terminal: `stepline run … --executor human` asks each micro-file menu once.

The person types each step's output, picks [C] from the step's menu and gives a summary; the runtime must not
then ask the same menu again ("Select an option: … [A/P/R/X/C]"). Driven in a private tmux server (its own
``-L`` socket, killed afterwards) and read back with ``capture-pane``.
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
MENU_KEYS = "A/P/R/X/C"  # in both menu prompts: the executor's "Choose [A/P/R/X/C, …]" and the runtime's "[A/P/R/X/C]"
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
            if shown.count(MENU_KEYS) > 1:
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
    terminal.wait_for("Choose [" + MENU_KEYS, 1)
    terminal.type("C")
    terminal.wait_for(SUMMARY_PROMPT, 2)
    terminal.type("drafted")

    terminal.wait_for(OUTPUT_PROMPT, 3)  # step-03-done, not the same menu again
    terminal.type("Closed.", ".")
    terminal.wait_for(SUMMARY_PROMPT, 3)
    terminal.type("done")

    shown = terminal.wait_for("STEPLINE-EXIT=", 1)
    assert "STEPLINE-EXIT=0" in shown, shown
    assert shown.count(MENU_KEYS) == 1, shown  # step 2's menu was asked exactly once
    assert "Select an option" not in shown
    document = (project / "out" / "notes-demo.md").read_text(encoding="utf-8")
    assert "- one line per item" in document and "stepsCompleted: [1, 2, 3]" in document
