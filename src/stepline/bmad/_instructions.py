"""A tolerant parser for BMAD ``instructions.xml|md`` files (SPEC R-F2).

Instructions are markdown with embedded XML-ish tags (``<step>``, ``<action>``, ``<check if>``, ``<ask>``,
``<goto>``, ``<template-output>``…) and are often not well-formed: tags left open, closed out of order, ``<``
inside attribute values, JSX inside code samples. :func:`parse_instructions` never fails: it returns an
instruction tree of small dataclasses plus a :class:`~stepline.formats._diagnostics.Diagnostic` (file:line)
for every repair it made. Unknown tags, code fences, inline code and comments are kept as text.

Every node carries the line it starts on and serialises to a plain JSON dict (:meth:`Node.to_dict`, reversed
by :func:`node_from_dict`) so it can be stored in ``StepSpec.meta``.
"""

from __future__ import annotations

import bisect
import html
import inspect
import re
from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar

from stepline.bmad._conditions import classify
from stepline.formats import Diagnostic, Severity

__all__ = [
    "Action",
    "Anchor",
    "Ask",
    "Check",
    "Checkpoint",
    "Critical",
    "Example",
    "Goto",
    "InvokeProtocol",
    "InvokeTask",
    "InvokeWorkflow",
    "Node",
    "Note",
    "Output",
    "Param",
    "ParseResult",
    "Step",
    "Substep",
    "TemplateOutput",
    "Text",
    "node_from_dict",
    "parse_instructions",
    "walk",
]

_RENAMED = {"if_": "if", "for_each": "for-each"}
_CONDITION_FIELDS = ("if_", "condition")


_FIELDS: dict[type, tuple[Field[Any], ...]] = {}


def _fields_of(cls: type) -> tuple[Field[Any], ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = fields(cls)
    return found


@dataclass(slots=True)
class Node:
    """Base of every instruction node: the kind (a class constant) and the line it starts on."""

    kind: ClassVar[str] = ""
    line: int

    def to_dict(self) -> dict[str, Any]:
        """Serialise to a plain JSON dict; empty fields are left out, conditions get a ``parsed`` form."""
        out: dict[str, Any] = {"type": self.kind}
        for spec in _fields_of(type(self)):
            value = getattr(self, spec.name)
            if value is None or value == "" or value is False or value == [] or value == {}:
                continue
            if spec.name == "children":
                out["children"] = [child.to_dict() for child in value]
            else:
                out[_RENAMED.get(spec.name, spec.name)] = value
        for name in _CONDITION_FIELDS:
            condition = getattr(self, name, None)
            if isinstance(condition, str):
                parsed = classify(condition, attribute=getattr(self, "attribute", None) or "if")
                if parsed is not None:
                    out["parsed"] = parsed.to_dict()
        return out


@dataclass(slots=True)
class Text(Node):
    """Markdown prose between tags, and any unknown tag, kept verbatim (indentation removed)."""

    kind: ClassVar[str] = "text"
    text: str = ""


@dataclass(slots=True)
class Step(Node):
    """``<step n goal …>``: one unit of the workflow; ``n`` is a label ("0.5", "13a"), not a number."""

    kind: ClassVar[str] = "step"
    n: str | None = None
    goal: str | None = None
    title: str | None = None
    optional: bool = False
    if_: str | None = None
    repeat: str | None = None
    for_each: str | None = None
    tag: str | None = None
    id: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)
    end_line: int | None = None


@dataclass(slots=True)
class Substep(Node):
    """``<substep n title>``: a titled group inside a step."""

    kind: ClassVar[str] = "substep"
    n: str | None = None
    title: str | None = None
    if_: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)


@dataclass(slots=True)
class Action(Node):
    """``<action [if]>``: something to do; may hold nested tags (a ``<goto>``)."""

    kind: ClassVar[str] = "action"
    text: str = ""
    if_: str | None = None
    children: list[Node] = field(default_factory=list)


@dataclass(slots=True)
class Check(Node):
    """``<check if>…</check>`` or ``<if selection|response>``: a block run only when its condition holds.

    ``attribute`` says where the condition came from: ``if`` (prose or expression) or ``selection`` /
    ``response`` (an answer to the preceding ``ask``). ``condition`` is None for a bare ``<check>``.
    """

    kind: ClassVar[str] = "check"
    condition: str | None = None
    attribute: str | None = None
    tag: str = "check"
    children: list[Node] = field(default_factory=list)


@dataclass(slots=True)
class Ask(Node):
    """``<ask [response] [if]>``: a question to the user; ``response`` names the variable for the answer.

    ``children`` holds answer handlers (``<if response="a">``) when the question has them.
    """

    kind: ClassVar[str] = "ask"
    text: str = ""
    response: str | None = None
    if_: str | None = None
    children: list[Node] = field(default_factory=list)


@dataclass(slots=True)
class Output(Node):
    """``<output [if]>``: text shown to the user."""

    kind: ClassVar[str] = "output"
    text: str = ""
    if_: str | None = None


@dataclass(slots=True)
class Goto(Node):
    """``<goto step|anchor>``, or a prose jump (``GOTO step 2a``, ``Skip to Step 5``) if ``prose``."""

    kind: ClassVar[str] = "goto"
    step: str | None = None
    anchor: str | None = None
    text: str = ""
    prose: bool = False

    @property
    def onward(self) -> bool:
        """A prose "Continue to Step N" / "Proceed to Step N": it says go on, so a step N that is not there means
        the step after this one (v6.0.x document-project's "Continue to Step 0.5" after its steps were renumbered)."""
        return self.prose and _PROSE_ONWARD.match(self.text) is not None


@dataclass(slots=True)
class Anchor(Node):
    """``<anchor id/>``: a target for ``<goto anchor>`` inside a step."""

    kind: ClassVar[str] = "anchor"
    id: str = ""


@dataclass(slots=True)
class Param(Node):
    """``<param>name: value</param>`` inside ``<invoke-workflow>``."""

    kind: ClassVar[str] = "param"
    name: str = ""
    value: str = ""


@dataclass(slots=True)
class InvokeWorkflow(Node):
    """``<invoke-workflow path>``: run another workflow as a child run, with ``params`` as its inputs."""

    kind: ClassVar[str] = "invoke-workflow"
    path: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    text: str = ""
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class InvokeTask(Node):
    """``<invoke-task [path]>``: run a task file; ``path`` is the attribute or the body's first task path."""

    kind: ClassVar[str] = "invoke-task"
    path: str | None = None
    text: str = ""
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class InvokeProtocol(Node):
    """``<invoke-protocol name/>``: run a runner protocol (``discover_inputs``)."""

    kind: ClassVar[str] = "invoke-protocol"
    name: str = ""
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class TemplateOutput(Node):
    """``<template-output [file]>var[, var…]</template-output>``: save the generated sections, checkpoint."""

    kind: ClassVar[str] = "template-output"
    variables: list[str] = field(default_factory=list)
    file: str | None = None


@dataclass(slots=True)
class Critical(Node):
    """``<critical>``: a rule the executor must keep."""

    kind: ClassVar[str] = "critical"
    text: str = ""


@dataclass(slots=True)
class Example(Node):
    """``<example>``: sample output shown to the executor; its content is never executed."""

    kind: ClassVar[str] = "example"
    text: str = ""


@dataclass(slots=True)
class Note(Node):
    """``<note>`` or ``<mandate>``: guidance for the executor (``tag`` keeps which)."""

    kind: ClassVar[str] = "note"
    text: str = ""
    tag: str = "note"


@dataclass(slots=True)
class Checkpoint(Node):
    """``<energy-checkpoint>`` / ``<checkpoint>``: a pause to check in with the user before going on."""

    kind: ClassVar[str] = "checkpoint"
    text: str = ""
    tag: str = "checkpoint"


_CLASSES: dict[str, type[Node]] = {
    cls.kind: cls
    for cls in (
        Text,
        Step,
        Substep,
        Action,
        Check,
        Ask,
        Output,
        Goto,
        Anchor,
        Param,
        InvokeWorkflow,
        InvokeTask,
        InvokeProtocol,
        TemplateOutput,
        Critical,
        Example,
        Note,
        Checkpoint,
    )
}
_UNRENAMED = {v: k for k, v in _RENAMED.items()}


def node_from_dict(data: dict[str, Any]) -> Node:
    """Rebuild a node (and its children) from :meth:`Node.to_dict` output."""
    cls = _CLASSES[data["type"]]
    names = {spec.name for spec in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = _UNRENAMED.get(key, key)
        if name not in names:
            continue
        kwargs[name] = [node_from_dict(child) for child in value] if name == "children" else value
    return cls(**kwargs)


def walk(nodes: list[Node]) -> Iterator[Node]:
    """Yield every node of the tree, depth first, in document order."""
    for node in nodes:
        yield node
        yield from walk(getattr(node, "children", []))


@dataclass(slots=True)
class ParseResult:
    """The instruction tree of one file and the repairs made while reading it."""

    nodes: list[Node]
    diagnostics: list[Diagnostic]

    def steps(self) -> list[Step]:
        """Return the top-level ``<step>`` nodes in document order."""
        return [node for node in self.nodes if isinstance(node, Step)]


# Tags whose content is structure (parsed) versus text (sliced verbatim up to the closing tag).
_CONTAINERS = {"workflow", "step", "substep", "action", "check", "if", "ask", "invoke-workflow"}
_RAW = {
    "output",
    "critical",
    "example",
    "note",
    "mandate",
    "template-output",
    "goto",
    "invoke-task",
    "param",
    "energy-checkpoint",
    "checkpoint",
}
_VOID = {"anchor", "invoke-protocol"}
_KNOWN = _CONTAINERS | _RAW | _VOID
_SELF_EXCLUSIVE = {"substep", "invoke-workflow"}  # opening one inside itself means the first is unclosed
_NEWLINE = re.compile("\n")
_STEP_OPEN = re.compile(r"<step\b", re.IGNORECASE)
_STEP_CLOSE = re.compile(r"</step\s*>", re.IGNORECASE)

_FENCE = re.compile(r"^[ \t]*(?P<fchar>`{3,}|~{3,})[^\n]*$", re.MULTILINE)
# Every token starts with '<' or '`', which lets the regex engine skip plain text quickly.
_TOKEN = re.compile(
    r"(?P<comment><!--)"
    r"|(?P<close></(?P<cname>[A-Za-z][\w:.-]*)\s*>)"
    r"|(?P<open><(?P<oname>[A-Za-z][\w:.-]*)"
    r"(?P<attrs>(?:\s+[^\s=/>\"'<]+(?:\s*=\s*(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s>\"'<]+))?)*)\s*(?P<self>/)?>)"
    r"|(?P<code>`+)",
)
_ATTR = re.compile(r"([^\s=/>\"'<]+)(?:\s*=\s*(?:\"([^\"\n]*)\"|'([^'\n]*)'|([^\s>\"'<]+)))?")
_PROSE_GOTO = re.compile(
    r"^(?:GOTO|go\s+to|jump\s+to|skip\s+to|proceed\s+to|continue\s+to|return\s+to)\s+step\s+"
    r"(?P<n>\d+(?:\.\d+)?[a-z]?)\b",
    re.IGNORECASE,
)
#: the whole text of a check that holds only its condition: ``If the trigger is unclear:`` (one line, a colon)
_PROSE_CONDITION = re.compile(r"(?:if|when|unless)\b[^\n]*:", re.IGNORECASE)
_PROSE_ONWARD = re.compile(r"^(?:continue|proceed)\s+to\s+step\b", re.IGNORECASE)
_TASK_PATH = re.compile(r"[^\s`'\"()]+\.(?:xml|md|yaml)\b")
_TASK_PATH_XML = re.compile(r"[^\s`'\"()]+\.xml\b")
_TRUE = {"true", "yes", "1"}


@dataclass(slots=True)
class _Frame:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[Node] = field(default_factory=list)


class _Parser:
    """One pass over the text with a stack of open tags; see :func:`parse_instructions`."""

    def __init__(self, text: str, path: str, first_line: int) -> None:
        self.text = text
        self.path = path
        self.first_line = first_line
        self.newlines = [m.start() for m in _NEWLINE.finditer(text)]
        self.step_opens = [m.start() for m in _STEP_OPEN.finditer(text)]
        self.step_closes = [m.start() for m in _STEP_CLOSE.finditer(text)]
        self.diagnostics: list[Diagnostic] = []
        self.stack: list[_Frame] = [_Frame("#root", {}, first_line)]
        self.pending = 0  # start of text not yet added to the current frame
        self.xml_fence: str | None = None  # the marker of the open ```xml block, parsed as markup

    def line_at(self, offset: int) -> int:
        return bisect.bisect_right(self.newlines, offset - 1) + self.first_line

    def warn(self, code: str, message: str, offset: int, severity: Severity = "warning") -> None:
        self.diagnostics.append(Diagnostic(severity, code, message, self.path, self.line_at(offset)))

    # -- text ------------------------------------------------------------------------------------------
    def flush(self, end: int) -> None:
        if end > self.pending:
            chunk = self.text[self.pending : end]
            if chunk.strip():
                self.stack[-1].children.append(Text(line=self.line_at(self.pending + _lead(chunk)), text=_clean(chunk)))
        self.pending = max(self.pending, end)

    # -- main loop -------------------------------------------------------------------------------------
    def run(self) -> ParseResult:
        pos = 0
        length = len(self.text)
        fences = list(_FENCE.finditer(self.text))
        next_fence = 0
        while pos < length:
            while next_fence < len(fences) and fences[next_fence].start() < pos:
                next_fence += 1
            fence = fences[next_fence] if next_fence < len(fences) else None
            match = _TOKEN.search(self.text, pos, fence.start() if fence is not None else length)
            if match is not None:
                pos = self.handle(match)
            elif fence is not None:
                pos = self.skip_fence(fence)
            else:
                break
        self.flush(length)
        while len(self.stack) > 1:
            frame = self.stack[-1]
            self.warn(
                "unclosed-tag",
                f"<{frame.tag}> opened on line {frame.line} is never closed; closed at the "
                f"end of the file (add </{frame.tag}>)",
                length,
                self._unclosed_severity(frame),
            )
            self.pop(length)
        return ParseResult(nodes=_merge_text(self.stack[0].children), diagnostics=self.diagnostics)

    def handle(self, match: re.Match[str]) -> int:
        start, end = match.start(), match.end()
        if match.group("comment") is not None:
            close = self.text.find("-->", end)
            if close < 0:
                self.warn(
                    "unclosed-comment",
                    "<!-- is never closed with -->; the rest of the file is read as text",
                    start,
                )
                return len(self.text)
            return close + 3
        if match.group("code") is not None:
            ticks = match.group("code")
            eol = self.text.find("\n", end)
            eol = len(self.text) if eol < 0 else eol
            closing = self.text.find(ticks, end, eol)
            return closing + len(ticks) if closing >= 0 else end
        if match.group("close") is not None:
            return self.close_tag(match.group("cname").lower(), start, end)
        name = match.group("oname").lower()
        if name not in _KNOWN:
            return end
        attrs = _parse_attrs(match.group("attrs"))
        return self.open_tag(name, attrs, start, end, self_closing=match.group("self") is not None)

    def skip_fence(self, match: re.Match[str]) -> int:
        """Skip a code block; an ```` ```xml ```` block is instruction markup, so it is parsed instead."""
        fchar = match.group("fchar")
        info = match.group(0).strip()[len(fchar) :].strip().lower()
        if self.xml_fence is not None and not info and fchar.startswith(self.xml_fence):
            self.xml_fence = None
            return match.end()
        if info == "xml" and self.xml_fence is None:
            self.xml_fence = fchar
            return match.end()
        closing = re.compile(rf"^[ \t]*{re.escape(fchar[0])}{{{len(fchar)},}}[ \t]*$", re.MULTILINE)
        found = closing.search(self.text, match.end() + 1)
        if found is None:
            self.warn(
                "unclosed-fence",
                f"code fence {fchar} is never closed; the rest of the file is read as text",
                match.start(),
            )
            return len(self.text)
        return found.end()

    # -- tags ------------------------------------------------------------------------------------------
    def open_tag(self, name: str, attrs: dict[str, str], start: int, end: int, *, self_closing: bool) -> int:
        self.flush(start)
        line = self.line_at(start)
        self.auto_close(name, start)
        if self_closing or name in _VOID:
            self.stack[-1].children.extend(self.build(name, attrs, line, [], "", end))
            self.pending = end
            return end
        if name in _RAW:
            return self.raw(name, attrs, line, start, end)
        self.stack.append(_Frame(name, attrs, line))
        self.pending = end
        return end

    def auto_close(self, name: str, offset: int) -> None:
        """Close tags a new ``name`` tag cannot sit inside (an open ``<step>`` before the next ``<step>``)."""
        tags = [frame.tag for frame in self.stack]
        top = self.stack[-1]
        if name == "step":
            if "step" in tags and self.steps_nest(offset, tags.count("step")):
                return
            cut = next((i for i in range(len(tags) - 1, 0, -1) if tags[i] == "step"), None)
            if cut is None:
                cut = next((i for i in range(1, len(tags)) if tags[i] != "workflow"), None)
        elif name == "action" and top.tag == "action" and any(isinstance(c, Text) for c in top.children):
            # `<action if="…">` may wrap actions as a block; an action that already has text is unclosed.
            cut = len(tags) - 1
        elif name in _SELF_EXCLUSIVE and name in tags[1:]:
            cut = len(tags) - 1 - tags[::-1].index(name)
        else:
            return
        if cut is None:
            return
        while len(self.stack) > cut:
            frame = self.stack[-1]
            self.warn(
                "unclosed-tag",
                f"<{frame.tag}> opened on line {frame.line} is not closed before the next "
                f"<{name}>; closed there (add </{frame.tag}>)",
                offset,
                self._unclosed_severity(frame),
            )
            self.pop(offset)

    def steps_nest(self, offset: int, depth: int) -> bool:
        """Whether a ``<step>`` at ``offset`` inside ``depth`` open steps is deliberately nested.

        It is when enough ``</step>`` follow to close it, the steps after it and the open ones too.
        """
        opens = len(self.step_opens) - bisect.bisect_left(self.step_opens, offset)
        closes = len(self.step_closes) - bisect.bisect_left(self.step_closes, offset)
        return closes >= opens + depth

    def raw(self, name: str, attrs: dict[str, str], line: int, start: int, end: int) -> int:
        """Read a text-only element: everything up to its closing tag."""
        closing = re.compile(rf"</{re.escape(name)}\s*>", re.IGNORECASE).search(self.text, end)
        limit = closing.start() if closing else len(self.text)
        if name != "example":
            intruder = _STRUCTURAL.search(self.text, end, limit)
            if intruder is not None:
                closing = None
                limit = intruder.start()
        if closing is None:
            if limit == len(self.text):
                eol = self.text.find("\n", end)
                limit = len(self.text) if eol < 0 else eol
            self.warn(
                "unclosed-tag",
                f"<{name}> opened on line {line} is never closed; its text ends on line "
                f"{self.line_at(limit)} (add </{name}>)",
                start,
            )
            after = limit
        else:
            after = closing.end()
        body = self.text[end:limit]
        self.stack[-1].children.extend(self.build(name, attrs, line, [], body, after))
        self.pending = after
        return after

    def close_tag(self, name: str, start: int, end: int) -> int:
        tags = [frame.tag for frame in self.stack]
        if name not in _KNOWN:
            return end
        if name not in tags[1:]:
            if name in _CONTAINERS:
                self.warn("stray-close-tag", f"</{name}> has no matching <{name}>; kept as text (remove it)", start)
            return end
        self.flush(start)
        while self.stack[-1].tag != name:
            frame = self.stack[-1]
            self.warn(
                "misnested-tag",
                f"<{frame.tag}> opened on line {frame.line} is closed by </{name}> on "
                f"line {self.line_at(start)}; add </{frame.tag}> before it",
                start,
                self._unclosed_severity(frame),
            )
            self.pop(start)
        self.pop(start, end)
        self.pending = end
        return end

    def pop(self, offset: int, end: int | None = None) -> None:
        """Close the innermost open tag: its text runs to ``offset``, the tag itself ends at ``end``."""
        self.flush(offset)
        frame = self.stack.pop()
        children = _merge_text(frame.children)
        self.stack[-1].children.extend(
            self.build(frame.tag, frame.attrs, frame.line, children, None, offset if end is None else end)
        )

    @staticmethod
    def _unclosed_severity(frame: _Frame) -> Severity:
        # The runner documents `<action if="…">` as inline: its closing tag is optional.
        return "info" if frame.tag == "action" and "if" in frame.attrs else "warning"

    # -- node building ---------------------------------------------------------------------------------
    def build(
        self, tag: str, attrs: dict[str, str], line: int, children: list[Node], body: str | None, end: int
    ) -> list[Node]:
        text = _clean(body) if body is not None else _text_of(children)
        elements = [child for child in children if not isinstance(child, Text)]
        get = attrs.get
        if tag == "workflow":
            return children
        if tag == "step":
            known = {"n", "goal", "title", "optional", "if", "repeat", "for-each", "tag", "id"}
            return [
                Step(
                    line=line,
                    n=get("n"),
                    goal=get("goal"),
                    title=get("title"),
                    optional=get("optional", "").lower() in _TRUE,
                    if_=get("if"),
                    repeat=get("repeat"),
                    for_each=get("for-each"),
                    tag=get("tag"),
                    id=get("id"),
                    attrs={k: v for k, v in attrs.items() if k not in known},
                    children=_prose_checks(children),
                    end_line=self.line_at(end),
                )
            ]
        if tag == "substep":
            return [
                Substep(
                    line=line,
                    n=get("n"),
                    title=get("title"),
                    if_=get("if"),
                    attrs={k: v for k, v in attrs.items() if k not in ("n", "title", "if")},
                    children=_prose_checks(children),
                )
            ]
        if tag == "action":
            jump = _PROSE_GOTO.match(text)
            if jump and not elements:
                goto = Goto(line=line, step=jump.group("n"), text=text, prose=True)
                if get("if") is None:
                    return [goto]
                return [Action(line=line, text=text, if_=get("if"), children=[goto])]
            return [Action(line=line, text=text, if_=get("if"), children=elements)]
        if tag in ("check", "if"):
            attribute = next((a for a in ("if", "selection", "response", "condition") if a in attrs), None)
            return [
                Check(
                    line=line,
                    condition=get(attribute) if attribute else None,
                    attribute=attribute,
                    tag=tag,
                    children=_prose_checks(children),
                )
            ]
        if tag == "ask":
            return [Ask(line=line, text=text, response=get("response"), if_=get("if"), children=elements)]
        if tag == "invoke-workflow":
            params = {p.name: p.value for p in elements if isinstance(p, Param)}
            rest = [c for c in children if not isinstance(c, Param)]
            return [
                InvokeWorkflow(
                    line=line,
                    path=get("path"),
                    params=params,
                    text=_text_of(rest),
                    attrs={k: v for k, v in attrs.items() if k != "path"},
                )
            ]
        return [self.build_leaf(tag, attrs, line, text)]

    def build_leaf(self, tag: str, attrs: dict[str, str], line: int, text: str) -> Node:
        get = attrs.get
        if tag == "output":
            return Output(line=line, text=text, if_=get("if"))
        if tag == "critical":
            return Critical(line=line, text=text)
        if tag == "example":
            return Example(line=line, text=text)
        if tag in ("note", "mandate"):
            return Note(line=line, text=text, tag=tag)
        if tag in ("energy-checkpoint", "checkpoint"):
            return Checkpoint(line=line, text=text, tag=tag)
        if tag == "template-output":
            names = [name.strip() for name in text.replace("\n", ",").split(",") if name.strip()]
            return TemplateOutput(line=line, variables=names, file=get("file"))
        if tag == "goto":
            step = get("step")
            if step is None and get("anchor") is None:
                jump = re.match(r"^(?:step\s+)?(?P<n>\d+(?:\.\d+)?[a-z]?)\b", text, re.IGNORECASE)
                step = jump.group("n") if jump else None
            return Goto(line=line, step=step, anchor=get("anchor"), text=text)
        if tag == "invoke-task":
            found = _TASK_PATH_XML.search(text) or _TASK_PATH.search(text)
            path = get("path") or (found.group(0) if found else None)
            return InvokeTask(line=line, path=path, text=text, attrs={k: v for k, v in attrs.items() if k != "path"})
        if tag == "param":
            name, _, value = text.partition(":")
            return Param(line=line, name=get("name", name.strip()), value=get("value", value.strip()))
        if tag == "anchor":
            return Anchor(line=line, id=get("id", ""))
        return InvokeProtocol(line=line, name=get("name", ""), attrs={k: v for k, v in attrs.items() if k != "name"})


_STRUCTURAL = re.compile(r"</?(?:step|substep|check|action|ask|workflow|invoke-workflow)\b", re.IGNORECASE)


def parse_instructions(text: str, *, path: str = "<instructions>", first_line: int = 1) -> ParseResult:
    """Parse an instructions file into an instruction tree; never raises on any text.

    Args:
        text: the file's content.
        path: the file, for diagnostics.
        first_line: the line number of ``text``'s first line (when parsing a slice of a file).
    """
    return _Parser(text, path, first_line).run()


def _parse_attrs(source: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for match in _ATTR.finditer(source):
        value = next((g for g in match.groups()[1:] if g is not None), "")
        attrs.setdefault(match.group(1).lower(), html.unescape(value))
    return attrs


def _lead(chunk: str) -> int:
    return len(chunk) - len(chunk.lstrip())


def _clean(chunk: str) -> str:
    return inspect.cleandoc(chunk.strip("\n")).strip() if chunk.strip() else ""


def _text_of(children: list[Node]) -> str:
    return "\n".join(child.text for child in children if isinstance(child, Text))


def _prose_checks(children: list[Node]) -> list[Node]:
    """Give a check that holds only its condition (``<check>If the trigger is unclear:</check>``, alpha.0-alpha.4)
    that condition and, as its body, the elements after it up to the next such check or the end of the
    enclosing element: what the text says is conditional, not run always."""
    out: list[Node] = []
    current: Check | None = None
    for child in children:
        text = _text_of(child.children).strip() if isinstance(child, Check) else ""
        if isinstance(child, Check) and child.condition is None and len(child.children) == 1 and \
                _PROSE_CONDITION.fullmatch(text):
            current = Check(line=child.line, condition=text.rstrip(":").strip(), attribute="if", tag=child.tag)
            out.append(current)
        elif current is not None and not isinstance(child, Step):
            current.children.append(child)
        else:
            out.append(child)
    return out


def _merge_text(children: list[Node]) -> list[Node]:
    merged: list[Node] = []
    for child in children:
        if isinstance(child, Text) and merged and isinstance(merged[-1], Text):
            merged[-1] = Text(line=merged[-1].line, text=f"{merged[-1].text}\n{child.text}")
        else:
            merged.append(child)
    return merged
