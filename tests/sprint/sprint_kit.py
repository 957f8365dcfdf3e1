"""A real BMAD project for the sprint loop's tests: a git repository with BMAD v6.11 installed, a tiny
Python package, a sprint board of stories and a fake agent CLI on PATH."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BMAD = HERE.parents[2] / "shared" / "corpus" / "bmad" / "v6.11.0"  # beside the repository, as tests/conftest.py
OLD_BMAD = BMAD.parent / "v6.0.0-alpha.23"  # the old era: workflows/4-implementation/dev-story
ARTIFACTS = "_bmad-output/implementation-artifacts"

BOARD = """\
# generated: 11-25-2026 10:00
# project: calc
generated: 11-25-2026 10:00
last_updated: 11-25-2026 10:00
project: calc
project_key: NOKEY
tracking_system: file-system
story_location: "{artifacts}"

development_status:
  epic-1: in-progress
  1-1-add: ready-for-dev  # the honest one
  1-2-sub: ready-for-dev
  1-3-mul: ready-for-dev
  1-4-div: ready-for-dev
  epic-1-retrospective: optional

  epic-2: backlog
  2-1-mod: backlog
  epic-2-retrospective: optional
"""

STORY = """\
---
title: 'Story {key}: {name}'
type: 'feature'
status: ready-for-dev
---

# Story {key}: {name}

As a user I want `{name}(a, b)` in `calc_{name}.py`, with a unit test.

## Verification

- `python -m unittest discover -q -s tests`
"""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


OLD_STORY = """\
# Story {key}: {name}

Status: ready-for-dev

## Story

As a user I want `{name}(a, b)` in `calc_{name}.py`, with a unit test.
"""


_TEMPLATES: dict[Path, Path] = {}


def _installed(source: Path) -> Path:
    """A project folder with ``source`` installed (``stepline bmad install``), made once per test process."""
    if source not in _TEMPLATES:
        from stepline.bmad import install_bmad

        folder = Path(tempfile.mkdtemp(prefix="sprint-bmad-")) / "template"
        install_bmad(source, folder, {})
        atexit.register(shutil.rmtree, folder.parent, True)
        _TEMPLATES[source] = folder
    return _TEMPLATES[source]


def make_project(root: Path, *, layers: int | None = 1, isolation: str = "none", builds: int = 3,
                 old_era: bool = False) -> Path:
    """The project: BMAD installed, four ready stories, committed; config for the fake agent and the checks."""
    root.mkdir(parents=True)
    shutil.copytree(_installed(OLD_BMAD if old_era else BMAD), root, dirs_exist_ok=True)
    for config in (root / "_bmad" / "bmm" / "config.yaml", root / "_bmad" / "config.toml"):  # named after its folder
        if config.is_file():
            config.write_text(config.read_text().replace("project_name: template", f"project_name: {root.name}")
                              .replace('project_name = "template"', f'project_name = "{root.name}"'))
    artifacts = root / ARTIFACTS
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "sprint-status.yaml").write_text(BOARD.format(artifacts=ARTIFACTS))
    for key, name in (("1-1", "add"), ("1-2", "sub"), ("1-3", "mul"), ("1-4", "div"), ("2-1", "mod")):
        (artifacts / f"{key}-{name}.md").write_text((OLD_STORY if old_era else STORY).format(key=key, name=name))
    (root / "tests").mkdir()
    (root / "tests" / "test_smoke.py").write_text(
        "import unittest\n\n\nclass Smoke(unittest.TestCase):\n"
        "    def test_true(self):\n        self.assertTrue(True)\n")
    (root / "config").mkdir()
    (root / "config" / "runtime.yaml").write_text(
        f"executors:\n  cli-agent: {{agent: claude, command: {HERE / 'bin' / 'claude'}, exit_grace_seconds: 5}}\n")
    review = "" if layers is None else "review:\n  layers:\n" + "".join(
        f"    - {{id: layer-{n}, name: Layer {n}, instruction: 'Review the change: {{diff_output}}'}}\n"
        for n in range(1, layers + 1))
    (root / "config" / "sprint.yaml").write_text(
        f"verify:\n  commands: ['{sys.executable} {HERE / 'checks.py'}']\n"
        f"retries: {{build: {builds}, review: 2}}\n{review}isolation: {isolation}\nexecutor: cli-agent\n")
    (root / ".gitignore").write_text(".stepline/\n__pycache__/\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "dev@example.com")
    _git(root, "config", "user.name", "Dev")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "sprint planned")
    return root


def add_config(root: Path, text: str, why: str) -> None:
    """Append ``text`` to the project's config/sprint.yaml and commit it (the loop needs a clean checkout)."""
    config = root / "config" / "sprint.yaml"
    config.write_text(config.read_text() + text)
    _git(root, "commit", "-q", "-am", why)


def git(root: Path, *args: str) -> str:
    """Run git in ``root`` and return its output."""
    return _git(root, *args)
