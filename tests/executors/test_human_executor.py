"""The ``human`` executor: a person does the step in the terminal (stdin fed by the test)."""

from __future__ import annotations

import asyncio
import io
import shlex
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from stepline import Engine
from stepline.engine import HumanChannel, build_timeline
from stepline.errors import ExecutorError
from stepline.executors import MenuOption, StepRequest, StepSession
from stepline.executors._human import HumanExecutor
from stepline.families import load_workflow

WORKFLOW = """\
id: pair
steps:
  - id: intro
    name: Introduction
    body: "Write a two-line introduction. MARK-INTRO"
    outputs: [doc/intro.md]
  - id: wrap
    name: Wrap up
    body: "Close the document. MARK-WRAP"
    outputs: [doc/wrap.md]
"""


class Typist:
    """Feeds prepared answers to the executor as if typed, and remembers the prompts it was shown."""

    def __init__(self, answers: Iterable[str]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, text: str) -> str:
        self.prompts.append(text)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)


class RecordingSession(StepSession):
    """An in-memory session that records the calls the executor makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def read(self, path: str) -> str:
        return ""

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        return ""

    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: Any = "append") -> str:
        self.calls.append(("write_output", content, section, mode))
        return path or "out.md"

    async def set_var(self, name: str, value: Any) -> None:
        self.calls.append(("set_var", name, value))

    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return {}

    async def decide(self, value: bool, reason: str) -> None:
        self.calls.append(("decide", value, reason))

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        self.calls.append(("finish", choice, summary))

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        return await compute()


def _executor(answers: Iterable[str], **options: Any) -> tuple[HumanExecutor, Typist, io.StringIO]:
    typist, screen = Typist(answers), io.StringIO()
    executor = HumanExecutor({"prompt": typist, "console": Console(file=screen, width=100), **options})
    return executor, typist, screen


def _perform(executor: HumanExecutor, request: StepRequest) -> RecordingSession:
    session = RecordingSession()
    asyncio.run(asyncio.wait_for(executor.perform(request, session), timeout=30))
    return session


def test_a_person_types_each_steps_output_and_the_run_completes(tmp_path: Path) -> None:
    """Typed lines become each step's output file and the typed summary is recorded on the step."""
    (tmp_path / "flow.yaml").write_text(WORKFLOW, encoding="utf-8")
    executor, _, screen = _executor(["Hello.", "This is stepline.", ".", "wrote the intro",
                                     "The end.", ".", ""])
    engine = Engine(project_root=tmp_path, executor=executor, human=HumanChannel(interactive=False))
    run = asyncio.run(asyncio.wait_for(engine.start(load_workflow(tmp_path / "flow.yaml", project_root=tmp_path)),
                                       timeout=30))
    assert run.status.value == "completed"
    assert (tmp_path / "doc" / "intro.md").read_text(encoding="utf-8") == "Hello.\nThis is stepline.\n"
    assert (tmp_path / "doc" / "wrap.md").read_text(encoding="utf-8") == "The end.\n"
    assert run.steps["intro"].summary == "wrote the intro"
    shown = screen.getvalue()
    assert "Introduction" in shown and "MARK-INTRO" in shown and "MARK-WRAP" in shown
    # A person's answers are journaled (replayed on resume) but are no model call: `show` counts none.
    timeline = build_timeline(engine.store.open(run.run_id))
    assert sum(1 for e in timeline["events"] if e["type"] == "WorkflowStepCompleted") == 2
    assert timeline["usage"] == {}


def test_an_invalid_menu_answer_is_asked_again() -> None:
    """A choice that is not on the menu is refused and asked again; the valid one ends the step."""
    menu = [MenuOption("C", "Continue", default=True), MenuOption("A", "Advanced elicitation")]
    executor, typist, screen = _executor(["Z", "a"])
    session = _perform(executor, StepRequest(kind="choose", run_id="r", step_id="s", title="Pick", menu=menu))
    assert session.calls == [("finish", "A", None)]
    assert "'Z' is not an option" in screen.getvalue()
    assert len([p for p in typist.prompts if p.startswith("Choose")]) == 2


def test_enter_picks_the_menu_default() -> None:
    """An empty answer to the menu takes its default option."""
    menu = [MenuOption("C", "Continue", default=True), MenuOption("X", "Exit")]
    executor, _, _ = _executor(["", "ok"])
    session = _perform(executor, StepRequest(kind="work", run_id="r", step_id="s", title="T", menu=menu))
    assert session.calls == [("finish", "C", "ok")]


def test_output_can_be_written_in_the_editor(tmp_path: Path) -> None:
    """':e' opens $EDITOR on a temporary file and its saved text becomes the section's content."""
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nopen(sys.argv[1], 'w').write('From the editor.\\n')\n", encoding="utf-8")
    executor, _, _ = _executor([":e", "filled"], editor=f"{shlex.quote(sys.executable)} {shlex.quote(str(editor))}")
    session = _perform(executor, StepRequest(kind="generate", run_id="r", step_id="s", title="T", section="overview"))
    assert session.calls == [("write_output", "From the editor.\n", "overview", "section"),
                             ("finish", None, "filled")]


def test_a_person_decides_a_condition_with_a_reason() -> None:
    """A decide request takes y/n (re-asking anything else) and the typed reason."""
    executor, _, screen = _executor(["maybe", "n", "the file is missing"])
    session = _perform(executor, StepRequest(kind="decide", run_id="r", step_id="s", title="T",
                                             condition="the architecture file exists"))
    assert session.calls == [("decide", False, "the file is missing")]
    assert "the architecture file exists" in screen.getvalue()


def test_an_answer_request_takes_one_of_the_choices() -> None:
    """A question with choices is answered with one of them, matched without regard to case."""
    executor, _, _ = _executor(["PostgreSQL"])
    session = _perform(executor, StepRequest(kind="answer", run_id="r", step_id="s", title="T",
                                             question="Which database?", choices=["postgresql", "sqlite"]))
    assert session.calls == [("finish", "postgresql", None)]


def test_input_ending_before_an_answer_is_a_clear_error() -> None:
    """Closed stdin while a menu waits is an ExecutorError, not a hang or a traceback."""
    executor, _, _ = _executor([])
    with pytest.raises(ExecutorError, match="input ended"):
        _perform(executor, StepRequest(kind="choose", run_id="r", step_id="s", title="T",
                                       menu=[MenuOption("C", "Continue")]))


MICROFILE = Path(__file__).resolve().parents[1] / "fixtures" / "microfile_run" / "project"


@pytest.mark.parametrize("first", ["C", "A"])
def test_a_micro_file_menu_chosen_at_the_step_is_not_asked_again(tmp_path: Path, first: str) -> None:
    """Issue 14: the person picks from step 2's menu while doing the step; that choice answers the menu (journaled
    as their answer) and the runtime's own menu prompt is not shown. After [A] (advanced elicitation) the menu is
    shown again — once — as the step file says ("when finished redisplay the menu")."""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(MICROFILE, project)
    typed = ["Notes.", ".", "started",  # step 1: output, summary (no menu)
             "- a line", ".", first, "drafted"]  # step 2: output, the menu, summary
    if first == "A":
        typed += ["elicited"]  # the elicitation side trip: its summary
    typed += ["Closed.", ".", "done"]  # step 3
    executor, typist, screen = _executor(typed)
    asked: list[str] = []

    def prompt(question: str, choices: list[str] | None) -> str:
        asked.append(question)
        return "C"

    engine = Engine(project_root=project, executor=executor, mode="normal",
                    human=HumanChannel(interactive=True, prompt=prompt))
    spec = load_workflow(project / "_bmad" / "demo" / "workflows" / "menus", project_root=project)
    run = asyncio.run(asyncio.wait_for(engine.start(spec), timeout=30))
    assert run.status.value == "completed", run.error
    assert [p for p in typist.prompts if p.startswith("Choose")] == [  # the options are listed one per line above
        "Choose [A/P/R/X/C] (Enter: C): "]
    shown = screen.getvalue()
    assert "│ [A] Advanced Elicitation" in shown and "│ [C] Continue (default: Enter)" in shown
    assert "[A] and [P] are side trips: the menu comes back after" in shown
    assert len(asked) == (1 if first == "A" else 0)  # only the redisplay after the side trip
    answers = [e.data for e in engine.store.open(run.run_id).events() if e.type == "AnswerGiven"]
    expected = [{"gate_id": "ask:step-02-draft/1/menu/0", "answer": first, "by": "human"}]
    if first == "A":
        expected.append({"gate_id": "ask:step-02-draft/1/menu/1", "answer": "C", "by": "terminal"})
    assert answers == expected
    assert run.steps["step-02-draft"].choice == "C"
