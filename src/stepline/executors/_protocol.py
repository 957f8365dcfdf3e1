"""The step protocol: what the runtime asks of an executor, and the calls an executor makes back.

The runtime sends a :class:`StepRequest` to :meth:`Executor.perform`. The executor does the work by calling
the :class:`StepSession` it is given — ``read``, ``ask``, ``write_output``, ``set_var``, ``call_tool``,
``decide``, ``finish`` — and nothing else touches run state. Every session call is checked and journaled by
the runtime. On resume after a crash ``perform`` is called again from the top and each call the journal
already holds returns its recorded result instead of happening again, so an executor must make the same
calls in the same order when given the same results (scripted, dry-run and model-driven executors do).
Work that is not a session call but must not be repeated (a request to a model) goes through
:meth:`StepSession.memo`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

__all__ = ["NOTES_HEADING", "REPEATED_HINT", "STANDING_HINT", "Choice", "MenuOption", "RequestKind", "StepRequest",
           "StepSession", "WriteMode", "choice_fits", "match_answer", "menu_text", "options_named", "standing_text",
           "with_notes"]

#: The hint (``StepRequest.hints``) a driver sets to the run's standing instructions: workflow-level text that is
#: the same for every request of the run that sees the whole run (a skill's standing rules, the facts activation
#: loaded). A model executor sends it once in the prefix a provider caches, not in each step's part.
STANDING_HINT = "standing"
#: The heading under which the runtime's notes to one request follow the step's own text: where a turn stops, the
#: person's answers so far, what the runtime does after the request. The step's text comes first, the same bytes in
#: each request of the step, so a provider serves it from its cache; the notes differ from request to request.
NOTES_HEADING = "## This request"
#: The hint a driver sets when another request of the step sends the same step text again (its turns, the
#: continuation after its subagents): a provider caching at explicit breakpoints marks the end of that text.
REPEATED_HINT = "repeated"


def with_notes(text: str, *notes: str) -> str:
    """``text`` (a step's own text) with the runtime's ``notes`` to one request after it, under
    :data:`NOTES_HEADING` (added once); empty notes add nothing."""
    said = [note.strip() for note in notes if note and note.strip()]
    if not said:
        return text
    if f"\n\n{NOTES_HEADING}\n" in text:  # notes already there: these follow them
        return text.rstrip("\n") + "\n\n" + "\n\n".join(said)
    return text.rstrip("\n") + f"\n\n{NOTES_HEADING}\n" + "\n\n".join(said)


def standing_text(instructions: str, variables: dict[str, Any]) -> str:
    """The text of a run's standing hint: the workflow-level ``instructions``, then the run's configuration (the
    workflow's variables as loaded — config values, the project's folders — which every step may need)."""
    facts = [f"- {name}: {str(value).lower() if isinstance(value, bool) else value}"
             for name, value in sorted(variables.items())
             if isinstance(value, str | int | float | bool) and str(value).strip() and "\n" not in str(value)]
    return "\n\n".join(filter(None, (instructions.strip(), "## Configuration\n" + "\n".join(facts) if facts else "")))

#: What the runtime wants: do a step's work, generate one template section, decide a yes/no condition,
#: answer a question as a simulated expert user (``#yolo``), or pick a menu option.
RequestKind = Literal["work", "generate", "decide", "answer", "choose"]
WriteMode = Literal["append", "replace", "section"]


@dataclass(frozen=True, slots=True)
class MenuOption:
    """One option of a step's menu (``[C] Continue``)."""

    key: str
    label: str
    default: bool = False
    #: The option runs a side trip (``[A]`` advanced elicitation, ``[P]`` party mode), then the menu comes back.
    side_trip: bool = False


class Choice(Protocol):
    """What an answer is matched against: an option's key and its label (a menu option, a gate's choice)."""

    @property
    def key(self) -> str: ...

    @property
    def label(self) -> str: ...


C = TypeVar("C", bound=Choice)

_WRITTEN_KEY = re.compile(r"\s*\*{0,2}\[(\w+)\]")  # "[A] Approve", "**[C]** Continue", as an option is shown


def match_answer(answer: str | None, options: Sequence[C]) -> C | None:
    """The option an answer names: its key (``c``, ``[C]``, ``[C] Continue``) or its label, ignoring case; None
    for anything else. The one way an answer is read, wherever a person gives it (a terminal, ``stepline
    answer``, the dashboard, an agent over MCP)."""
    if answer is None:
        return None
    written = _WRITTEN_KEY.match(answer)
    text = (written[1] if written else answer).strip().strip("[]*").strip().lower()
    for option in options:
        if text == option.key.lower():
            return option
    for option in options:
        if text and text == option.label.lower():
            return option
    return None


#: A placeholder in one of a request's choices (``line 12: <the user's answer>``): the executor's own text goes there.
_PLACEHOLDER = re.compile(r"<[^<>]+>")


def choice_fits(choice: str, choices: Sequence[str]) -> bool:
    """Whether ``choice`` is one of ``choices``: the same text, or one with a ``<…>`` placeholder with text of the
    executor's own in its place (``line 12: yes, go on`` fits ``line 12: <the user's answer>``)."""
    for allowed in choices:
        if choice == allowed:
            return True
        if _PLACEHOLDER.search(allowed) and re.fullmatch(
                ".+".join(re.escape(part) for part in _PLACEHOLDER.split(allowed)), choice, re.S):
            return True
    return False


def menu_text(options: Sequence[Choice]) -> str:
    """The menu on one line, as a question names it: ``Select an option: [A] Advanced Elicitation  [C] Continue``."""
    return "Select an option: " + "  ".join(f"[{o.key}] {o.label}" for o in options)


def options_named(options: Sequence[Choice]) -> str:
    """The options as a refusal names them: ``A (Advanced Elicitation), C (Continue)``; a bare key alone."""
    return ", ".join(o.key if o.label in ("", o.key) else f"{o.key} ({o.label})" for o in options)


@dataclass(slots=True)
class StepRequest:
    """What the runtime hands an executor: only the current step's content (just-in-time), never a later one."""

    kind: RequestKind
    run_id: str
    step_id: str
    title: str
    content: str = ""
    variables: dict[str, Any] = field(default_factory=dict)
    question: str | None = None
    choices: list[str] | None = None
    condition: str | None = None
    section: str | None = None
    menu: list[MenuOption] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    mode: str = "normal"
    workflow_id: str = ""
    attempt: int = 1
    hints: dict[str, Any] = field(default_factory=dict)
    #: The step's evidence requirement (``"L1"``, ``"QUINT L1"``), the same on every request of the step: when the
    #: step completes, the evidence it recorded (``call_tool("recordEvidence", …)``) must meet it. None: no requirement.
    evidence: str | None = None
    #: The step's TELIS context (SPEC R-C1), resolved and journaled before the executor runs: shards, a language
    #: server's answer, warnings, its fingerprint (see :mod:`stepline.context`). None: the step asks for none.
    telis_context: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (for the journal, cassettes and prompts)."""
        return asdict(self)


class StepSession(ABC):
    """The protocol an executor speaks to the runtime during one request. All methods are journaled."""

    @abstractmethod
    async def read(self, path: str) -> str:
        """Return the text of ``path`` (relative to the project root; escapes are refused)."""

    @abstractmethod
    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        """Ask the user; in ``#yolo`` a simulated expert user answers, in non-interactive mode the run blocks."""

    @abstractmethod
    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: WriteMode = "append") -> str:
        """Write to the step's output (or ``path``); return the path written. ``section`` fills a template section."""

    @abstractmethod
    async def set_var(self, name: str, value: Any) -> None:
        """Set a run variable visible to later steps."""

    @abstractmethod
    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool through the tool pipeline; return its ToolResult as a dict."""

    @abstractmethod
    async def decide(self, value: bool, reason: str) -> None:
        """Answer a ``decide`` request: the condition holds (``value``) and why."""

    @abstractmethod
    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        """End the request: the menu ``choice`` (or the answer, for ``answer`` requests) and a short summary."""

    @abstractmethod
    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Return the journaled result for this call, or run ``compute`` once and journal its result."""

    async def agent_process(self, process: dict[str, Any]) -> dict[str, Any] | None:
        """Journal, durably, the agent process this request is about to let start (``process``: its pid, start
        time, process group, boot) and return the one journaled before it by this same request — the agent of a
        driver that died, for the caller to stop before it starts another. A session without a journal (a Ray
        worker's: the worker's death stops its agent) keeps none."""
        return None

    def output_log(self) -> Path | None:
        """Where to append what a running agent prints, line by line, for people watching it (``stepline logs
        -f``): a log in the run's folder, never state (the journal stays the truth). None: the run keeps none."""
        return None

    async def record_usage(self, label: str, usage: dict[str, Any]) -> None:
        """Journal what a call that ended without a result used (an agent stopped at its timeout, or one that ended
        without finishing; ``usage`` as :meth:`stepline.executors.Usage.to_record` makes it), for the run's
        usage. Never replayed: a call run again on resume records its own. A session without a journal keeps
        none."""
        return None
