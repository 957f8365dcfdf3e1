"""The ``human`` executor: a person does the step in the terminal.

The step is shown with rich (title, content, question or condition, menu): the content a person reads, which a
driver gives in the request's ``PERSON_HINT`` when its ``content`` also carries text written for a model (how to
say where the step leaves, which checkpoints stop); an empty one is a request with nothing for a person to do (a
greeting the activation asks of a model), finished without a question. The person types the output on
stdin (ending with a line holding only ``.``) or writes it in ``$EDITOR`` (``:e``), answers questions,
decides conditions and picks the menu option; an answer that is not an option is asked again. Everything the
person gave is journaled as one memo before it is applied, so a step resumed after a crash does not ask again.
The menu choice made here is the person's own (``speaks_for_user``): the runtime takes it as the answer to
the step's menu and does not ask the menu a second time. The menu is offered as its options, keys and labels.

Ctrl-C at a prompt stops the run at once (the prompt waits in a daemon thread, which the process does not wait
for) and says how to resume it; the step stays unfinished, so ``resume`` asks it again.

Options:
    prompt: ``prompt(text) -> str`` reading one answer (default: :func:`input`); tests pass their own.
    console: the rich ``Console`` the step is shown on (default: the terminal).
    editor: the editor command for ``:e`` (default: ``$VISUAL``, then ``$EDITOR``, then ``vi``).
"""

from __future__ import annotations

import asyncio
import os
import select
import shlex
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from stepline.errors import ExecutorError
from stepline.executors._base import Executor
from stepline.executors._dryrun import default_choice
from stepline.executors._protocol import MenuOption, StepRequest, StepSession, match_answer, options_named

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["PERSON_HINT", "HumanExecutor", "ask_in_thread", "terminal_input"]

#: A request's hint: the text a person reads in place of its ``content`` ("" when there is nothing for a person).
PERSON_HINT = "person"

_END = "."
_EDIT = ":e"

T = TypeVar("T")


async def ask_in_thread(ask: Callable[[], T], stop: threading.Event, *, run_id: str, step_id: str) -> T:
    """``ask()`` (a conversation at the terminal) in a daemon thread: input() blocks, and a pool thread would keep
    a Ctrl-C'd process waiting for Enter. Cancelled (Ctrl-C), it sets ``stop`` (the prompt's wait gives up: see
    :func:`terminal_input`), says how to resume the run and leaves the thread to die with the process."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T) -> None:
        if not done.done():
            done.set_result(result)

    def fail(error: BaseException) -> None:
        if not done.done():
            done.set_exception(error)

    def work() -> None:
        try:
            result = ask()
        except BaseException as exc:  # handed to the awaiting task, which raises it
            loop.call_soon_threadsafe(fail, exc)
        else:
            loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=work, name=f"human-{step_id}", daemon=True).start()
    try:
        return await done
    except asyncio.CancelledError:
        stop.set()
        print(f"\ninterrupted at {step_id}: the run stays resumable; `stepline resume {run_id}` asks this step again",
              file=sys.stderr, flush=True)
        raise


def terminal_input(text: str, *, stop: threading.Event) -> str:
    """:func:`input` that gives up once ``stop`` is set (the run is interrupted): it waits for a line in
    ``select``, not inside a read that holds stdin's lock (a daemon thread holding it aborts the interpreter's
    shutdown)."""
    if os.name != "posix" or not sys.stdin.isatty():
        return input(text)
    sys.stdout.write(text)
    sys.stdout.flush()
    while not stop.is_set():
        if select.select([sys.stdin], [], [], 0.2)[0]:
            line = sys.stdin.readline()
            if not line:
                raise EOFError
            return line.rstrip("\n")
    raise ExecutorError("interrupted at the prompt")


class HumanExecutor(Executor):
    """Shows the step to a person and turns their answers into protocol calls."""

    name = "human"
    #: The person at the terminal is the user: the menu choice they make here answers the step's menu.
    speaks_for_user: ClassVar[bool] = True
    is_the_person: ClassVar[bool] = True

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        from rich.console import Console

        options = options or {}
        self._stop = threading.Event()
        self.prompt: Callable[[str], str] = options.get("prompt") or partial(terminal_input, stop=self._stop)
        self.console: Console = options.get("console") or Console(highlight=False)
        self.editor = str(options.get("editor") or os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        """Ask the person (or replay what they said) and make the calls their answers mean."""
        if request.kind == "work" and request.hints.get(PERSON_HINT) == "" and not request.menu:
            self.console.print(f"[dim]{request.step_id}: {request.title} — nothing for you to do here[/dim]")
            await session.finish(None, "nothing for a person to do")
            return
        given = await session.memo("human", {"kind": request.kind, "step_id": request.step_id},
                                   lambda: ask_in_thread(partial(self._interact, request), self._stop,
                                                         run_id=request.run_id, step_id=request.step_id))
        if request.kind == "decide":
            await session.decide(bool(given["decision"]), str(given.get("reason") or "decided by a person"))
            return
        output = given.get("output")
        if output is not None:
            if request.kind == "generate" and request.section:
                await session.write_output(output, section=request.section, mode="section")
            else:
                await session.write_output(output)
        await session.finish(given.get("choice"), given.get("summary") or None)

    # -- the conversation (runs in a daemon thread: input() blocks) ---------------------------------------------
    def _interact(self, request: StepRequest) -> dict[str, Any]:
        self._show(request)
        if request.kind == "decide":
            decision = self._pick("Does it hold?", [MenuOption(key="y", label="yes"), MenuOption(key="n", label="no")],
                                  default=None) == "y"
            return {"decision": decision, "reason": self._ask("Why? ")}
        if request.kind == "answer":
            if request.choices:
                return {"choice": self._pick(request.question or "Answer",
                                             [MenuOption(key=c, label="") for c in request.choices], default=None)}
            return {"choice": self._ask(f"{request.question or 'Answer'}: ")}
        given: dict[str, Any] = {}
        if request.kind == "generate":
            given["output"] = self._compose(f"the content of section '{request.section}'")
        elif request.kind == "work" and request.hints.get("output"):
            given["output"] = self._compose("the step's output (" + ", ".join(request.hints.get("outputs") or [])
                                            + ")")
        if request.menu:
            given["choice"] = self._pick("Choose", list(request.menu), default=default_choice(request))
        if request.kind != "choose":
            given["summary"] = self._ask("Summary (optional): ")
        return given

    def _show(self, request: StepRequest) -> None:
        from rich.console import Group
        from rich.markdown import Markdown
        from rich.panel import Panel

        body: list[Any] = []
        content = str(request.hints.get(PERSON_HINT, request.content))
        if content.strip():
            body.append(Markdown(content))
        if request.condition:
            body.append(f"[bold]Condition:[/bold] {request.condition}")
        if request.question:
            body.append(f"[bold]Question:[/bold] {request.question}")
        if request.menu:
            body.append("\n".join(f"[bold]\\[{o.key}][/bold] {_plain(o.label)}"
                                  + (" (default: Enter)" if o.default else "") for o in request.menu))
            trips = [o for o in request.menu if o.side_trip]
            if trips:
                said = " and ".join(f"[{o.key}]" for o in trips)
                body.append(f"[dim]{said} {'is a side trip' if len(trips) == 1 else 'are side trips'}: the menu comes "
                            "back after[/dim]")
        self.console.print(Panel(Group(*body), title=f"[bold]{request.step_id}[/bold] · {request.title}",
                                 subtitle=f"{request.kind} · run {request.run_id}"))

    def _ask(self, text: str) -> str:
        try:
            return self.prompt(text).strip()
        except EOFError:
            raise ExecutorError("the terminal input ended before the step was done",
                                hint="run it again in a terminal, or use --non-interactive") from None

    def _pick(self, text: str, options: list[MenuOption], *, default: str | None) -> str:
        """The key of one of ``options`` (shown one per line above), named by key or label (:func:`match_answer`);
        Enter takes ``default``, and only when there is one."""
        keys = "/".join(o.key for o in options)
        while True:
            answer = self._ask(f"{text} [{keys}]" + (f" (Enter: {default})" if default else "") + ": ")
            if not answer and default:
                return default
            matched = match_answer(answer, options)
            if matched is not None:
                return matched.key
            self.console.print(f"[red]{_plain(answer)!r} is not an option;[/red] choose one of "
                               f"{_plain(options_named(options))}")

    def _compose(self, what: str) -> str:
        self.console.print(f"Type {what}; end with a line holding only '{_END}' (or '{_EDIT}' first to use "
                           f"{self.editor}).")
        lines: list[str] = []
        while True:
            try:
                line = self.prompt("")
            except EOFError:
                break
            if line.strip() == _END:
                break
            if not lines and line.strip() == _EDIT:
                return self._edit()
            lines.append(line)
        return "\n".join(lines) + "\n" if lines else ""

    def _edit(self) -> str:
        with tempfile.TemporaryDirectory(prefix="stepline-human-") as folder:
            target = Path(folder) / "output.md"
            target.write_text("", encoding="utf-8")
            try:
                done = subprocess.run([*shlex.split(self.editor), str(target)], check=False)
            except OSError as exc:
                raise ExecutorError(f"cannot start the editor {self.editor!r}: {exc}",
                                    hint="set $EDITOR to an editor on PATH") from exc
            if done.returncode != 0:
                raise ExecutorError(f"the editor {self.editor!r} exited with status {done.returncode}")
            return target.read_text(encoding="utf-8")


def _plain(text: str) -> str:
    """``text`` as rich prints it, not as markup (a label may hold ``[brackets]``)."""
    from rich.markup import escape

    return escape(text)
