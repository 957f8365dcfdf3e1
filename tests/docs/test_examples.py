"""Every shell example in the docs' guides runs, as printed, in a fresh project.

A page's examples (fences marked ``bash``, ``sh``, ``shell`` or ``console``; in a ``console`` one, the lines
after ``$ ``) run in order in one temporary project folder, with ``stepline`` on the PATH and a BMAD-METHOD
v6.11 checkout at ``../BMAD-METHOD``. A MyST comment line just above a fence says more:

- ``% example: skip REASON``: not run, and REASON says why (a network, a real model, a cluster, a server that
  runs until stopped); a skip without a reason fails this test.
- ``% example: exit N``: the example's last command exits N (9: a run waits for a person); the others exit 0.
- ``% example: file PATH``: the fence (any language) is a file the next examples use, written at PATH.

In a command, ``RUN`` stands for the id of the run the page started last, ``RUN1``, ``RUN2`` … for its first,
second … run, as a reader would paste them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
V611 = ROOT.parent / "shared" / "corpus" / "bmad" / "v6.11.0"
PAGES = sorted([DOCS / "getting-started.md", *(DOCS / "guides").glob("*.md"), *(DOCS / "concepts").glob("*.md")])
SHELL = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w-]*)")
MARK = re.compile(r"^%\s*example:\s*(\w+)\s*(.*)$")


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

    def commands(self) -> str:
        if self.language != "console":
            return self.text
        return "\n".join(line[2:] for line in self.text.splitlines() if line.startswith("$ "))


def examples(page: Path) -> list[Example]:
    """The fences of a page that are shell examples or files for them, with their marks."""
    found: list[Example] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    number = 0
    mark: tuple[str, str] | None = None
    while number < len(lines):
        line = lines[number]
        matched = MARK.match(line)
        if matched:
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


def test_every_mark_is_known_and_every_skip_says_why() -> None:
    """A skip names its reason; marks are skip, exit or file; the guides hold runnable examples."""
    runnable = 0
    for page in PAGES:
        for example in examples(page):
            assert example.mark in ("", "skip", "exit", "file"), f"{example.where}: unknown mark {example.mark!r}"
            if example.mark == "skip":
                assert len(example.argument.split()) >= 3, f"{example.where}: a skip says why, in a few words"
            if example.mark == "exit":
                assert example.argument.isdigit(), f"{example.where}: `% example: exit N` takes a number"
            if example.language in SHELL and example.mark != "skip":
                runnable += 1
    assert runnable >= 10


def run_ids(project: Path) -> list[str]:
    """The project's runs in the order they were started."""
    runs = project / ".stepline" / "runs"
    if not runs.is_dir():
        return []
    return sorted(p.name for p in runs.iterdir() if p.name.startswith("run-"))  # ids begin with their start time


def with_run_ids(commands: str, started: list[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        index = match.group(1)
        if not started:
            raise AssertionError("an example names RUN before any run was started")
        return started[int(index) - 1] if index else started[-1]

    return re.sub(r"\bRUN(\d*)\b", replace, commands)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(DOCS)))
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    """The page's examples run in order in one fresh project and exit as the page says."""
    found = [e for e in examples(page) if e.mark != "skip"]
    if not found:
        pytest.skip("no runnable example on this page")
    if any("../BMAD-METHOD" in e.text for e in found):
        if not V611.is_dir():
            pytest.skip("shared/corpus/bmad/v6.11.0 is not available")
        (tmp_path / "BMAD-METHOD").symlink_to(V611.resolve())
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "STEPLINE_EXAMPLES": "1"}
    env.pop("COLUMNS", None)
    started: list[str] = []
    for example in found:
        if example.mark == "file":
            target = project / example.argument
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(example.text, encoding="utf-8")
            continue
        lines = [line for line in example.commands().replace("\\\n", " ").splitlines() if line.strip()]
        for number, line in enumerate(lines, 1):  # one by one: a line may name the run the line before started
            command = with_run_ids(line, started)
            result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=project, env=env,
                                    capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
            expected = int(example.argument) if example.mark == "exit" and number == len(lines) else 0
            assert result.returncode == expected, (
                f"{example.where}: exit {result.returncode}, expected {expected}\n$ {command}\n"
                f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
            started += [run for run in run_ids(project) if run not in started]
