"""What ``stepline sprint run -j N`` gains: 8 stories in 4 independent chains of 2 (story N.2 depends on N.1),
built by a script agent that takes 2 s per build and 1 s per review, run with ``-j 1`` and with ``-j 4`` in the
same invocation, each on a fresh copy of the same project. Prints both wall times and the ratio (target ≥ 2.5×:
the longest chain, 2 stories, against the sum of 8).

Usage: ``python bench/sprint_parallel.py [--build 2] [--review 1] [--jobs 4]``

Everything but the agent is real: BMAD v6.11 installed from the corpus, git, worktrees, the verify command (the
project's unit tests), one review layer, the merges (rebased, verified again, fast-forwarded), the board. The
agent (a small script, as tests/sprint/bin's) sleeps, then writes the story's module and test and sets the
story to review. Each run's stories are checked committed once each; nothing else is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "sprint"))  # sprint_kit: BMAD installed once per process

from sprint_kit import ARTIFACTS, BMAD, _installed  # noqa: E402

from stepline.interfaces.cli._app import run_cli  # noqa: E402

AGENT = '''\
#!{python}
import json, os, re, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from fake_agent import Mcp

prompt = sys.stdin.read()
argv = sys.argv[1:]
config = json.loads(Path(argv[argv.index("--mcp-config") + 1]).read_text())
mcp = Mcp(config["mcpServers"]["stepline"]["url"])
step = mcp.call("get_step", {{}})
if step["hints"]["stage"] == "build":
    time.sleep({build})
    name = re.search(r"`(\\w+)\\(\\)` in `(\\w+)\\.py`", prompt).group(1)
    Path(f"{{name}}.py").write_text(f"def {{name}}():\\n    return {{name!r}}\\n")
    Path(f"tests/test_{{name}}.py").write_text(
        f"import unittest\\n\\nfrom {{name}} import {{name}}\\n\\n\\nclass Test(unittest.TestCase):\\n"
        f"    def test_it(self):\\n        self.assertEqual({{name}}(), {{name!r}})\\n")
    story = Path(re.search(r"^## The story \\((.+)\\)$", prompt, re.M).group(1))
    story.write_text(re.sub(r"^status:.*$", "status: review", story.read_text(), count=1, flags=re.M))
    summary = f"{{name}}() with its test"
else:
    time.sleep({review})
    summary = "none"
mcp.call("finish", {{"summary": summary}})
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": summary,
                  "usage": {{"input_tokens": 100, "output_tokens": 10}}}}), flush=True)
'''

STORY = """\
---
title: 'Story {epic}.{n}: {name}'
status: ready-for-dev
---

# Story {epic}.{n}: {name}

As a user I want `{name}()` in `{name}.py`, with a unit test.
{depends}"""


def make(root: Path, build: float, review: float) -> None:
    shutil.copytree(_installed(BMAD), root)
    artifacts = root / ARTIFACTS
    artifacts.mkdir(parents=True, exist_ok=True)
    lines = ["development_status:"]
    for epic in range(1, 5):
        lines.append(f"  epic-{epic}: in-progress")
        for n in (1, 2):
            name = f"feature_{epic}_{n}"
            lines.append(f"  {epic}-{n}-{name.replace('_', '-')}: ready-for-dev")
            depends = f"\nDepends on Story {epic}.1.\n" if n == 2 else ""
            (artifacts / f"{epic}-{n}-{name.replace('_', '-')}.md").write_text(
                STORY.format(epic=epic, n=n, name=name, depends=depends))
    (artifacts / "sprint-status.yaml").write_text(f'story_location: "{ARTIFACTS}"\n' + "\n".join(lines) + "\n")
    (root / "tests").mkdir()
    (root / "tests" / "__init__.py").write_text("")
    agent = root.parent / f"{root.name}-agent"
    agent.write_text(AGENT.format(python=sys.executable, tests=str(HERE.parent / "tests" / "sprint"), build=build,
                                  review=review))
    agent.chmod(0o755)
    (root / "config").mkdir()
    (root / "config" / "runtime.yaml").write_text(f"executors:\n  cli-agent: {{agent: claude, command: {agent}}}\n")
    (root / "config" / "sprint.yaml").write_text(
        f"verify:\n  commands: ['{sys.executable} -m unittest discover -q -s tests -t .']\n"
        "review:\n  layers:\n    - {id: check, name: Check, instruction: 'Review: {diff_output}'}\n"
        "isolation: worktree\nexecutor: cli-agent\n")
    (root / ".gitignore").write_text(".stepline/\n__pycache__/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "sprint planned"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def timed(root: Path, jobs: int) -> float:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the per-story JSON: checked below from git instead
        code = run_cli(["sprint", "run", "-j", str(jobs), "-C", str(root), "-q", "--json"])
    elapsed = time.perf_counter() - started
    log = subprocess.run(["git", "-C", str(root), "log", "--format=%(trailers:key=Stepline-Story,valueonly)"],
                         capture_output=True, text=True, check=True).stdout
    committed = sorted(line.strip() for line in log.splitlines() if line.strip())
    if code != 0 or len(committed) != 8 or len(set(committed)) != 8:
        raise SystemExit(f"-j {jobs}: exit {code}, stories committed: {committed}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=float, default=2.0, help="seconds per build")
    parser.add_argument("--review", type=float, default=1.0, help="seconds per review")
    parser.add_argument("--jobs", type=int, default=4, help="stories at once in the parallel run")
    args = parser.parse_args()
    os.environ.setdefault("GIT_AUTHOR_NAME", "Agent")
    os.environ.setdefault("GIT_AUTHOR_EMAIL", "agent@example.com")
    os.environ.setdefault("GIT_COMMITTER_NAME", "Agent")
    os.environ.setdefault("GIT_COMMITTER_EMAIL", "agent@example.com")
    with tempfile.TemporaryDirectory(prefix="sprint-parallel-") as tmp:
        figures = {}
        for jobs in (1, args.jobs):
            root = Path(tmp) / f"j{jobs}"
            make(root, args.build, args.review)
            figures[jobs] = timed(root, jobs)
    print(json.dumps({"stories": 8, "chains": 4, "build_s": args.build, "review_s": args.review}))
    print(f"-j 1: {figures[1]:.1f} s")
    print(f"-j {args.jobs}: {figures[args.jobs]:.1f} s")
    print(f"ratio: {figures[1] / figures[args.jobs]:.2f}x (target >= 2.5x)")


if __name__ == "__main__":
    main()
