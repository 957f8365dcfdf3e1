"""A deterministic fake model: reads the request from the prompt stepline's LLM executors build and answers with
the step protocol's tool calls, the way a real model would — provider-neutral; the fake servers adapt it.

The policy sees only what goes over the wire (the system and user messages, the offered tools, the tool results
of its previous answer) and answers by the request kind:

- ``generate`` — ``write_output`` of a section text naming the section, then (next turn) ``finish``;
- ``work`` — ``set_var`` when the step asks for a value, ``write_output`` when the step has an output file, then
  ``finish`` with the menu's continue key (``C``) when there is a menu, or the user's answer to the question the
  turn stops at when it asks for one in the finish (#yolo: ``line N: [K]``, its first option, or a short answer);
- ``decide`` — ``decide`` false (the default branch);
- ``answer`` / ``choose`` — ``finish`` with the first choice (``C`` for a menu) or a short answer.

Every answer is one turn; a turn that only writes is followed by a turn that ends the request, so the tool
results travel back over the wire before the step ends. Tool results that are errors, and requests it cannot
read, are kept in :attr:`Policy.errors` for the test to assert on.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: One tool call: the function name and its arguments.
Call = tuple[str, dict[str, Any]]

#: The kind sentence of each request kind, as the prompt words it.
_KINDS = {
    "generate": re.compile(r"^Generate the content of template section `(?P<section>[^`]*)`", re.M),
    "decide": re.compile(r"^Decide whether the condition below holds\.", re.M),
    "answer": re.compile(r"^Answer the question below", re.M),
    "choose": re.compile(r"^Pick one option of the menu below\.", re.M),
    "work": re.compile(r"^Do the step's work described below\.", re.M),
}
#: The prompt's optional parts, in the order the prompt puts them.
_PARTS = ("Step instructions", "Condition", "Question", "Choices", "Menu", "Output", "Variables", "Context")
_HEADER = re.compile(r"^# Step (?P<step>\S+): (?P<title>.*)$", re.M)
_SET_VAR = re.compile(r"set it with set_var\('(?P<name>[^']+)'")
_MENU_LINE = re.compile(r"^\[(?P<key>[^\]]+)\] (?P<label>.*?)(?: \(default\))?$")
#: What a #yolo turn's finish gives after the question it stops at (``line 12: <the user's answer>``): in its
#: choices, or said in its notes when it has one stop; and that stop's line in the notes (its first option).
_ANSWER_IN_FINISH = re.compile(r"(?P<label>line [\w#]+): (?P<what>\[<key>\]|<the user's answer>)")
_STOP_LINE = r"^- `{label}` \(\w+\): (?P<text>.*?)(?: — its options: \[(?P<key>[^\]]+)\].*)?$"


@dataclass(frozen=True)
class Conversation:
    """One model request, provider-neutral."""

    system: str
    prompt: str
    #: Model answers already in the conversation.
    turns: int
    #: The tool results sent back for the last answer (empty on the first turn).
    results: list[str]
    #: The offered tools: name -> JSON schema of the parameters.
    tools: dict[str, dict[str, Any]]


#: A fake model: the tool calls of its next answer to a conversation; none ends the turn with a short text.
#: :class:`Policy` is one; a test scripting a real agent CLI writes its own (see :mod:`fakes.agents`).
Play = Callable[[Conversation], list[Call]]


@dataclass
class Request:
    """What the policy read from a prompt."""

    kind: str
    step_id: str
    title: str
    section: str | None = None
    parts: dict[str, str] = field(default_factory=dict)

    @property
    def menu(self) -> list[str]:
        """The menu keys, in the prompt's order."""
        lines = self.parts.get("Menu", "").splitlines()
        return [m.group("key") for m in map(_MENU_LINE.match, lines) if m]

    @property
    def choices(self) -> list[str]:
        """The answer choices, in the prompt's order."""
        return [line[2:] for line in self.parts.get("Choices", "").splitlines() if line.startswith("- ")]


def read_request(prompt: str) -> Request:
    """Parse the user message of a request: header, kind (and section), and the optional trailing parts.

    The parts are cut from the end backwards: the step instructions (the first part) may hold headings of their
    own, the later parts hold none (the JSON ones, variables and context, have no blank lines at all).
    """
    header = _HEADER.search(prompt)
    if header is None:
        raise ValueError(f"no '# Step <id>: <title>' header in the prompt: {prompt[:200]!r}")
    head = prompt.split("\n\n## ", 1)[0]
    kind, section = None, None
    for name, pattern in _KINDS.items():
        match = pattern.search(head)
        if match:
            kind, section = name, match.groupdict().get("section")
            break
    if kind is None:
        raise ValueError(f"no request kind in the prompt of step {header.group('step')}: {head[-300:]!r}")
    parts: dict[str, str] = {}
    end = len(prompt)
    for name in reversed(_PARTS):
        start = prompt.rfind(f"\n\n## {name}\n", 0, end)
        if start >= 0:
            parts[name] = prompt[start + len(name) + 6:end].strip("\n")
            end = start
    return Request(kind, header.group("step"), header.group("title").strip(), section, parts)


class Policy:
    """The fake model's behaviour; callable with a :class:`Conversation`, thread-safe (the server calls it)."""

    def __init__(self, label: str = "fake model") -> None:
        self.label = label
        #: Every request read on a first turn, in order.
        self.requests: list[Request] = []
        #: Tool results that came back as errors, unreadable prompts, reminders to use the tools.
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def kinds(self) -> dict[str, int]:
        """How many requests of each kind the policy answered."""
        counts: dict[str, int] = {}
        for request in self.requests:
            counts[request.kind] = counts.get(request.kind, 0) + 1
        return counts

    def __call__(self, conversation: Conversation) -> list[Call]:
        """The tool calls of the next answer."""
        try:
            request = read_request(conversation.prompt)
        except ValueError as exc:
            with self._lock:
                self.errors.append(str(exc))
            raise
        with self._lock:
            self.errors.extend(f"{request.step_id}: {r}" for r in conversation.results if r.startswith("error"))
            if conversation.turns and not conversation.results:
                self.errors.append(f"{request.step_id}: turn {conversation.turns + 1} came without tool results")
            if conversation.turns == 0:
                self.requests.append(request)
        if conversation.turns == 0:
            calls = self._first(request, conversation.tools)
            if calls and "in one reply" in conversation.system:  # a model that does as it is asked: one turn
                return [*calls, self._end(request, conversation.tools)]
            if calls:
                return calls
        return [self._end(request, conversation.tools)]

    def _first(self, request: Request, tools: dict[str, dict[str, Any]]) -> list[Call]:
        """The calls before the ending one (an empty list: the request ends at once)."""
        if request.kind == "generate":
            text = f"{request.section} by the {self.label}: text for step {request.step_id}."
            return [("write_output", {"content": text, "section": request.section, "mode": "section"})]
        if request.kind != "work":
            return []
        calls: list[Call] = []
        wanted = _SET_VAR.search(request.parts.get("Step instructions", ""))
        if wanted is not None:
            name = wanted.group("name")
            calls.append(("set_var", {"name": name, "value": f"{name} by the {self.label}"}))
        if "Output" in request.parts and "write_output" in tools:
            calls.append(("write_output", {"content": f"\n## {request.title}\n\nWritten by the {self.label} "
                                                      f"for step {request.step_id}.\n"}))
        return calls

    def _end(self, request: Request, tools: dict[str, dict[str, Any]]) -> Call:
        """The call that ends the request: ``decide``, or ``finish`` with a choice the tool schema allows."""
        if request.kind == "decide":
            return ("decide", {"value": False, "reason": f"the {self.label} takes the default branch"})
        args: dict[str, Any] = {"summary": f"{request.kind} {request.step_id} done by the {self.label}"}
        if request.menu:
            args["choice"] = "C" if "C" in request.menu else request.menu[0]
        elif request.kind == "work" and (asked := self._answer_in_finish(request)) is not None:
            args["choice"] = asked
        elif request.choices:
            args["choice"] = request.choices[0]
        elif request.kind == "answer":
            args["choice"] = short_answer(request.parts.get("Question", ""), self.label)
        return ("finish", args)

    def _answer_in_finish(self, request: Request) -> str | None:
        """The turn's finish choice when it asks for the user's answer in it: ``line N: [K]`` (the first option)
        or ``line N: <a short answer>``; None when it does not ask."""
        text = request.parts.get("Step instructions", "")
        if request.choices:  # the stop the policy names anyway (the first, the default branch), if it is a question
            wanted = next((m for m in map(_ANSWER_IN_FINISH.fullmatch, request.choices)
                           if m and m["label"] == request.choices[0]), None)
        else:  # one stop: its notes say how
            wanted = _ANSWER_IN_FINISH.search(text.rsplit("\n## This request\n", 1)[-1])
        if wanted is None:
            return None
        stop = re.search(_STOP_LINE.format(label=re.escape(wanted["label"])), text, re.M)
        if wanted["what"] == "[<key>]":
            return f"{wanted['label']}: [{stop['key'] if stop and stop['key'] else 'Y'}]"
        return f"{wanted['label']}: {short_answer(stop['text'] if stop else '', self.label)}"


def short_answer(question: str, label: str) -> str:
    """A short, deterministic answer naming what was asked: ``Value for story_key?`` and ``What should role
    say in …?`` give ``story_key-by-fake-model`` and ``role-by-fake-model``; any other question a sentence."""
    slug = re.sub(r"\W+", "-", label).strip("-")
    match = re.search(r"^(?:Value for|What should) (\w+)", question)
    if match:
        return f"{match.group(1)}-by-{slug}"
    return f"yes, as the {label} would answer"
