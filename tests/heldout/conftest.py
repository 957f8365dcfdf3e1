"""Small self-made BMAD trees with the shapes of releases and modules the corpus does not hold.

Each test reproduces, in a few files, a shape found while running unseen BMAD releases (v6.0.x, alpha.1x,
v6.3-v6.10, modules) in normal mode with nobody at the terminal and in ``--yolo``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from textwrap import dedent

from stepline import Engine
from stepline.engine import HumanChannel
from stepline.families import load_workflow
from stepline.model import Run, RunMode


def write(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text, dedented) under ``root``; return ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text).lstrip("\n"), encoding="utf-8")
    return root


LOAD_CONFIG = "Load config from `{project-root}/_bmad/demo/config.yaml`"

#: The body of a story workflow in the runner's XML: step 1 asks (a choice that may HALT), step 2 writes.
STORY_XML = dedent("""
    <workflow>

    <step n="1" goal="Choose the story">
      <ask>Choose option [1] the next backlog story, or [q] to quit:</ask>
      <check if="user chooses q">
        <action>HALT - No work needed</action>
      </check>
    </step>

    <step n="2" goal="Write the story">
      <action>Write the story to {story_file}</action>
    </step>

    </workflow>
    """)


def front(name: str, description: str, body: str) -> str:
    """A workflow.md or SKILL.md: its frontmatter (``name``, ``description``), then ``body`` (dedented)."""
    return f"---\nname: {name}\ndescription: '{description}'\n---\n\n" + dedent(body).lstrip("\n")


def entry(name: str, first: str) -> str:
    """A micro-file workflow.md that loads the demo config, then executes its ``first`` step file."""
    return front(name, f"The {name} workflow.",
                 f"# {name}\n\n{LOAD_CONFIG}.\n\nLoad, read the full file and then execute `{first}`.\n")


CONFIG = {"_bmad/demo/config.yaml": "user_name: Ada\nproject_name: demo\noutput_folder: '{project-root}/out'\n"}


def run(project: Path, rel: str, mode: RunMode = "normal") -> tuple[Engine, Run]:
    """Run ``rel`` with the dry-run executor as the CLI does with no terminal (normal) or with ``--yolo``."""
    engine = Engine(project_root=project, executor="dry-run", mode=mode, human=HumanChannel(interactive=False))
    return engine, asyncio.run(engine.start(load_workflow(project / rel, project_root=project)))


def pending(engine: Engine) -> list[str]:
    """What the blocked run asks: each pending gate as ``step: reason``."""
    return [f"{g.step_id}: {g.reason}" for g in (engine.gates.pending() if engine.gates is not None else [])]
