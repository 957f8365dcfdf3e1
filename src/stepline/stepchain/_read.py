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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from stepline.executors import MenuOption

__all__ = ["Halt", "Listed", "Menu", "Option", "Route", "bulleted_choices", "condition_of", "folder_mode", "halt_menu",
           "halts_in", "is_continuation", "marks", "menus_in", "parse_menu", "prose_lines", "step_number"]

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
_HANDLES_RE = re.compile(r"(?i)^[\s\-*]*(?:if|when|on)\b[^:\[]{0,30}\b(?:selects?|chooses?|picks?|enters?|types?)\b")
#: "HALT" followed (in the same sentence or the next) by waiting for, or asking, the person.
_HALT_RE = re.compile(r"\bhalt\b(?!\s+with\b)[*.:—–\s-]{0,6}(?:[^.\n]{0,40}?)\b(?:wait(?:ing)?\b|until (?:the )?user|"
                      r"ask (?:the )?(?:user|human)\b(?!\s*:\s*`\[)|for (?:the )?user|give (?:the )?(?:user|human))",
                      re.IGNORECASE)
_CONDITION_RE = re.compile(r"\b(?:if|when|unless|otherwise|once)\b", re.IGNORECASE)
#: a line that only names what follows it: ``**Continuation Protocol:**``
_BOLD_LABEL_RE = re.compile(r"^\*\*[^*]{1,60}?(?::\*\*|\*\*:)$")
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


RouteKind = Literal["goto", "elicit", "party", "exit", "local"]


@dataclass(frozen=True, slots=True)
class Route:
    """Where choosing an option leads: ``goto`` a step (``target``; None ends the workflow), ``elicit`` / ``party``
    (advanced elicitation, party mode, then the menu again), ``exit`` (stop, resumable), ``local`` (the executor
    acts on it inside the step); see :mod:`stepline.stepchain._menus`."""

    kind: RouteKind
    target: str | None = None


@dataclass(frozen=True, slots=True)
class Option:
    """One option of a step's menu (or of a choice its prose offers) and its route."""

    key: str
    label: str
    route: Route
    handler: str = ""
    default: bool = False

    def as_menu_option(self) -> MenuOption:
        """The protocol's form, sent to executors."""
        from stepline.executors import MenuOption  # here: reading a step needs no executor

        return MenuOption(key=self.key, label=self.label, default=self.default,
                          side_trip=self.route.kind in ("elicit", "party"))


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


def _menu_lines(prose: list[tuple[int, str]]) -> tuple[list[tuple[int, str, str, bool]], dict[str, tuple[str, int]]]:
    """The ``[K] Label`` options a step presents, each as ``(prose index, key, label, under a condition)``, and
    the ``IF K:`` handlers, by key (see :func:`parse_menu`)."""
    found: list[tuple[int, str, str, bool]] = []
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
        if _HANDLES_RE.search(line):
            continue  # ``If user selects **[1]** (continue): …`` says what an option does; it offers none
        under = _indent(line) > 0 and _condition(prose, index, "")[1] is not None
        for key, label in _options_on(_CODE_SPAN_RE.sub("", line)):
            found.append((index, key, label, under))
    return found, handlers


def parse_menu(prose: list[tuple[int, str]]) -> list[dict[str, Any]]:
    """Parse the ``[K] Label`` options a step (or a router) presents and their ``IF K:`` handlers, as one menu.

    Options indented under a condition (``If existing session files are found:``) are a menu only some runs
    present: the step's menu when it has no other. :func:`menus_in` keeps each menu apart.
    """
    options: dict[str, dict[str, Any]] = {}
    conditional: dict[str, dict[str, Any]] = {}
    lines, handlers = _menu_lines(prose)
    for index, key, label, under in lines:
        (conditional if under else options).setdefault(key, {"key": key, "label": label, "line": prose[index][0]})
    menu = []
    options = options or conditional
    for key, option in options.items():
        handler_text, _ = handlers.get(key, ("", 0))
        option["handler"] = handler_text
        option["kind"] = _menu_kind(key, option["label"], handler_text)
        menu.append(option)
    return menu


@dataclass(frozen=True, slots=True)
class Menu:
    """One menu a step presents: where, the line it starts on as written, its options (key, label, kind,
    handler), the condition it is under (None: every run presents it) and the lines it spans."""

    line: int
    text: str
    options: tuple[dict[str, Any], ...]
    condition: str | None
    lines: tuple[int, ...]


_MENU_GAP = 8
_RANGE_RE = re.compile(r"\[(\d{1,2})\s*[-–]\s*(\d{1,2})\](?!:)"
                       r"|\b(?:enter|type|reply\s+with|choose|pick|select)\s+(\d{1,2})\s*[-–]\s*(\d{1,2})(?=\s*(?:[,.)?!]|or\b|$))",
                       re.IGNORECASE)


def menus_in(prose: list[tuple[int, str]]) -> list[Menu]:
    """Every menu of a step's prose, each apart: options on nearby lines under the same condition are one menu;
    a heading, another condition, a key shown again or a gap of more than a few lines starts another. A range
    (``[1-7]``, ``Enter 1-7``) stands for its numbers: the numbered options it spans, else one option each."""
    lines, handlers = _menu_lines(prose)
    groups: list[list[tuple[int, str, str, str | None]]] = []
    for index, key, label, _ in lines:
        condition = condition_of(prose, index)
        last = groups[-1][-1] if groups else None
        heading_between = last is not None and any(_HEADING_RE.match(text) for _, text in prose[last[0] + 1:index])
        if (last is None or heading_between or condition != last[3] or index - last[0] > _MENU_GAP
                or any(key == k for _, k, _, _ in groups[-1])):
            groups.append([])
        groups[-1].append((index, key, label, condition))
    menus = [_menu(prose, group, handlers) for group in groups]
    return _ranges(prose, menus, handlers)


def _menu(prose: list[tuple[int, str]], group: list[tuple[int, str, str, str | None]],
          handlers: dict[str, tuple[str, int]]) -> Menu:
    options = []
    for _, key, label, _ in group:
        handler = handlers.get(key, ("", 0))[0]
        options.append({"key": key, "label": label, "handler": handler, "kind": _menu_kind(key, label, handler)})
    first = group[0][0]
    indices = sorted({index for index, *_ in group})
    return Menu(prose[first][0], prose[first][1].strip(), tuple(options), group[0][3],
                tuple(prose[i][0] for i in indices))


def _ranges(prose: list[tuple[int, str]], menus: list[Menu], handlers: dict[str, tuple[str, int]]) -> list[Menu]:
    """Menus with each written range (``[1-7]``, ``Enter 1-7``) expanded: a range whose numbers a menu above it
    already offers adds nothing; otherwise each number is an option, labelled from a numbered list above it."""
    out = list(menus)
    for index, (line_no, line) in enumerate(prose):
        for match in _RANGE_RE.finditer(line):
            low, high = (int(match[1]), int(match[2])) if match[1] else (int(match[3]), int(match[4]))
            if not 1 < high - low + 2 <= 21 or _CODE_SPAN_RE.search(line):
                continue
            keys = [str(n) for n in range(low, high + 1)]
            if any({o["key"] for o in m.options} >= set(keys) and m.line <= line_no for m in out):
                continue
            labels = _numbered_labels(prose[:index])
            options = tuple({"key": k, "label": labels.get(k, f"{k}"), "handler": handlers.get(k, ("", 0))[0],
                             "kind": "custom"} for k in keys)
            out.append(Menu(line_no, line.strip(), options, condition_of(prose, index), (line_no,)))
    return sorted(out, key=lambda m: m.line)


_NUMBERED_RE = re.compile(r"^\s*(?:\*\*)?(\d{1,2})[.)]\s+(?:\*\*)?([^*\n]+?)(?:\*\*)?(?:\s+[-—–:(].*)?$")


def _numbered_labels(above: list[tuple[int, str]]) -> dict[str, str]:
    """The labels of the numbered list closest above (``1. **Structured Thinking** — …``), by number."""
    labels: dict[str, str] = {}
    for _, line in reversed(above):
        match = _NUMBERED_RE.match(line)
        if match and match[1] not in labels:
            labels[match[1]] = match[2].strip(" *:")
        elif labels and _HEADING_RE.match(line):
            break
    return labels


def condition_of(prose: list[tuple[int, str]], index: int) -> str | None:
    """The condition the line ``prose[index]`` is under: the line it is nested under when that states one, or
    for a line at the margin the lead-in right above it (``If existing work is found:``) or the heading over it
    (``### If the user chose Resume``); None when it is under none."""
    _, condition = _condition(prose, index, "")
    if condition is not None:
        return condition
    if _indent(prose[index][1]) == 0:
        for _, above in reversed(prose[:index]):
            heading = _HEADING_RE.match(above)
            if heading:
                title = heading[2].strip(" *#")
                # ``### If the user chose Resume``; ``## Story Breakdown (optional, interactive-only)``
                conditional = re.match(r"(?i)(?:\d+\.\s*)?(?:if|when|unless|otherwise)\b", title) or \
                    re.search(r"(?i)\((?:optional|if\s+applicable)\b", title)
                return title if conditional else None
    return None


@dataclass(frozen=True, slots=True)
class Halt:
    """A line of a step file that stops for the person (see the module doc): its line, its text, the options
    written on it or just above it (``[C] Complete Workflow``), and the condition it is under (None: always)."""

    line: int
    text: str
    options: tuple[tuple[str, str], ...]
    condition: str | None = None
    #: the line of the heading over it (0: none): a point of the person's between the two is what it waits for
    section: int = 0

    def as_meta(self) -> dict[str, Any]:
        """The halt as a step's ``meta["halts"]`` entry (a WorkflowSpec's meta is plain data)."""
        return {"line": self.line, "text": self.text, "options": [list(o) for o in self.options],
                "condition": self.condition, "section": self.section}


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
    item = depth == 0 and _LIST_MARK.match(text.strip()) is not None
    label = False
    for _, above in reversed(lines[:index]):
        if not above.strip():
            if depth == 0 and not item:
                return True, None
            continue
        if _HEADING_RE.match(above):
            return depth == 0, None
        stripped = _LIST_MARK.sub("", above.strip())
        if depth == 0:
            if item and _LIST_MARK.match(above.strip()):
                continue  # a sibling item (or one's nested line): the list's lead-in is above it
            if item and not label and _BOLD_LABEL_RE.match(stripped):
                label = True  # ``**Continuation Protocol:**`` names the list; the lead-in above it states the case
                continue
            leads = stripped.rstrip("*").endswith(":") and _CONDITION_RE.search(stripped)
            return True, _last_clause(stripped) if leads else None
        if _indent(above) < depth:
            return (True, stripped) if _CONDITION_RE.search(stripped) else (False, None)
    return depth == 0, None


def _last_clause(lead: str) -> str:
    """The sentence of a lead-in that states its condition: ``Assess X. If overlap is significant:`` -> its last."""
    sentences = [part for part in re.split(r"(?<=[.!?])\s+", lead) if part.strip()]
    found = [part for part in sentences if _CONDITION_RE.search(part)]
    return (found[-1] if found else lead).strip()


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
            options = list(bulleted_choices(prose[index + 1:], bold_only=True).options)
        runtime, condition = _condition(prose, index, line[:match.start()])
        section = next((number for number, text in reversed(prose[:index]) if _HEADING_RE.match(text)), 0)
        if runtime:
            found.append(Halt(line_no, line.strip(), tuple(options), condition, section))
    return found


@dataclass(frozen=True, slots=True)
class Listed:
    """The choices a list under a lead-in offers: ``(key, label)`` each, and the lines of the list."""

    options: tuple[tuple[str, str], ...]
    lines: tuple[int, ...]


_ITEM_RE = re.compile(r"^(?P<mark>[-*+]|(?P<n>\d{1,2})[.)]|(?P<letter>[a-zA-Z])[.)](?=\s+[A-Z\[]))\s+(?P<text>.*)$")
_ITEM_KEY_RE = re.compile(r"^\**\s*\[(?P<k>[A-Za-z0-9]{1,4})\]\**\s*")


def bulleted_choices(following: list[tuple[int, str]], *, depth: int = 0, bold_only: bool = False) -> Listed:
    """The choices listed right below a lead-in (``Offer the choice:``, a halt ending in ``:``): the items of the
    list that follows, at its own indentation (items nested deeper are their details). An item's label is its
    bold text (``- **Fast path** — …``), its ``[K]`` key and text, or its text up to a dash, colon or parenthesis;
    with ``bold_only`` only bold labels count. Keyed by ``[K]``, by number for a numbered list, else by initials
    (by position when two share one). A paragraph ends the list."""
    labels: list[tuple[str | None, str]] = []
    lines: list[int] = []
    level: int | None = None
    numbered: bool | None = None
    titled = False
    for line_no, raw in following:
        line = _QUOTED_RE.sub("", raw)
        if not line.strip():
            if labels and level is not None and not _continues(following, line_no, level):
                break
            continue
        item = _ITEM_RE.match(line.strip())
        indent = _indent(line)
        if item is None and level is None and not titled and _TITLE_RE.match(line.strip()):
            titled = True  # the question the list answers (``> **How would you like to handle them?**``)
            continue
        if item is None or (level is None and indent < depth):
            if level is not None and indent > level:
                continue  # a paragraph of an item
            break
        if level is None:
            level = indent
        if indent > level:
            continue
        if indent < level or (numbered is not None and numbered != bool(item["n"] or item["letter"])):
            break  # the list ends (a bulleted list of what each numbered option does follows it)
        numbered = bool(item["n"] or item["letter"])
        text = item["text"].strip()
        bold = _BOLD_BULLET_RE.match(line)
        keyed = _ITEM_KEY_RE.match(text)
        if bold_only and bold is None:
            continue
        if keyed:
            label = _label(text[keyed.end():])
            labels.append((keyed["k"].upper(), label))
        elif bold is not None:
            labels.append((item["n"] or item["letter"], bold[1].strip(" :.")))
        else:
            labels.append((item["n"] or item["letter"], _label(text) or text.strip()))
        lines.append(line_no)
    labels = [(key, label) for key, label in labels if label]
    initials = [label[:1].upper() for _, label in labels]
    unique = len(set(initials)) == len(initials) and all(i.isalnum() for i in initials)
    keyed_all = all(key for key, _ in labels)
    options = tuple((key if keyed_all and key else initials[i] if unique else str(i + 1), label)
                    for i, (key, label) in enumerate(labels))
    return Listed(options, tuple(lines))


_QUOTED_RE = re.compile(r"^\s*>\s?")
_TITLE_RE = re.compile(r"^\*\*[^*]+\*\*:?$|^[^.]*\?\**$")


def _continues(following: list[tuple[int, str]], after: int, level: int) -> bool:
    """Whether the list goes on after a blank line (its next non-blank line is an item at its level)."""
    for line_no, line in following:
        if line_no <= after or not line.strip():
            continue
        line = _QUOTED_RE.sub("", line)
        return _ITEM_RE.match(line.strip()) is not None and _indent(line) == level
    return False


def _label(text: str) -> str:
    text = text.replace("`", "")
    bold = re.match(r"^\*\*([^*]+)\*\*", text)
    if bold:
        return bold[1].strip(" :.")
    label = re.split(r"\s+[-—–]\s+|:\s|\s\(|\.\s", text.replace("*", ""), maxsplit=1)[0].strip(" :.")[:80]
    return re.sub(r"[;,]?\s*\b(?:or|and)$", "", label).strip(" ;,.")


_PERSON_POINTS = frozenset({"question", "choice", "confirm", "loop"})


def halt_menu(halts: list[dict[str, Any]], points: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The menu a step without one presents at its halt (``meta["halts"]``, see :meth:`Halt.as_meta`): the
    options of its last unconditional halt (the one that gates the way on), ``[C] Continue`` when it writes
    none; no halt, no menu. A halt that waits for a point of the step's plan (``points``, ``meta["points"]``: a
    question or choice of the person's under the same heading, before it) is that point's wait, asked with it:
    no menu of its own."""
    asked = [int(p["line"]) for p in points if p.get("kind") in _PERSON_POINTS]
    always = [h for h in halts if h.get("condition") is None
              and not any(int(h.get("section") or 0) < line < int(h["line"]) for line in asked)]
    if not always:
        return []
    halt = always[-1]
    options = [tuple(o) for o in halt.get("options") or []] or [("C", "Continue")]
    return [{"key": key, "label": label, "line": halt["line"], "handler": "", "kind": _menu_kind(key, label, ""),
             "halt": halt["text"]} for key, label in options]
