"""Every shell example in the docs' guides runs, as printed, in a fresh project.

A page's examples (fences marked ``bash``, ``sh``, ``shell`` or ``console``; in a ``console`` one, the lines
after ``$ ``) run in order, line by line, as typed into one shell: in a temporary project folder (a git
repository), with ``stepline`` on the PATH; what a line exports and the folder it ``cd``s to hold for the lines
after it. A folder the page names beside the project (``../BMAD-METHOD``: BMAD v6.11, ``../stepline``: this
checkout) is there. The output a ``console`` example shows after a command must be printed by it (each line, ``…``
standing for what varies, runs of spaces for one). A MyST comment line says more; above a fence:

- ``% example: exit N``: the example's last command exits N (9: a run waits for a person); the others exit 0.
- ``% example: file PATH``: the fence (any language) is a file the next examples use, written at PATH.
- ``% example: background PORT``: the example runs until the page is done, as in a terminal of its own; the page
  goes on once it listens on PORT. It is stopped with SIGTERM and must exit.
- ``% example: skip REASON``: not run. REASON names the files that run it instead (``tests/e2e/test_demo.py``,
  ``.ci/run``), and each of the example's commands must be in one of them.

and anywhere on the page (see example_setups.py):

- ``% example: setup NAME``: what the page's examples need put in place first (``ccw-sessions``, ``models``,
  ``ray-cluster``, ``trace-collector``).
- ``% example: port N``: a port the page names (a server's default) is a free one in the test.

In a command, ``RUN`` stands for the id of the run the page started last, ``RUN1``, ``RUN2`` … for its first,
second … run, as a reader would paste them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from example_setups import SETUPS, Page, assert_mentions, background, beside, port

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted([DOCS / "getting-started.md", *(DOCS / "guides").glob("*.md"), *(DOCS / "concepts").glob("*.md")])
SHELL = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w-]*)")
MARK = re.compile(r"^%\s*example:\s*(\w+)\s*(.*)$")
#: Marks that stand anywhere on a page, not above a fence.
PAGE_MARKS = ("setup", "port")
#: Variables a shell sets for itself, not carried from one line to the next.
SHELL_OWN = {"_", "SHLVL", "PWD", "OLDPWD", "BASH_EXECUTION_STRING", "EXAMPLE_STATE"}


@dataclass
class Example:
    """One fence of a page: where it is, its language, its text and the mark above it."""

    page: Path
    line: int
    language: str
    text: str
    mark: str = ""
    argument: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """Its command lines, a line continued with a backslash joined to the next."""
        return [command for command, _ in self.steps()]

    def steps(self) -> list[tuple[str, list[str]]]:
        """Its commands, each with the output lines a ``console`` example shows after it (what it must print)."""
        if self.language != "console":
            return [(line, []) for line in self.text.replace("\\\n", " ").splitlines() if line.strip()]
        found: list[tuple[str, list[str]]] = []
        for line in self.text.replace("\\\n", " ").splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            elif line.strip() and found:
                found[-1][1].append(line.strip())
        return found


def examples(page: Path) -> list[Example]:
    """The fences of a page that are shell examples or files for them, with their marks."""
    found: list[Example] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    number = 0
    mark: tuple[str, str] | None = None
    while number < len(lines):
        line = lines[number]
        matched = MARK.match(line)
        if matched and matched.group(1) not in PAGE_MARKS:
            mark = (matched.group(1), matched.group(2).strip())
        fence = FENCE.match(line)
        if fence:
            end = next(i for i in range(number + 1, len(lines)) if lines[i].startswith(fence.group(1)))
            language = fence.group(2)
            if language in SHELL or (mark and mark[0] == "file"):
                kind, argument = mark or ("", "")
                found.append(Example(page, number + 1, language, "\n".join(lines[number + 1 : end]) + "\n",
                                     kind, argument))
            number, mark = end, None
        elif line.strip() and not matched:
            mark = None
        number += 1
    return found


def page_marks(page: Path) -> list[tuple[str, str]]:
    """The page's ``setup`` and ``port`` marks, in order."""
    return [(m.group(1), m.group(2).strip()) for m in map(MARK.match, page.read_text(encoding="utf-8").splitlines())
            if m and m.group(1) in PAGE_MARKS]


def test_every_mark_is_known_and_every_skip_names_what_runs_it() -> None:
    """Marks are known; a skip names the files that run its commands instead, and they do; the guides hold
    runnable examples."""
    runnable = 0
    for page in PAGES:
        for kind, argument in page_marks(page):
            assert kind != "setup" or argument in SETUPS, f"{page.name}: unknown setup {argument!r}"
            assert kind != "port" or argument.isdigit(), f"{page.name}: `% example: port N` takes a number"
        for example in examples(page):
            assert example.mark in ("", "skip", "exit", "file", "background"), (
                f"{example.where}: unknown mark {example.mark!r}")
            if example.mark == "skip":
                named = [ROOT / word.strip("`,;:()") for word in example.argument.split()
                         if "." in word and (ROOT / word.strip("`,;:()")).is_file()]
                assert named, f"{example.where}: a skip names the files that run the example instead"
                assert_mentions(named, [command.split("#")[0].strip() for command in example.commands()])
            if example.mark in ("exit", "background"):
                assert example.argument.isdigit(), f"{example.where}: `% example: {example.mark} N` takes a number"
            if example.mark == "background":
                assert len(example.commands()) == 1, f"{example.where}: a background example is one command"
            if example.language in SHELL and example.mark != "skip":
                runnable += 1
    assert runnable >= 40


def run_ids(folder: Path) -> list[str]:
    """The runs of the project in ``folder`` in the order they were started (an id holds its start to the second
    only: runs a sprint loop starts within one second are ordered by their manifests' ``created_at``)."""
    runs = folder / ".stepline" / "runs"
    if not runs.is_dir():
        return []

    def started(run: Path) -> tuple[str, str]:
        manifest = run / "manifest.json"
        created = json.loads(manifest.read_text(encoding="utf-8")).get("created_at", "") if manifest.is_file() else ""
        return str(created), run.name

    return [run.name for run in sorted((p for p in runs.iterdir() if p.name.startswith("run-")), key=started)]


def with_run_ids(commands: str, started: list[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        index = match.group(1)
        if not started:
            raise AssertionError("an example names RUN before any run was started")
        return started[int(index) - 1] if index else started[-1]

    return re.sub(r"\bRUN(\d*)\b", replace, commands)


def typed(page: Page, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` typed into the page's shell: run in its folder with its environment, which then holds what the
    command exported and the folder it went to."""
    state = page.tmp / "shell-state"
    state.unlink(missing_ok=True)  # a command that replaced the shell (exec) leaves none: the state stays as it was
    keep = 'trap \'code=$?; env -0 > "$EXAMPLE_STATE"; printf "\\0%s" "$PWD" >> "$EXAMPLE_STATE"; exit $code\' EXIT\n'
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", keep + command], cwd=page.cwd,
                            env={**page.env, "EXAMPLE_STATE": str(state)}, capture_output=True, text=True,
                            timeout=600, stdin=subprocess.DEVNULL)
    if state.exists():
        *variables, folder = state.read_text(encoding="utf-8").split("\0")
        page.env = dict(v.split("=", 1) for v in variables if "=" in v and v.split("=", 1)[0] not in SHELL_OWN)
        page.cwd = Path(folder)
    return result


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(DOCS)))
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    """The page's examples run in order in one fresh project and exit as the page says."""
    found = [e for e in examples(page) if e.mark != "skip"]
    if not found:
        pytest.skip("no runnable example on this page")
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "STEPLINE_EXAMPLES": "1", "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}
    env.pop("COLUMNS", None)
    with contextlib.ExitStack() as stack:
        shell = Page(tmp_path, project, env, stack)
        beside(shell, "".join(e.text for e in found))
        for kind, argument in page_marks(page):
            if kind == "setup":
                stack.enter_context(SETUPS[argument](shell))
            else:
                port(shell, argument)
        started: list[str] = []
        for example in found:
            if example.mark == "file":
                target = shell.cwd / example.argument
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(example.text, encoding="utf-8")
                continue
            steps = example.steps()
            if example.mark == "background":
                background(shell, shell.substitute(with_run_ids(steps[0][0], started)), example.argument)
                continue
            for number, (line, shown) in enumerate(steps, 1):  # one by one: a line may name the run before it
                command = shell.substitute(with_run_ids(line, started))
                result = typed(shell, command)
                expected = int(example.argument) if example.mark == "exit" and number == len(steps) else 0
                printed = result.stdout + result.stderr
                assert result.returncode == expected, (
                    f"{example.where}: exit {result.returncode}, expected {expected}\n$ {command}\n"
                    f"{printed[-4000:]}")
                spaced = " ".join(printed.split())  # a table's columns are as wide as their widest value
                for output in shown:  # the page shows it: it is printed (… stands for what varies)
                    assert all(" ".join(part.split()) in spaced for part in output.split("…")), (
                        f"{example.where}: `{command}` did not print {output!r}\n{printed[-4000:]}")
                started += [run for run in run_ids(shell.cwd) if run not in started]
