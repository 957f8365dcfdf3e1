"""What a BMAD step file asks of a person, read from its prose: its menu and its halts.

Pure (never imports the engine): the micro-file and the skill readers put what it finds in a step's ``meta``
(``menu``, ``halts``) and :mod:`stepline.stepchain._menus` turns that into options with routes.

* A **menu** is a ``[K] Label`` list a step presents (``Select an Option: [A] Advanced Elicitation [P] Party
  Mode [C] Continue``, ``Confirm … to [C] continue``, ``[1]`` … ``[n]``) with its ``IF K:`` handlers.
* A **halt** is a line that stops for the person without a menu (``HALT and wait for user confirmation to
  proceed``, ``HALT — wait for user input``, ``**HALT** — I am waiting for your numbered choice``). One that
  opens with a condition (``If empty, HALT and …``) or hangs from one (an item nested under ``If …:``) carries
  it as its ``condition``; one that ends the run (``HALT with status `blocked```) is not a halt for a person.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Halt", "folder_mode", "halt_menu", "halts_in", "is_continuation", "marks", "parse_menu", "prose_lines",
           "step_number"]

_FENCE_RE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*)$")
_MENU_LINE_RE = re.compile(r"\[|^#|\bif\b", re.IGNORECASE)
_MENU_OPTION_RE = re.compile(r"\[([A-Z][A-Z0-9]{0,3}|\d{1,2})\]([a-z]*)([^\[\]\n\"]*)")
_MENU_HANDLER_RE = re.compile(
    r"^[\s\-*#>]*\**\s*IF\s+['\"]?([A-Z][A-Z0-9]{0,3}|\d{1,2})\b['\"]?[^:\n]*:\**\s*(.*)$", re.IGNORECASE
)
_MENU_KINDS = {
    "C": ("continue", ("continue", "complete")),
    "A": ("advanced-elicitation", ("advanced",)),
    "P": ("party-mode", ("party",)),
    "X": ("exit", ("exit",)),
}
_NOT_MENU_KEYS = frozenset({"N", "URL"})
#: "HALT" followed (in the same sentence or the next) by waiting for, or asking, the person.
_HALT_RE = re.compile(r"\bhalt\b(?!\s+with\b)[*.:—–\s-]{0,6}(?:[^.\n]{0,40}?)\b(?:wait(?:ing)?\b|until (?:the )?user|"
                      r"ask (?:the )?(?:user|human)\b(?!\s*:\s*`\[)|for (?:the )?user|give (?:the )?(?:user|human))",
                      re.IGNORECASE)
_CONDITION_RE = re.compile(r"\b(?:if|when|unless|otherwise|once)\b", re.IGNORECASE)
_LIST_MARK = re.compile(r"^(?:[-*+]|\d+\.)\s+")
_NEAR_LINES = 4
#: ``- **Reshuffle** — replace the list``: a choice a halt ending in ``:`` lists below it.
_BOLD_BULLET_RE = re.compile(r"^\s*[-*+]\s+\*\*([^*]+?)\*\*")
#: A code span holding a YAML list (```stepsCompleted: [1]```): no option, unlike ```[E] Exit``` or
#: ```**Confirm … to [C] continue:**```.
_CODE_SPAN_RE = re.compile(r"`[^`]*?[\w\"']:\s*\[[^`]*`")
#: the line before a fenced block the step presents: "Present choice to user:", "Display:", "### 3. Activity Menu"
_PRESENTS_RE = re.compile(r"(?i)^(?:.*\b(?:present|display|show)\b[^:]*:\**"
                          r"|#{1,6}\s.*\b(?:menu|options|choices?)\b.*)$")
#: a line of such a block offering an option: `[P] Prototyping — …`, `**[1] Walk through** - …`
_OPTION_LINE_RE = re.compile(r"^\s*(?:[-*]\s+)?\**\[([A-Z][A-Z0-9]{0,3}|\d{1,2})\]\**\s*\S")
_FOLDER_MODES = {"c": "create", "e": "edit", "v": "validate", "b": "brief"}
_STEP_NUMBER_RE = re.compile(r"(?:^|-)(\d+)([a-z]?)(?=-|$)")
_STEP_ONLY_RE = re.compile(r"step-0*(\d+)([a-z]?)")


def prose_lines(body: str, first_line: int, *, include_fenced: bool = False) -> list[tuple[int, str]]:
    """Return (1-based line, text) of ``body`` outside fenced code blocks (examples are not instructions);
    ``first_line`` is the line ``body`` starts on in its file.

    Fences follow CommonMark: a block opened by N backticks closes only at N or more of the same character,
    so a ```` block may quote ``` lines.
    """
    prose = []
    fence = ""
    lines = body.splitlines()
    presented = False
    for offset, line in enumerate(lines):
        match = _FENCE_RE.match(line)
        if match and not fence:
            fence = match[1]
            presented = _presented(lines, offset)
        elif match and match[1][0] == fence[0] and len(match[1]) >= len(fence) and not line.strip()[len(match[1]):]:
            fence = ""
        elif not fence or include_fenced or presented:
            prose.append((first_line + offset, line))
    return prose


def _presented(lines: list[str], start: int) -> bool:
    """Whether the fenced block opening at ``lines[start]`` is a menu the step presents, not an example: the
    line before it says to present it (``Present choice to user:``, ``Display:``) or is a heading naming a menu
    (``### 3. Activity Menu``), and two or more of its lines offer ``[K] Label`` options."""
    before = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
    if not _PRESENTS_RE.search(before):
        return False
    inside = []
    for line in lines[start + 1:]:
        if _FENCE_RE.match(line):
            break
        inside.append(line)
    return sum(1 for line in inside if _OPTION_LINE_RE.match(line)) >= 2


def folder_mode(name: str) -> str:
    """The mode a step folder serves: ``steps-c`` create, ``steps-v`` validate, ``steps-e`` edit, ``steps-b``
    brief, ``steps-<x>`` or ``<x>-steps`` x; ``steps`` itself is the folder's name."""
    if name.startswith("steps-"):
        suffix = name[len("steps-"):]
        return _FOLDER_MODES.get(suffix, suffix)
    if name.endswith("-steps"):
        return name[: -len("-steps")]
    return name


def step_number(stem: str) -> tuple[int, str] | None:
    """A step file's number and letter by its stem: ``step-02-plan`` (2, ""), ``step-02b-x`` (2, "b")."""
    match = _STEP_NUMBER_RE.search(stem)
    return (int(match[1]), match[2]) if match else None


def marks(entry: Any, stem: str) -> bool:
    """Whether a ``stepsCompleted`` (or ``lastStep``) entry names the step file ``stem``: by number (``2``, ``"2"``:
    ``step-02-plan``, not ``step-02b-x``) or by name (``step-02-plan``, with or without ``.md``; ``step-02``)."""
    if isinstance(entry, bool) or entry is None:
        return False
    if isinstance(entry, int) or str(entry).strip().isdigit():
        return step_number(stem) == (int(entry), "")
    text = str(entry).strip().removesuffix(".md").rsplit("/", 1)[-1]
    given = _STEP_ONLY_RE.fullmatch(text)
    return text == stem or (given is not None and step_number(stem) == (int(given[1]), given[2]))


def is_continuation(stem: str) -> bool:
    """Whether a step file (by its stem) continues a document already started: ``step-01b-continue``,
    ``step-01b-continuation``, ``step-01b-resume``."""
    return "continu" in stem or "resum" in stem


def _menu_kind(key: str, label: str, handler: str) -> str:
    kind, words = _MENU_KINDS.get(key, ("custom", ()))
    lowered = label.lower()
    if (
        any(lowered.startswith(w) for w in words)
        or (key == "A" and ("advancedElicitation" in handler or "advanced-elicitation" in handler))
        or (key == "P" and ("partyMode" in handler or "party-mode" in handler))
    ):
        return kind
    return "custom"


def _options_on(line: str) -> list[tuple[str, str]]:
    """The ``[K] Label`` options written on one line, in order."""
    found = []
    for match in _MENU_OPTION_RE.finditer(line):
        key = match[1]
        if key in _NOT_MENU_KEYS:
            continue
        label = (key + match[2] if match[2] else "") + match[3]
        label = re.split(r"\s+[-—–]\s+", label.replace("*", "").replace("`", "").strip(), maxsplit=1)[0].strip(" :")
        if label:
            found.append((key, label))
    return found


def parse_menu(prose: list[tuple[int, str]]) -> list[dict[str, Any]]:
    """Parse the ``[K] Label`` options a step (or a router) presents and their ``IF K:`` handlers.

    Options indented under a condition (``If existing session files are found:``) are a menu only some runs
    present: the step's menu when it has no other.
    """
    options: dict[str, dict[str, Any]] = {}
    conditional: dict[str, dict[str, Any]] = {}
    handlers: dict[str, tuple[str, int]] = {}
    in_menu = False
    for index, (line_no, line) in enumerate(prose):
        if not _MENU_LINE_RE.search(line):
            continue
        heading = _HEADING_RE.match(line)
        if heading:
            title = heading[2].lower()
            in_menu = (
                ("menu" in title and "collaboration" not in title) or title.startswith("if ") or ("selection" in title)
            )
        handler = _MENU_HANDLER_RE.match(line)
        if handler and (in_menu or "load" in line.lower() or "execute" in line.lower()):
            handlers.setdefault(handler[1].upper(), (handler[2].strip(), line_no))
        if not (in_menu or "select" in line.lower() or line.lstrip().startswith(("**[", "[", "- **[", "`["))):
            continue
        under = _indent(line) > 0 and _condition(prose, index, "")[1] is not None
        for key, label in _options_on(_CODE_SPAN_RE.sub("", line)):
            (conditional if under else options).setdefault(key, {"key": key, "label": label, "line": line_no})
    menu = []
    options = options or conditional
    for key, option in options.items():
        handler_text, _ = handlers.get(key, ("", 0))
        option["handler"] = handler_text
        option["kind"] = _menu_kind(key, option["label"], handler_text)
        menu.append(option)
    return menu


@dataclass(frozen=True, slots=True)
class Halt:
    """A line of a step file that stops for the person (see the module doc): its line, its text, the options
    written on it or just above it (``[C] Complete Workflow``), and the condition it is under (None: always)."""

    line: int
    text: str
    options: tuple[tuple[str, str], ...]
    condition: str | None = None

    def as_meta(self) -> dict[str, Any]:
        """The halt as a step's ``meta["halts"]`` entry (a WorkflowSpec's meta is plain data)."""
        return {"line": self.line, "text": self.text, "options": [list(o) for o in self.options],
                "condition": self.condition}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _condition(lines: list[tuple[int, str]], index: int, before: str) -> tuple[bool, str | None]:
    """``(the runtime's, condition)`` for a halt: its condition is the same line's words before HALT, else the
    line it hangs from — the nearest line above indented less (an item nested under ``If …:``), or for a halt
    at the margin the lead-in right above it ending in ``:``. A nested halt under a line that states no
    condition (an option's handler) is the executor's, not the runtime's."""
    opened = before.rstrip(" *")
    sentence = "" if opened.endswith((".", "!", "?")) else re.split(r"(?<=[.!?;])\s+", opened)[-1]
    if _CONDITION_RE.search(sentence):
        return True, sentence.strip(" ,:—-*") or before.strip(" ,:—-*")
    text = lines[index][1]
    depth = _indent(text)
    for _, above in reversed(lines[:index]):
        if not above.strip():
            if depth == 0:
                return True, None
            continue
        if _HEADING_RE.match(above):
            return depth == 0, None
        stripped = _LIST_MARK.sub("", above.strip())
        if depth == 0:
            leads = stripped.rstrip("*").endswith(":") and _CONDITION_RE.search(stripped)
            return True, stripped if leads else None
        if _indent(above) < depth:
            return (True, stripped) if _CONDITION_RE.search(stripped) else (False, None)
    return depth == 0, None


def halts_in(prose: list[tuple[int, str]]) -> list[Halt]:
    """The halts of a step file's prose lines (see :func:`prose_lines`), in order."""
    found = []
    for index, (line_no, line) in enumerate(prose):
        match = _HALT_RE.search(line)
        if match is None:
            continue
        options = _options_on(_CODE_SPAN_RE.sub("", line))
        for _, near in reversed(prose[max(0, index - _NEAR_LINES):index]):
            if options or _HEADING_RE.match(near):
                break
            options = _options_on(_CODE_SPAN_RE.sub("", near))
        if not options and line.rstrip(" *").endswith(":"):
            options = _bulleted_choices(prose[index + 1:])
        runtime, condition = _condition(prose, index, line[:match.start()])
        if runtime:
            found.append(Halt(line_no, line.strip(), tuple(options), condition))
    return found


def _bulleted_choices(following: list[tuple[int, str]]) -> list[tuple[str, str]]:
    """The choices a halt lists below it as bold bullets (``- **Proceed** — no further elicitation``), keyed by
    their initials (by number when two share one); a list without bold labels is none."""
    labels: list[str] = []
    for _, line in following:
        if not line.strip():
            if labels:
                break
            continue
        bullet = _BOLD_BULLET_RE.match(line)
        if _LIST_MARK.match(line.lstrip()) is None:
            break
        if bullet is not None:
            labels.append(bullet[1].strip(" :"))
    initials = [label[:1].upper() for label in labels]
    unique = len(set(initials)) == len(initials)
    return [(initials[i] if unique else str(i + 1), label) for i, label in enumerate(labels)]


def halt_menu(halts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The menu a step without one presents at its halt (``meta["halts"]``, see :meth:`Halt.as_meta`): the
    options of its last unconditional halt (the one that gates the way on), ``[C] Continue`` when it writes
    none; no halt, no menu."""
    always = [h for h in halts if h.get("condition") is None]
    if not always:
        return []
    halt = always[-1]
    options = [tuple(o) for o in halt.get("options") or []] or [("C", "Continue")]
    return [{"key": key, "label": label, "line": halt["line"], "handler": "", "kind": _menu_kind(key, label, ""),
             "halt": halt["text"]} for key, label in options]
