"""A skill's or a step's prose read into its plan: every point where the text hands the turn to the person, every
file it routes to and every skill it hands over to, in text order.

Pure (never imports the engine), so the families' readers use it; :func:`stepline.families.read_plan` composes a
workflow's :class:`Plan` from its steps. A :class:`Point` is one of:

* ``question`` (a free-text answer), ``choice`` (options the text presents: a ``[K]`` menu, a numbered, bulleted
  or bold list after a line that offers it, an ``AskUserQuestion`` block; never options parsed from other prose),
  ``confirm`` (yes / no / adjust), ``loop`` (a conversation that ends when the person says so);
* ``route`` (a file the text says to load, route to, read and follow, resolved against the skill's folder; or a
  section of the same document it jumps to), ``handover`` (another skill invoked or forwarded to);
* ``unclassified``: a sentence that speaks of the person's turn but fits none of the above, kept, never dropped.

A point under a condition (``If ambiguous, ask.``, an item nested under ``If …:``, a menu only some runs present)
carries it. CCW v7 skills write their choices as ``AskUserQuestion({...})`` blocks and their phases as an
execution flow naming ``phases/*.md``; ``-y`` (auto mode) answers with the default, noted on each point.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from stepline._placeholders import Kind, find
from stepline.formats import Diagnostic
from stepline.stepchain._read import (
    Option,
    Route,
    bulleted_choices,
    condition_of,
    halts_in,
    menus_in,
    prose_lines,
)

__all__ = ["Plan", "PlanStep", "Point", "PointKind", "auto_mode_of", "read_points", "with_condition"]


class PointKind(StrEnum):
    """What a point of a plan is (see the module doc)."""

    QUESTION = "question"
    CHOICE = "choice"
    CONFIRM = "confirm"
    LOOP = "loop"
    ROUTE = "route"
    HANDOVER = "handover"
    UNCLASSIFIED = "unclassified"


#: the kinds that hand the turn to the person
PERSON_KINDS = frozenset({PointKind.QUESTION, PointKind.CHOICE, PointKind.CONFIRM, PointKind.LOOP,
                          PointKind.UNCLASSIFIED})


@dataclass(frozen=True, slots=True)
class Point:
    """One point of a step's text (see the module doc): ``text`` as written, where it is, and by kind its options
    (a choice), the condition it is under, its ``target`` as written (a route's file, a hand-over's skill) and
    where that resolves (None: not found, flagged), what ends a loop, the default option, and what the auto
    mode (``-y``) does there."""

    kind: PointKind
    text: str
    file: Path
    line: int
    options: tuple[Option, ...] = ()
    condition: str | None = None
    target: str | None = None
    resolved: Path | None = None
    ends_when: str | None = None
    default: str | None = None
    #: a route to a section of the same document (``jump to Step 3``, ``Run `## Reviewer Gate```): its title
    section: str | None = None
    #: the person may pick several options (``multiSelect: true``)
    multi: bool = False
    #: what the auto mode (``-y``) does here, when the text says
    auto: str | None = None

    @property
    def unresolved(self) -> bool:
        """A route or hand-over whose target was not found."""
        return self.kind in (PointKind.ROUTE, PointKind.HANDOVER) and self.resolved is None and self.section is None

    def to_json(self) -> dict[str, Any]:
        """Plain data (for ``stepline plan --json`` and a step's ``meta``); empty fields left out."""
        out: dict[str, Any] = {"kind": self.kind.value, "text": self.text, "file": str(self.file), "line": self.line}
        if self.options:
            out["options"] = [{"key": o.key, "label": o.label, **({"route": o.route.target} if o.route.target
                                                                  else {})} for o in self.options]
        for name in ("condition", "target", "ends_when", "default", "section", "auto"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.resolved is not None:
            out["resolved"] = str(self.resolved)
        if self.unresolved:
            out["unresolved"] = True
        if self.multi:
            out["multi"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Point:
        """The point :meth:`to_json` wrote."""
        options = tuple(Option(str(o["key"]), str(o["label"]),
                               Route("goto", o["route"]) if o.get("route") else Route("local"))
                        for o in data.get("options") or [])
        return cls(kind=PointKind(data["kind"]), text=str(data["text"]), file=Path(data["file"]),
                   line=int(data["line"]), options=options, condition=data.get("condition"),
                   target=data.get("target"), resolved=Path(data["resolved"]) if data.get("resolved") else None,
                   ends_when=data.get("ends_when"), default=data.get("default"), section=data.get("section"),
                   multi=bool(data.get("multi")), auto=data.get("auto"))


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a workflow's plan: the same ``id`` the family's driver runs it under (``section-discovery``,
    ``step-02-plan``, a legacy step's label), its title, kind (``section``, ``step-file``, ``route``, …), where its
    text starts, and its points in text order."""

    id: str
    title: str
    kind: str
    file: Path
    line: int
    points: tuple[Point, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return {"id": self.id, "title": self.title, "kind": self.kind, "file": str(self.file), "line": self.line,
                "points": [p.to_json() for p in self.points]}


@dataclass(frozen=True, slots=True)
class Plan:
    """A workflow's plan: its steps in order, each with its points, and what reading it found wrong."""

    path: Path
    kind: str
    steps: tuple[PlanStep, ...]
    diagnostics: tuple[Diagnostic, ...] = ()
    #: how the text says its auto mode is asked for (``-y``, ``--yes``), None when it has none
    auto_mode: str | None = None
    name: str = ""

    def points(self) -> Iterable[Point]:
        """Every point of every step, in order."""
        return (p for step in self.steps for p in step.points)

    def to_json(self) -> dict[str, Any]:
        """Plain data (``stepline plan --json``)."""
        return {"path": str(self.path), "name": self.name, "kind": self.kind, "auto_mode": self.auto_mode,
                "steps": [s.to_json() for s in self.steps],
                "diagnostics": [{"severity": d.severity, "code": d.code, "message": d.message, "path": d.path,
                                 "line": d.line} for d in self.diagnostics]}


# ------------------------------------------------------------------------------------------------ sentences

_ABBREV = re.compile(r"\b(e\.g|i\.e|etc|vs|cf)\.", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])[*_\"”')\]]*\s+(?=[A-Z*`\"“(\[_])")
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_TABLE = re.compile(r"^\s*\|")
_QUOTE = re.compile(r"^\s*>\s?")

#: a leading clause that is a condition: ``If ambiguous,``, ``When the user …:``, ``Otherwise``
_LEADING_CONDITION = re.compile(
    r"^(?P<cond>(?:if|when|whenever|once|unless|otherwise|where|in case|after (?:the )?user|on \w+ intent|"
    r"only (?:when|if|after)|"
    r"(?:for|under) (?:the )?\w+ (?:intent|mode)|at\s+\*\*[^*]+\*\*|"
    r"for\s+\*{0,2}(?!example\b|instance\b|each\b|all\b)[A-Z][\w-]*\*{0,2}(?=,)|"
    r"in\s+\*\*[^*]+\*\*(?:\s*(?:,|and|or)\s*\*\*[^*]+\*\*)*(?:\s+mode)?|in\s+\w+(?:[\s-]\w+)?\s+mode)"
    r"(?:\b|(?<=\*))(?:`[^`]*`|\([^()]*\)|\((?![^()]*\))|[^.;:`(]|\.(?=\w))*?)"
    # a verb ends the clause, a noun does not: ``If ambiguous ask`` but ``When the ask is bare research, …``
    r"(?:[,:;—–]\s+|\s+(?:-|→|->)\s+|(?<!\bthe)(?<!\ba)(?<!\ban)(?<!\bthis)(?<!\bthat)(?<!\btheir)(?<!\bits)"
    r"(?<!\byour)(?=\s+(?:ask|offer|present|wait|halt|confirm|route|load|invoke)\b))", re.I)
#: a leading clause that only says when in the flow, not whether: ``Once chosen,``, ``When all dimensions are done,``
_TEMPORAL = re.compile(r"(?i)^(?:once|when|after)\b(?:(?!\b(?:user|they|human|person|them)\b)[^,;:]){0,60}\b"
                       r"(?:done|spent|complete|completed|completes|finished|settled|captured|written|saved|chosen|"
                       r"picked|selected|resolved|known|approved|confirmed|answered|read|loaded|mined\s+out|"
                       r"in\s+place)\b\W*$|^(?:once|when)\s+you\s+have\s+enough\b"
                       # the end of the conversation before it: ``When the user signals done``
                       r"|^(?:once|when|after)\s+(?:the\s+)?(?:user|human|person|they)\s+(?:signals?|says?|is|are)\s+"
                       r"(?:they(?:'re|\s+are)\s+)?(?:done|spent|finished)\b")
#: ``Only pause to clarify when two or more items are genuinely close``: the point is under what follows ``when``
_ONLY_WHEN = re.compile(r"(?i)^only\s+(?:\w+\s+){1,5}?(?:when|if)\s+(?P<cond>[^,;—.]{3,100})")
#: a condition after the point's cue in its clause: ``offer concrete alternatives when the user is stuck``
_TRAILING_CONDITION = re.compile(r"(?i)[^.;:—(),]*?\s(?:when|whenever|if)\s+"
                                 r"(?P<cond>(?!needed\b|necessary\b|any\b|so\b)[^,;:—.()]{3,80})")
#: what a question asks (``Ask the user if …``, ``ask whether …``): no condition of its own
_ASKS_IF = re.compile(r"(?i)^(?:ask|asking|prompt)(?:\s+(?:the\s+)?(?:user|human|person|them))?\s+(?:if|whether)\b")
#: an offer to resume a run: only when there is one to resume
_RESUME_OFFER = re.compile(r"(?i)\boffer\s+to\s+resume\b")
#: a clause within a sentence that conditions what follows it: ``… — or, if they're ready to land it, go to …``
_INNER_CONDITION = re.compile(r"(?i)(?:^|[,;:—(]\s*|\b(?:or|and|but|then)\s*,?\s*)(?P<cond>(?:if|when|unless)\b"
                              r"[^,;:.()]{2,100}),\s*[^,;.]*$")
#: a case named by what the person is doing, then a colon: ``Picking up an existing session instead of starting
#: fresh: load …``
_GERUND_CASE = re.compile(r"^(?P<cond>[A-Z][a-z]+ing\b[^:;.]{0,80}):\s+(?=\w)")
#: a case a sentence opens with, then a colon: ``Empty list: show …``, ``Intent outside the exposed surface (…):``
_CASE_LABEL = re.compile(r"(?i)^(?P<cond>[^:;]{0,80}?\b(?:empty|none|missing|found|exists?|fails?|failed|errors?|"
                         r"multiple|single|ambiguous|unclear|outside|no|yes|otherwise|else|headless|interactive|declined?|"
                         r"unavailable)\b[^:;]{0,80}?):\s")
#: a bold lead-in ending with a colon: ``**Resolver missing or fails:**``, ``**`auto`** —``; a condition only when it
#: reads as one (:func:`_reads_as_case`), not a step's title (``**Welcome the user:**``)
_BOLD_CONDITION = re.compile(r"^\*\*(?P<cond>[^*]{2,120}?)"
                             r"(?::\*\*|\*\*(?:\s*\((?P<aside>[^)]*)\))?\s*(?::|—|–|\s-\s|->|→))")
#: a list item's bold title that opens with a condition: ``**When it sags, change something — don't force it.**``
_BOLD_TITLE = re.compile(r"^\*\*(?P<title>[^*]{2,160}?)\*\*")
#: the words of a case a lead-in names (``Resolver missing or fails``, ``Exactly one `review` story``, ``PASS``)
_CASE_WORDS = re.compile(r"(?i)\b(?:empty|none|missing|found|exists?|fails?|failed|failure|errors?|multiple|single|"
                         r"exactly|ambiguous|unclear|outside|no|not|yes|otherwise|else|headless|interactive|declined?|"
                         r"unavailable|invalid|valid|pass(?:es|ed)?|concerns|approved?|rejected?|supplied|given|"
                         r"chosen|selected|fallback|preferred)\b|n't\b")
#: an arrow that says what a case leads to: ``Headless (no interactive user) → follow …``, ``(unknown id -> ask)``
_ARROW = re.compile(r"\s(?:→|->)\s")

# what the person is, in the text's words
_PERSON = r"(?:the\s+)?(?:user|human|person|people|them|they|caller|operator|stakeholders?|you)"

_LOOP = re.compile(r"\b(?:until|till)\s+(?P<end>(?:the\s+)?(?:user|human|person|they)\b[^.;]{0,60}?"
                   r"\b(?:says?|said|signals?|indicates?|declares?|calls\s+it|wants?\s+to\s+(?:stop|move|end|finish)|"
                   r"asks?\s+to\s+(?:stop|move|end|finish)|is\s+(?:done|satisfied|ready|happy|finished)|"
                   r"are\s+(?:done|satisfied|ready|happy|finished)|(?:is|are)\s+out\s+of|runs?\s+out|"
                   r"stops?|ends?\s+(?:it|the)|moves?\s+on|done|satisfied)\b[^.;]*)"
                   # a step the person ends: ``the user ends this step with an explicit accounting of …``
                   r"|\b(?P<ender>(?:the\s+)?(?:user|human|person)\s+ends\s+(?:this|the)\s+(?:step|session|"
                   r"conversation|round)\b[^.;]*)", re.I)
#: a conversation the text runs a question at a time: ``Work one question at a time, in dependency order.``
_ONE_AT_A_TIME = re.compile(r"(?i)^(?:work|go|proceed|ask|take\s+it|interrogate)\s+(?:through\s+it\s+)?"
                            r"one\s+question\s+at\s+a\s+time\b")
_CONFIRM = re.compile(
    r"\bwait\s+for\s+(?:an?\s+)?(?:explicit\s+|the\s+user'?s?\s+|their\s+)?(?:user\s+)?(?:yes|approval|"
    r"confirmation|go-ahead|consent|sign-?off|ok)\b"
    r"|\b(?:ask|prompt)\s+(?:the\s+)?(?:user|human|person|them)\s+(?:for\s+|to\s+)(?:confirm|approv|sign)"
    r"|\b(?:get|obtain|seek|request|require|needs?)\s+(?:the\s+user'?s\s+|explicit\s+|their\s+)?(?:user\s+)?"
    r"(?:approval|confirmation|sign-?off|consent)\b"
    r"|\b(?:only\s+)?after\s+(?:the\s+)?(?:user|human|person|they)\s+(?:explicitly\s+)?(?:approves?|confirms?|"
    r"agrees?|says?\s+yes)"
    r"|\bafter\s+explicit\s+(?:user\s+)?(?:approval|confirmation)"
    r"|\b(?:y/n|yes/no)\b"
    r"|\bconfirm\s*:\s*[\"“*>]"
    r"|\blet\s+(?:the\s+)?(?:user|human|person)\s+(?:confirm|approve)\b"
    r"|\b(?:the\s+)?(?:user|human|person)\s+(?:approves|confirms|signs\s+off)\b"
    r"|\boffer\s+(?:once\s+|again\s+|first\s+|then\s+|also\s+)?to\s+\w+", re.I)
#: a confirmation a sentence ends on after other work (``… structure the answer and confirm.``): weaker than a
#: question in the same sentence
_WEAK_CONFIRM = re.compile(
    r"\bconfirm(?:s|ed|ing)?\b[^.;]{0,80}?\bwith\s+" + _PERSON + r"\b"
    r"|(?:^|[,;]\s*|\band\s+)confirm\s+(?:before|with|first|it\b|them\b|this\b|that\b|the\s+\w+\s+with)"
    r"|\band\s+confirm\s*[.)]?$"
    r"|\bconfirm\s+(?:only\s+)?(?:when|if)\b"
    r"|\b(?:one|a)\s+(?:quick\s+|short\s+)?confirm(?:ation)?\s+of\b"
    r"|\bconfirm\s+before\b|\bconfirm\s+\w+\s+first\b"
    r"|^on\s+(?:the\s+user'?s\s+|their\s+)?approval\b", re.I)  # ``On approval, splice …``: an approval was asked
_QUESTION = re.compile(
    r"(?:^|[,;:—(]\s*|\b(?:then|and|or|to|must|should|always|i|we|you|please|simply|briefly|"
    r"directly|explicitly)\s+)(?<!questions\sto\s)(?<!question\sto\s)ask\b"
    r"(?!\s+(?:yourself|the\s+(?:model|agent|subagent|reviewer)|subagents?|of)\b)"
    r"|\bask(?:ing)?\s+(?:the\s+)?(?:user|human|person|them|whether|which|what|how|who|for|if|about)\b"
    r"|\b(?:open|start|begin|lead)\s+with\s+(?:a|one|an)\b[^.]{0,30}\bquestions?\b"
    r"|\bhalt\b[^.]{0,20}\b(?:and\s+)?(?:present|escalate|surface|show)\b[^.]{0,40}\b(?:human|user)\b"
    r"|\bescalate\s+to\s+(?:the\s+)?(?:human|user)\b"
    r"|\bplease\s+(?:provide|specify|share|tell\s+me|clarify|choose|select)\b"
    r"|\bpause\s+to\s+(?:clarify|ask)\b|\bclarify\s+with\s+(?:the\s+)?(?:user|human|person)\b"
    r"|\b(?:paste|send|share)\s+(?:it|them|the\s+\w+)\s+back\b"
    r"|\binvit(?:e|es|ing)\s+(?:(?:the\s+)?(?:user|human|person|them)\s+to\b|(?:a|an|the|their|any)\s+\w)"
    r"|\bopen\s+the\s+floor\b|\bgive\s+(?:the\s+)?(?:user|human|person|them)\s+a\s+chance\s+to\b"
    # the verb, not the noun of ``a deep-research prompt the user runs``
    r"|(?:^|[,;:—(]\s*|\b(?:then|and|or|to|must|should|always|please|also|first)\s+)"
    r"prompt\s+(?:the\s+)?(?:user|human|person|them)\b"
    r"|\bprobe\b"
    # questions the text counts (``I batch the remaining gaps into one or two consolidated questions``)
    r"|\b(?:into|in|with)\s+(?:one|two|three|a\s+few|a\s+single|one\s+or\s+two|two\s+or\s+three)\s+"
    r"(?:[\w-]+\s+)?questions?\b"
    r"|\bfor\s+(?:the\s+)?(?:user|human|person)\s+to\s+(?:review|approve|confirm|choose|decide|pick|select)\b"
    # the verb, not the noun of ``the per-item evidence Phase 5's status offer reads``
    r"|\boffer(?:s|ing)?\b(?!\s+(?:once\s+|again\s+|first\s+|then\s+|also\s+)?to\b)"
    r"(?!\s+(?:reads|is|was|stands|holds|applies|lists|names|shows|returns|expires|lapses)\b)"
    r"|\b(?:choose|decide|pick|select|agree\s+on)\b[^.;]{0,60}\bwith\s+(?:the\s+)?(?:user|human|person)\b"
    r"|\bwait\s+for\s+(?:the\s+)?(?:user|human|person|their)(?:'s)?\s*(?:input|response|answer|reply|selection|"
    r"choice|feedback)"
    r"|\blet\s+(?:the\s+)?(?:user|human|person)\s+(?:decide|choose|pick|select|react|weigh\s+in|review|respond)\b"
    r"|\b(?:request|solicit|gather|collect|elicit)\s+(?:the\s+)?(?:user'?s?\s+)?(?:input|feedback|answers?)\s+"
    r"(?:from\s+)?" + _PERSON, re.I)
#: the text says not to: ``Do not ask``, ``never confirm``, ``without asking``
_NEGATED = re.compile(r"\b(?:do\s+not|don't|never|no\s+need\s+to|without|not)\s+(?:\w+\s+){0,2}?(?:re-)?"
                      r"(?:ask|asking|confirm|prompt|wait|halt|offer|present|stop)\b"
                      r"|\bno\s+(?:asking|menu|questions?|confirmation|prompt)\b[^.;]*", re.I)
#: a rule that holds until the person says so (``never agree until the user ends the mode``) is no loop of its
#: own, unlike ``do not stop until the user says they're done``
_NEGATED_BEFORE = re.compile(r"(?i)\b(?:never|do\s+not|don't)\b[^,;—]{0,60}$")
_STOPS = re.compile(r"(?i)\b(?:never|do\s+not|don't)\s+(?:\w+\s+){0,2}?(?:stop|end|finish|wrap|close|disband|leave|"
                    r"move\s+on|conclude)")
#: a restriction on how to ask: ``then ask only what's missing``
_ASK_ONLY = re.compile(r"(?i)\b(?:then\s+)?ask\s+only\b[^.;—]*")
#: the person's own options described (``User can chat or ask questions``), not a turn the text gives them
_PERSON_MAY = re.compile(r"\b(?:the\s+)?(?:user|they|human|person)\s+(?:can|may|might|could|will|is\s+free\s+to)\b"
                         # a criterion: ``… earns a line once a human confirms it``
                         r"|\b(?:once|after|when)\s+(?:a|the)\s+(?:human|user|person)\s+(?:confirms|approves)\s+it\b\W*$"
                         r"|\byou\s+(?:can|may)\b[^.]*\bask\s+me\b", re.I)  # said to the person: "you can … ask me"
#: the sections of a step file that restate the rules for a model (the runtime owns them): no points
_RULES_SECTION = re.compile(r"(?i)\b(?:mandatory|execution\s+(?:rules|protocols)|context\s+boundaries|"
                            r"success\s+metrics|"
                            r"failure\s+modes|success/failure|role\s+reinforcement|step-specific\s+rules|"
                            r"universal\s+rules|critical\s+rules|processing\s+rules|workflow\s+architecture|"
                            r"step\s+goal|responsibilities|philosophy|(?:key|design|core)\s+principles|success\s+criteria|"
                            r"checklist|related\s+(?:skills|commands|workflows)|error\s+handling|"
                            r"\brules\b)")
#: a word of the person's turn in a sentence: the classifier runs only on such sentences
_TURN_WORDS = ("ask", "prompt", "probe", "paste", "invit", "the floor", "clarify", "wait", "confirm", "approv",
               "offer", "choose", "choice", "select", "pick", "decide", "until", "y/n", "yes/no", "menu", "answer",
               "respond", "reply", "halt", "input", "feedback", "agree", "sign", "consent", "with the user",
               "with the human", "let the", "present", "please", "escalate", "a chance", "question", "to review",
               "ends th")
#: a working session with the person the text names no kind for: ``Walk the memlog with the user``
_WITH_PERSON = re.compile(r"\b(?:walk|review|discuss|go\s+through|work\s+through|resolve|settle|agree|decide|"
                          r"iterate|refine|explore|brainstorm)\b[^;]{0,80}\bwith\s+(?:the\s+)?(?:user|human|person)\b",
                          re.I)
#: a menu written inline as words between slashes: ``the explicit all/subset/skip menu``
_SLASH_MENU = re.compile(r"\b(?P<opts>[\w-]+(?:\s*/\s*[\w-]+)+)\s+menu\b"
                         r"|\bmenu\s*:\s*(?P<after>[\w-]+(?:\s*/\s*[\w-]+)+)"
                         r"|\b(?:pick|choose|select)\s+"
                         r"(?P<picked>[\w-]+(?:\s+[\w-]+)?(?:\s+/\s+[\w-]+(?:\s+[\w-]+)?)+)(?=\s*[.;,]|\s*$)", re.I)
#: a table column naming the file to load for its row
_LOAD_COLUMN = re.compile(r"(?i)load|route(?:\s+to)?|reference|read|follow|go\s+to|file\s+to\s+load")
#: the line before a fenced block the text presents as its menu (``## The Menu``, ``Present these options:``)
_PRESENTS = re.compile(r"(?i)^(?:#{1,6}\s.*\b(?:menu|options|choices?|display|present|decision)\b.*"
                       r"|.*\b(?:present|display|show)\b[^:]*:\**)$")
#: a sentence that presents a choice whose options follow it (a list, or bold spans after a colon)
_CHOICE_LEAD = re.compile(
    r"\b(?:offer|present|show|display|give|list|put)\b(?!\s+(?:the\s+)?(?:chosen|selected|recommended)\b)[^.]*?"
    r"\b(?:choices?|options?|menu|paths?|modes?|alternatives?)\b"
    r"|\b(?:ask|let)\b[^.]*?\b(?:which|choose|pick|select|one of|preference|between)\b"
    r"|\b(?:choose|pick|select)\b[^.]*?\b(?:one|between|from|of the following|an? (?:option|path|mode))\b"
    r"|\b(?:choose|pick|select)\s*:",  # the options follow: ``When input is sparse, choose: **express** (…) or …``
    re.I)
#: speaks of the person's turn but may fit no kind above: kept as ``unclassified``
_TURN = re.compile(
    r"\b(?:ask|answer|respond|reply|choose|choice|select|pick|decide|approv\w*|confirm\w*|wait|halt|offer|"
    r"feedback|agree|sign-?off)\b", re.I)
_PERSON_RE = re.compile(r"\b(?:user|human|person)\b", re.I)
#: not the person's turn: the model's own checks ("confirm every entry was executed"), what an agent asks
_NOT_TURN = re.compile(r"\b(?:subagents?|sub-agents?|the (?:model|agent|llm)|reviewers?)(?:\s+\w+){0,3}\s+"
                       r"(?:asks?|confirms?)\b"
                       r"|\bhalt\b[^.]{0,20}?\b(?:and\s+)?(?:tell|report|inform|notify|explain|warn|stop)\b"
                       r"|\bhalt\s+with\b"
                       r"|\b(?:skill|workflow|it|this|system|orchestrator)\s+(?:will|would)\s+(?:prompt|ask)"
                       # what a turn taken elsewhere is about: ``the evidence is what the user is asked to confirm``
                       r"|\bwhat\s+(?:the\s+)?(?:user|human|person|they)\s+(?:is|are|was|were|will\s+be)\s+"
                       r"(?:asked|prompted|offered|shown)\b", re.I)

# routes: a verb, then a file of the skill or a section of the document
_PATH = r"(?:\{skill-root\}/|\{installed_path\}/|\./|\.\./)?(?:[\w.-]+/)*[\w.-]+\.(?:md|xml|yaml|yml|csv|json|txt)"
_ROUTE_VERB = re.compile(
    r"\b(?:load(?:s|ing)?|read(?:s|ing)?(?:\s+(?:fully|completely|and\s+follow))?|follow(?:s|ing)?|route(?:s|d)?\s+"
    r"(?:to|into)|proceed\s+(?:to|with)|go(?:es)?\s+to|jump\s+to|continue\s+(?:to|with|at|in)|execute|"
    r"switch\s+to|hand(?:s)?\s+off\s+to|re-?enter|return\s+to|back\s+to)\b|→|->", re.I)
#: ``Run the Reviewer Gate (`references/reviewer-gate.md`)``: running what a file holds is following it
_RUN_FILE = re.compile(r"(?i)\brun\s+(?:the\s+)?[\w\s-]{0,40}\(\s*$")
_PATH_RE = re.compile(r"`(?P<a>" + _PATH + r")`|(?<![\w/{.])(?P<b>\.{1,2}/(?:[\w.-]+/)*[\w.-]+\.(?:md|xml))"
                      r"|(?<![\w/{.`])(?P<c>(?:[\w-]+/)+[\w.-]+\.md)\b|\[\[bmad-snapshot:(?P<d>[\w./-]+)\]\]"
                      r"|Read\(\s*[\"'](?P<e>[^\"']+\.md)[\"']\s*\)")
#: a file named only as a thing to write, template or example, never a route
_NOT_ROUTE = re.compile(r"\b(?:write|writes|written|save|saves|append|create|creates|update|output|template|"
                        r"templates|e\.g|example|format in|prompt and output|emit|copy|rename)\b", re.I)
#: what follows a file named as a reference the executor reads when it needs it: ``when you need it``, ``as needed``
_ON_DEMAND = re.compile(r"[`'\"\s]*(?:when(?:ever)?\s+(?:you|it)\s+(?:needs?|is\s+needed)|as\s+needed|if\s+needed|"
                        r"when\s+needed|on\s+demand|for\s+reference)\b", re.I)
_STRONG_ROUTE = re.compile(r"\b(?:load|read(?:\s+fully)?\s+and\s+follow|follow|route(?:s|d)?\s+(?:to|into)|"
                           r"proceed\s+to|go\s+to|jump\s+to|switch\s+to|hand(?:s)?\s+off\s+to|read\s+fully|"
                           r"execute|Read\()\b|Read\(|→|->", re.I)
_SECTION_JUMP = re.compile(r"\b(?:jump|go|proceed|skip|return|back|loop\s+back|continue|re-?enter|route)\s*(?:to|"
                           r"with|at)?\s+(?P<s>(?:step|phase|section)\s+\d+[a-z]?)\b|(?:→|->)\s*(?P<t>(?:step|phase)"
                           r"\s+\d+[a-z]?)\b|\bre-?enter\s+(?P<u>step\s+\d+[a-z]?)\b", re.I)
_SECTION_REF = re.compile(r"`##\s+(?P<title>[^`]+)`")

# hand-overs: a verb, then a skill's name
_SKILL_NAME = r"[a-z][a-z0-9]*(?:[-:][a-z0-9]+)+"
_HANDOVER = re.compile(
    r"\b(?:invoke[sd]?|invoking|forwards?\s+to|forwarding\s+to|forwarded\s+to|hand(?:s|ing)?\s+(?:off|over|it|"
    r"this)\s+to|consolidated\s+into|merged\s+into|redirect(?:s|ing)?\s+to|redirecting\s+to|delegates?\s+to|"
    r"launch(?:es)?|continue\s+(?:in|with)|switch\s+to|run\s+the|use\s+the|call|start)\s+(?:the\s+)?"
    r"(?:`(?P<a>" + _SKILL_NAME + r")`|(?P<b>bmad-[a-z0-9-]+)|(?P<c>" + _SKILL_NAME + r")(?=\s+skill))"
    r"|`(?P<d>" + _SKILL_NAME + r")`\s+takes\s+(?:the\s+workflow\s+|it\s+|over)"
    r"|\bSkill\(\s*(?:skill\s*=\s*|\{\s*skill\s*:\s*)?[\"'](?P<e>[\w:-]+)[\"']", re.I)
_OFFERED = re.compile(r"\boffer(?:s|ing)?\s+to\s+$|\boffer(?:s|ing)?\s+to\s+\w+\s+$", re.I)
#: a word every hand-over's wording holds (the cheap test before the patterns)
_HANDOVER_WORDS = ("invok", "forward", "hand", "consolidated", "merged", "redirect", "delegate", "launch", "continue",
                   "switch", "run the", "use the", "call", "start", "takes", "skill(")
#: a skill named as advice or an aside, not a hand-over
_NOT_HANDOVER = re.compile(r"\b(?:can|could|may|might|should|would)\s+(?:also\s+)?(?:invoke|use|run)\b|"
                           r"\bsuggest|\brecommend|\bcommon\s+next\b|\bnext\s+steps?\s*:|"
                           r"\bat\s+any\s+point\b|\bif\s+(?:they|the\s+user)\s+(?:want|prefer)|\bpoint\s+them\b|"
                           r"\blet\s+the\s+user\s+know\b|\bmention\b", re.I)


#: a sentence's opening label, up to its colon: ``Common next:``, ``Next steps:``
_LABEL = re.compile(r"^[^:;.`]{1,40}:")


@dataclass(frozen=True, slots=True)
class _Sentence:
    line: int
    text: str
    index: int  # the prose line it is on (for conditions from the lines above)
    start: int  # where it starts in that line (the first sentence of a line takes the line's lead-in)
    said: str  # the text with what it hands to a subagent blanked: what it says of the person's turn


#: a sentence that says what a part is for (``**Purpose**: …``, ``**Note**: …``), not what to do
_DESCRIBING_LABEL = re.compile(r"(?i)^\**(?:purpose|goal|note|notes|overview|summary|description|applies\s+to|output|"
                               r"input|context|why|rationale)\**\s*:")
_MENTIONS_MENU = re.compile(r"(?i)\b(?:offer|present|show|display|serve)s?\b[^.]{0,40}\b(?:menu|options|choices)\b")
_SPAN_CODE = re.compile(r"`[^`\n]*`")
_QUOTATION = re.compile(r"\"[^\"]+\"|“[^”]+”")
#: who a quotation is handed to when it is no person's: a subagent spawned, a worker's prompt
_TO_MODEL = re.compile(r"(?i)\b(?:spawn\w*|sub-?agents?|workers?|(?:task|agent|lens|reviewer)\s+prompts?)\b")
#: a line that is only a bold title (``**Tier 5 — Ask.**``)
_TITLE = re.compile(r"^\*\*[^*]+\*\*$")


def _masked(text: str) -> str:
    """``text`` with its code spans that hold words (a message to print, a command) blanked: they are quoted,
    not said."""
    masked = _SPAN_CODE.sub(lambda m: "`" + " " * (len(m[0]) - 2) + "`" if re.search(r"\s", m[0]) else m[0], text)
    return re.sub(r"(?<![*\w])\*{1,2}(?=\w)|(?<=\w)\*{1,2}(?![*\w])", "", masked)


def _said_to_model(body: str) -> str:
    """``body`` with each quotation the text hands to a subagent blanked (``spawn one per lens; give it … the
    constraint "Return ONLY your findings … the host may offer."``): its words are the model's orders, said to no
    person."""
    def blank(quote: re.Match[str]) -> str:
        opening = _SENTENCE_END.split(body[:quote.start()])[-1]
        to_model = list(_TO_MODEL.finditer(opening))
        if not to_model or _PERSON_RE.search(opening[to_model[-1].end():]):
            return quote[0]
        return quote[0][0] + " " * (len(quote[0]) - 2) + quote[0][-1]
    return _QUOTATION.sub(blank, body)


#: an option a sentence lists after its colon, with the aside that glosses it: ``**select** (choose between
#: candidates)``
_GLOSSED_OPTION = re.compile(r"\*\*[^*]+\*\*(?:\s*\([^()]*\))?")


def _options_blanked(text: str) -> str:
    """``text`` with the options it lists after its colon (two or more bold spans, each with its gloss) blanked:
    an option's own words (``**select** (choose between candidates)``) are no cue of the person's turn — the
    sentence must offer them (``Offer the mode: …``) to be a choice."""
    colon = text.find(":")
    if colon < 0 or len(_GLOSSED_OPTION.findall(text, colon)) < 2:
        return text
    return text[:colon] + _GLOSSED_OPTION.sub(lambda m: " " * len(m[0]), text[colon:])


def _sentences(prose: list[tuple[int, str]]) -> list[_Sentence]:
    found = []
    for index, (line_no, line) in enumerate(prose):
        if not line.strip() or _HEADING.match(line) or _TABLE.match(line):
            continue
        body = _LIST_MARK.sub("", _QUOTE.sub("", line)).strip()
        said = _said_to_model(body)
        protected = _ABBREV.sub(lambda m: m[0].replace(".", "\x00"), body)
        protected = _SPAN_CODE.sub(lambda m: m[0].replace(".", "\x00").replace("?", "\x01").replace("!", "\x02")
                                   if re.search(r"\s", m[0]) else m[0], protected)
        bounds = [0, *(at for m in _SENTENCE_END.finditer(protected) for at in m.span()), len(protected)]
        for begin, end in zip(bounds[::2], bounds[1::2], strict=True):
            text = protected[begin:end].replace("\x00", ".").replace("\x01", "?").replace("\x02", "!").strip()
            if text:
                found.append(_Sentence(line_no, text, index, begin, said[begin:end].strip()))
    return found


# ---------------------------------------------------------------------------------------------------- reader


@dataclass
class _Reader:
    text: str
    file: Path
    first_line: int
    base: Path
    find_skill: Callable[[str], Path | None] | None
    sections: tuple[str, ...]
    prose: list[tuple[int, str]] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    claimed: set[int] = field(default_factory=set)  # lines a menu, halt or choice's lead-in took
    listed: dict[int, str] = field(default_factory=dict)  # a listed choice's items (an item may ask more), by line
    rules: set[int] = field(default_factory=set)  # lines of the sections that restate the rules for a model

    def point(self, kind: PointKind, line: int, text: str, **fields: Any) -> None:
        self.points.append(Point(kind=kind, text=text.strip(), file=self.file, line=line, **fields))

    def run(self) -> tuple[Point, ...]:
        self.prose = prose_lines(self.text, self.first_line)
        self.rules = _rules_lines(self.prose)
        self.menus()
        self.presented_blocks()
        self.listed_choices()
        self.halts()
        for sentence in _sentences(self.prose):
            self.sentence(sentence)
        self.table_routes()
        self.code()
        self.absorb_described_calls()
        self.absorb_bare_waits()
        self.absorb_displayed_asks()
        if any(p.kind is PointKind.CHOICE for p in self.points):  # "You offer a short menu": the menu is the point
            self.points = [p for p in self.points
                           if not (p.kind is PointKind.QUESTION and _MENTIONS_MENU.search(p.text))]
        return _ordered(self.points)

    def absorb_displayed_asks(self) -> None:
        """Drop the questions inside what a step displays at once (``Display to user:`` then a list of counts,
        examples and ``Ask if any FRs are missing``, up to the next heading) when the text asks the person after it
        (``### 9. Get User Confirmation`` — ``Ask: "Do these … represent what needs to be built?"``): they are
        part of one message the person answers once."""
        blocks: list[tuple[int, int]] = []
        start: int | None = None
        for line, text in self.prose:
            if start is not None and _HEADING.match(text):
                blocks.append((start, line))
                start = None
            if _DISPLAY_LEAD.match(text.strip()):
                start = line
        if start is not None:
            blocks.append((start, 1 << 30))
        for first, end in blocks:
            later = any(p.line >= end and p.kind in PERSON_KINDS for p in self.points)
            if later:
                self.points = [p for p in self.points if not (first < p.line < end and p.kind is PointKind.QUESTION)]

    def absorb_bare_waits(self) -> None:
        """Drop a wait that only waits (``Wait for user confirmation.``) right after a question of the same
        paragraph (``Ask the user if there are any other documents to include. Wait for user confirmation.``):
        it is that question's wait, not a turn of its own."""
        blank = {line for line, text in self.prose if not text.strip()}
        headings = [line for line, text in self.prose if _HEADING.match(text)]
        kept: list[Point] = []
        for point in sorted(self.points, key=lambda p: p.line):
            before = next((p for p in reversed(kept) if p.kind in PERSON_KINDS), None)
            if before is None or point.kind not in (PointKind.CONFIRM, PointKind.QUESTION):
                kept.append(point)
                continue
            if _BARE_WAIT.match(point.text.strip(" *")) and before.condition == point.condition \
                    and 0 <= point.line - before.line <= 3 and not any(before.line < n < point.line for n in blank):
                continue
            # ``**HALT** — I am waiting for your numbered choice.`` under the same heading as a question before it
            if _BARE_HALT.search(point.text) and before.condition in (None, point.condition) \
                    and not any(before.line < n < point.line for n in headings):
                continue
            kept.append(point)
        self.points = kept

    def absorb_described_calls(self) -> None:
        """Drop the prose that introduces an ``AskUserQuestion`` block (``Prompt user to select review type:``):
        the block is the point."""
        lines = self.text.splitlines()
        fences = []
        for point in self.points:
            if point.text and point.line - self.first_line < len(lines) and "AskUserQuestion(" in \
                    lines[point.line - self.first_line] and point.kind in (PointKind.CHOICE, PointKind.QUESTION):
                offset = point.line - self.first_line
                while offset > 0 and not lines[offset].lstrip().startswith(("```", "~~~")):
                    offset -= 1
                fences.append(offset + self.first_line)
        if not fences:
            return
        prose = [line for line, text in self.prose if text.strip()]
        introduced = set()
        for fence in fences:
            before = [line for line in prose if line < fence][-3:]
            introduced.update(before)
        self.points = [p for p in self.points if not (p.line in introduced and p.kind in PERSON_KINDS)]

    # ---- [K] menus and halts, read by stepchain._read
    def menus(self) -> None:
        for menu in menus_in(self.prose):
            options = tuple(Option(o["key"], o["label"], _option_route(o, self.base), handler=o.get("handler", ""))
                            for o in menu.options)
            self.point(PointKind.CHOICE, menu.line, menu.text, options=options, condition=menu.condition)
            self.claimed.update(menu.lines)

    def halts(self) -> None:
        choices = [p.line for p in self.points if p.kind is PointKind.CHOICE]
        headings = [line for line, text in self.prose if _HEADING.match(text)]

        def section(line: int) -> int:  # the heading over a line (a menu's fenced block's too)
            return max((h for h in headings if h <= line), default=0)
        for halt in halts_in(self.prose):
            if halt.line in self.rules or halt.line in self.claimed:
                continue  # a rule restated, or the wait of a choice read from the same line
            near_menu = "menu" in halt.text.lower() or (_BARE_HALT.search(halt.text) is not None and any(
                -8 <= halt.line - line <= 15 and section(line) == section(halt.line) for line in choices))
            if near_menu:  # the halt that waits at a choice already read (or asks what the choice below offers)
                self.claimed.add(halt.line)
                continue
            kind = PointKind.CONFIRM if _CONFIRM.search(halt.text) else PointKind.QUESTION
            options = tuple(Option(k, label, Route("local")) for k, label in halt.options)
            if options:
                kind = PointKind.CHOICE
            self.point(kind, halt.line, halt.text, options=options, condition=halt.condition)
            self.claimed.add(halt.line)

    # ---- a menu shown as a fenced block (``## The Menu`` then a block of ``1. …``, ``r. …`` lines)
    def presented_blocks(self) -> None:
        lines = self.text.splitlines()
        offset = 0
        while offset < len(lines):
            opened = re.match(r"^\s{0,3}(`{3,}|~{3,})", lines[offset])
            if not opened:
                offset += 1
                continue
            end = next((i for i in range(offset + 1, len(lines)) if lines[i].strip().startswith(opened[1][:3])),
                       len(lines))
            before = next((line.strip() for line in reversed(lines[:offset]) if line.strip()), "")
            if _PRESENTS.search(before):
                block = [(self.first_line + i, lines[i]) for i in range(offset + 1, end)]
                start = next((i for i, (_, line) in enumerate(block) if _LIST_MARK.match(line)), None)
                listed = bulleted_choices(block[start:]) if start is not None else None
                if listed is not None and len(listed.options) >= 2:
                    title = next((line.strip(" *") for _, line in block if line.strip(" -=*") and not
                                  _LIST_MARK.match(line)), before)
                    options = tuple(Option(k, label, Route("local")) for k, label in listed.options)
                    self.point(PointKind.CHOICE, self.first_line + offset, title, options=options,
                               condition=condition_of(self.prose, self.prose.index(next(
                                   p for p in self.prose if p[0] >= self.first_line + offset))) if any(
                                   p[0] >= self.first_line + offset for p in self.prose) else None)
                    self.claimed.update(range(self.first_line + offset, self.first_line + end + 1))
            offset = end + 1

    # ---- choices whose options are a list under the line that offers them
    def listed_choices(self) -> None:
        for index, (line_no, line) in enumerate(self.prose):
            if line_no in self.claimed or not _ends_lead_in(line):
                continue
            lead = _QUOTE.sub("", _LIST_MARK.sub("", line)).strip()
            if not _CHOICE_LEAD.search(lead):
                continue
            choices = bulleted_choices(self.prose[index + 1:], depth=_indent(line))
            if len(choices.options) < 2:
                continue
            options = tuple(Option(k, label, Route("local")) for k, label in choices.options)
            self.point(PointKind.CHOICE, line_no, lead, options=options,
                       condition=self.condition(index, lead))
            self.claimed.add(line_no)
            self.listed.update(zip(choices.lines, (label for _, label in choices.options), strict=False))

    def condition(self, index: int, sentence: str, start: int = 0, at: int | None = None) -> str | None:
        """The condition a point of ``sentence`` (the ``start`` of which is that far into its line; the point's
        cue ``at`` that far into the sentence) is under; None when none. A point ``unless`` something holds is
        asked by default: no condition."""
        found = self._condition(index, sentence, start, at)
        return None if found is None or re.match(r"(?i)\W*unless\b", found) else found

    def _condition(self, index: int, sentence: str, start: int, at: int | None) -> str | None:
        """The conditions over the point, outermost first, joined by ``; ``: the line's (the item it is nested
        under, its case lead-in), the sentence's own (a leading clause, a question it answers), and the clause's
        (an arrow's case, an inner ``if …,``)."""
        inner = _arrow_case(sentence, at)
        if inner is None and at:
            clause = _INNER_CONDITION.search(sentence[:at])
            inner = clause["cond"].strip() if clause and clause.start("cond") > 0 else None
        if inner is None and at is not None:
            rest = sentence[at:]
            asks = _ASKS_IF.match(rest)
            after = _TRAILING_CONDITION.match(rest[asks.end():] if asks else rest)
            inner = after["cond"].strip() if after else None
        match = _LEADING_CONDITION.match(sentence) or _CASE_LABEL.match(sentence) or _GERUND_CASE.match(sentence)
        own = match["cond"].strip(" *,") if match and not _temporal(match["cond"]) else None
        only = _ONLY_WHEN.match(sentence)
        own = own or (only["cond"].strip() if only else None) or self.question_before(index, start)
        # ``Otherwise …`` is the other case than the line's: not under it
        outer = None if own and re.match(r"(?i)(?:otherwise|else)\b", own) else \
            self.line_condition(index, start, own is not None)
        parts: list[str] = []
        for part in (outer, own, inner):
            if part and not any(part in kept or kept in part for kept in parts):
                parts.append(part)
        return "; ".join(p.replace("*", "").strip(" ,") for p in parts) or None

    def line_condition(self, index: int, start: int, has_own: bool) -> str | None:
        """The condition of the line (list item, paragraph) a sentence is on: its opening ``If …:`` (for a later
        sentence of the line), its bold title opening with a condition, its bold case lead-in (``**`auto`** —``),
        else the item it is nested under or the case paragraph right above."""
        line = _QUOTE.sub("", self.prose[index][1])
        item = _LIST_MARK.sub("", line).strip()
        label = _CASE_LABEL.match(item)
        if label and (len(label["cond"]) > 50 or re.search(r"[.!?]\s|\s[—–]\s", label["cond"])):
            label = None  # a case is a short label, not a sentence with its explanation
        opened = (_LEADING_CONDITION.match(item) or label) if start else None
        if opened and not _temporal(opened["cond"]) and (
                opened[0].rstrip().endswith(":") or (_LIST_MARK.match(line) and opened[0].rstrip().endswith(","))):
            # ``If `draft` selected: Set …. Run …. EARLY EXIT → …``; an item ``4. If X, tell …. Rename it only …``
            return opened["cond"].strip(" *,")
        title = _BOLD_TITLE.match(item)
        opens = _LEADING_CONDITION.match(title["title"].strip() + ", ") if title else None
        if opens and not _temporal(opens["cond"]) and (start or not has_own):
            return opens["cond"].strip(" *,")
        lead = _BOLD_CONDITION.match(item)
        if lead and _lead_is_case(lead):
            return lead["cond"].strip(" `")
        if lead and lead["cond"].strip(" `").lower() in self.offered():  # ``- **Rework**: Ask what went wrong``
            return f"{lead['cond'].strip(' `')} chosen"
        nested = condition_of(self.prose, index)
        return (nested if not _temporal(nested or "") else None) or self.case_above(index)

    def offered(self) -> set[str]:
        """The labels of the options the text's choices offer (read before its sentences), lower-cased."""
        return {o.label.lower() for p in self.points if p.kind is PointKind.CHOICE for o in p.options}

    def case_above(self, index: int) -> str | None:
        """The case of the paragraph right above (at the same indentation) when it is a case's lead-in that this
        paragraph goes on with: ``**a) One-shot** — zero blast radius …`` then ``**EARLY EXIT** → …``."""
        line = self.prose[index][1]
        for _, above in reversed(self.prose[:index]):
            if not above.strip():
                continue
            if _HEADING.match(above) or _indent(above) != _indent(line) or _LIST_MARK.match(line):
                return None
            lead = _BOLD_CONDITION.match(above.strip())
            return lead["cond"].strip(" `") if lead and _lead_is_case(lead) else None
        return None

    def question_before(self, index: int, start: int) -> str | None:
        """A question the text puts to itself right before the sentence, on its line (``Drifting into Q&A or going
        in circles? Bring in a new voice …``): the case the sentence answers."""
        body = _LIST_MARK.sub("", _QUOTE.sub("", self.prose[index][1])).strip()
        before = [part.strip() for part in _SENTENCE_END.split(body[:start]) if part.strip()]
        last = before[-1].strip(" *_") if before else ""
        if (not last.endswith("?") or len(last) > 120 or re.search(r"[\"“”`]", last)
                or any(word in last.lower() for word in ("ask", "you ", "user"))):
            return None
        return last.rstrip("?").strip(" *_")

    # ---- one sentence of prose
    def sentence(self, s: _Sentence) -> None:
        if s.line in self.rules:
            return
        self.routes(s)
        self.handovers(s)
        if s.line in self.claimed or _TITLE.match(s.text) or _DESCRIBING_LABEL.match(s.text):
            return
        if _MENU_HANDLER.match(self.prose[s.index][1]):
            return  # what an option does (``IF A: …``): the menu is the person's turn, its routes are read above
        inline = _inline_keyed(s.said)
        kind = self.classify(_masked(_options_blanked(s.said)), s.said) if not inline else (
            PointKind.CONFIRM if {o.key for o in inline} <= {"Y", "N"} else PointKind.CHOICE)
        if kind is None:
            return
        cue = _cue_at(s.text, kind)
        condition = self.condition(s.index, s.text, s.start, at=cue)
        permission = _permission_of(s.text, cue)
        if permission is not None and kind in (PointKind.CONFIRM, PointKind.QUESTION):
            condition = "; ".join(filter(None, (condition, permission)))
        chosen = f"{self.listed[s.line]} chosen" if s.line in self.listed else None
        if chosen and chosen not in (condition or "").split("; "):  # the item's bold lead-in may have said so
            condition = chosen + (f"; {condition}" if condition else "")
        if _RESUME_OFFER.search(s.text) and "resume" not in (condition or "") and " exist" not in (condition or ""):
            condition = "; ".join(filter(None, (condition, "there is an unfinished run to resume")))
        if inline:
            self.point(kind, s.line, s.text, condition=condition, options=inline)
            return
        if kind is PointKind.LOOP:
            loop = _LOOP.search(s.text)
            self.point(kind, s.line, s.text, condition=condition,
                       ends_when=(loop["end"] or loop["ender"]).strip() if loop else None)
        elif kind is PointKind.CHOICE:
            options = _inline_options(s.text)
            if len(options) < 2:
                kind = PointKind.QUESTION
            some = _MENU_FOR.search(s.text) if _SLASH_MENU.search(s.text) else None
            if some and not re.search(r"(?i)\b(?:the|this|that)\s+(?:user|gate|step)\b", some["who"]):
                condition = "; ".join(filter(None, (condition, some["who"].strip())))
            self.point(kind, s.line, s.text, condition=condition, options=options if kind is PointKind.CHOICE else ())
            if kind is PointKind.CHOICE:
                self.routes_of_options(s, options)
        else:
            self.point(kind, s.line, s.text, condition=condition)

    def routes_of_options(self, s: _Sentence, options: tuple[Option, ...]) -> None:
        """The routes a choice's options name (``offer three paths: run another batch, **converge** (`## Converging`),
        or wrap up (`## Wrap-Up`)``) are where an option leads: each is under that option's being chosen, after the
        choice (not a route the step takes whatever the person answers)."""
        found = [(s.text.find(o.label.split()[0]), o) for o in options]
        starts = sorted((at, o) for at, o in found if at >= 0)
        moved = []
        for point in [p for p in self.points if p.line == s.line and p.text == s.text.strip()
                      and p.kind is PointKind.ROUTE]:
            mention = s.text.find(str(point.target).removeprefix("## "))
            chosen = [o for at, o in starts if 0 <= at < mention]
            if mention < 0 or not chosen:
                continue
            self.points.remove(point)
            moved.append(replace(point, condition=f"{chosen[-1].label} chosen"))
        self.points.extend(moved)

    @staticmethod
    def classify(text: str, raw: str | None = None) -> PointKind | None:
        """The kind of point a sentence is (``text`` with its quoted spans masked; ``raw`` as written, for the
        options it lists), None when it gives the person no turn."""
        raw = raw or text
        lowered = text.lower()
        if _PER_ITEM.match(raw.strip()) and len(_inline_options(raw)) >= 3:
            return PointKind.CHOICE
        if not any(word in lowered for word in _TURN_WORDS):
            return None
        text = _ASK_ONLY.sub(" ", text)  # ``ask only what is missing``: how to ask, not a turn of its own
        if not any(word in text.lower() for word in _TURN_WORDS):
            return None
        if _NOT_TURN.search(text) or _PERSON_MAY.search(text) or _all_negated(text):
            return None
        condition = _LEADING_CONDITION.match(text)
        if condition and condition.end() < len(text):  # the person's turn it names is the condition, not the point
            text = text[condition.end():]
            if not any(word in text.lower() for word in _TURN_WORDS):
                return None
        if _SLASH_MENU.search(text) or (_COUNTED.search(text) and _inline_options(raw)):
            return PointKind.CHOICE
        loop = _LOOP.search(text)
        if loop and (not _NEGATED_BEFORE.search(text[:loop.start()]) or _STOPS.search(text[:loop.start()])):
            return PointKind.LOOP
        if _ONE_AT_A_TIME.search(text):
            return PointKind.LOOP
        if _CONFIRM.search(text):
            return PointKind.CONFIRM
        if _CHOICE_LEAD.search(text) and len(_inline_options(raw)) >= 2:
            return PointKind.CHOICE
        if _QUESTION.search(text):
            return PointKind.QUESTION
        if _WEAK_CONFIRM.search(text):
            return PointKind.CONFIRM
        if _WITH_PERSON.search(text):  # a working session with the person: ``Walk `.memlog.md` with the user``
            return PointKind.QUESTION
        if _TURN.search(text) and _PERSON_RE.search(text) and _speaks_to_person(text):
            return PointKind.UNCLASSIFIED
        return None

    def routes(self, s: _Sentence) -> None:
        lowered = s.text.lower()
        if not any(mark in lowered for mark in (".md", ".xml", "read(", "step ", "phase ", "section ", "`##")):
            return
        for match in _PATH_RE.finditer(s.text):
            raw = next(g for g in match.groups() if g)
            before = s.text[:match.start()]
            if not _ROUTE_VERB.search(before[-80:]) and "Read(" not in match[0] and not _RUN_FILE.search(before):
                continue
            if _NOT_ROUTE.search(before[-60:]) and not _STRONG_ROUTE.search(before[-40:]):
                continue
            if raw.startswith(("{project-root}", "/")) or any(
                    p.name not in ("skill-root", "installed_path") for p in find(raw, frozenset(Kind))):
                continue
            if not raw.endswith((".md", ".xml")):
                continue
            if "template" in Path(raw).name.lower():
                continue  # a template is a document's skeleton, not text to follow
            if _ON_DEMAND.match(s.text[match.end():]):
                continue  # a reference read when needed (``Read `x` when you need it``), not text to follow now
            resolved = _resolve(self.base, self.file, raw)
            if resolved is None and "/" not in raw:
                continue  # a bare name found nowhere in the skill: a document of the run (prd.md), not a route
            if resolved is not None and resolved == self.file.resolve():
                continue  # a file naming itself (``Recovery: Read("phases/04-….md")``)
            self.point(PointKind.ROUTE, s.line, s.text, target=raw, resolved=resolved,
                       condition=self.condition(s.index, s.text, s.start, at=match.start()))
        for match in _SECTION_JUMP.finditer(s.text):
            title = next(g for g in match.groups() if g)
            section = _section_named(title, self.sections)
            if section is not None:
                at = next(match.start(g) for g in ("s", "t", "u") if match[g])
                self.point(PointKind.ROUTE, s.line, s.text, target=title, section=section,
                           condition=self.condition(s.index, s.text, s.start, at=at))
        for match in _SECTION_REF.finditer(s.text):
            section = _section_named(match["title"], self.sections)
            if section is not None and re.search(r"\b(?:run|follow|see|use|apply|go|jump|return|per)\b",
                                                 s.text[:match.start()], re.I):
                self.point(PointKind.ROUTE, s.line, s.text, target=f"## {match['title']}", section=section,
                           condition=self.condition(s.index, s.text, s.start, at=match.start()))

    def table_routes(self) -> None:
        """A table whose column says what to load (``| Intent | What it does | Load |``): each row's file is a
        route under the row's first cell."""
        column: int | None = None
        for line_no, line in self.prose:
            if not _TABLE.match(line):
                column = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if column is None:
                column = next((i for i, c in enumerate(cells) if _LOAD_COLUMN.fullmatch(c.strip("* "))), -1)
                continue
            if column < 0 or column >= len(cells) or set(line.strip()) <= set("|-: "):
                continue
            for match in _PATH_RE.finditer(cells[column]):
                raw = next(g for g in match.groups() if g)
                resolved = _resolve(self.base, self.file, raw)
                if raw.endswith(".md") and (resolved is not None or "/" in raw):
                    self.point(PointKind.ROUTE, line_no, line.strip(), target=raw, resolved=resolved,
                               condition=cells[0].strip("* ") or None)

    def handovers(self, s: _Sentence) -> None:
        lowered = s.text.lower()
        if not any(verb in lowered for verb in _HANDOVER_WORDS):
            return
        text = _masked(s.text)
        for match in _HANDOVER.finditer(text):
            name = next(g for g in match.groups() if g)
            if text[:match.start()].count("(") > text[:match.start()].count(")"):
                continue  # an aside: ``(use the `bmad-code-review` skill for that)``
            clause = re.split(r"[;—]|\s-\s", text[:match.start()])[-1]
            if _NOT_HANDOVER.search(clause + match[0]):
                continue  # advice or an aside naming the skill in this clause
            label = _LABEL.match(text[:match.start()])
            if label and _NOT_HANDOVER.search(label[0]):
                continue  # a sentence labelled as advice (``Common next: `bmad-ux`, …; invoke `bmad-help` …``)
            if name.lower() in ("the", "skill") or name == _own_name(self.base):
                continue
            resolved = self.find_skill(name) if self.find_skill else None
            condition = self.condition(s.index, s.text, s.start, at=max(s.text.find(name), 0))
            if _OFFERED.search(text[:match.start()]):
                condition = "the person accepts the offer" + (f"; {condition}" if condition else "")
            elif re.match(r"(?i)\s*or\b", clause):  # ``…, then `bmad-build`; or invoke `bmad-help` to route``
                taken = re.split(r"[;—]", clause + text[match.start():])[0].strip(" .")
                condition = f"the person takes the alternative ({taken})" + (f"; {condition}" if condition else "")
            self.point(PointKind.HANDOVER, s.line, s.text, target=name, resolved=resolved, condition=condition)

    # ---- CCW: AskUserQuestion blocks, Read("phases/…") routes and Skill(…) hand-overs in code
    def code(self) -> None:
        lines = self.text.splitlines()
        prose = {line for line, _ in self.prose}
        drawn = _drawings(lines)
        for offset, line in enumerate(lines):
            number = self.first_line + offset
            if number in prose or offset in drawn:
                continue  # read as prose above, or a box drawing of the architecture (not the flow)
            if "AskUserQuestion(" in line and "AskUserQuestion()" not in line:
                block = _call_block(lines, offset)
                self.ask_user_question(block, number, lines, offset)
            for match in re.finditer(r"Read\(\s*[\"']([^\"']+\.md)[\"']\s*\)|\bRef:\s*`?((?:[\w.-]+/)*[\w.-]+\.md)",
                                     line):
                raw = match[1] or match[2]
                resolved = _resolve(self.base, self.file, raw)
                if resolved is not None and resolved == self.file.resolve():
                    continue  # a file naming itself (``Recovery: Read("phases/04-….md")``)
                self.point(PointKind.ROUTE, number, line.strip(" │├└─"), target=raw, resolved=resolved,
                           condition=_flow_condition(lines, offset))
            for match in re.finditer(r"\bSkill\(\s*(?:skill\s*=\s*|\{\s*skill\s*:\s*)?[\"']([\w:-]+)[\"']", line):
                before = line[:match.start()]
                if line.lstrip().startswith(("//", "#")) or any(before.count(q) % 2 for q in "'\"`"):
                    continue  # a comment, or a string that names the call
                resolved = self.find_skill(match[1]) if self.find_skill else None
                self.point(PointKind.HANDOVER, number, line.strip(" │├└─"), target=match[1], resolved=resolved,
                           condition=_flow_condition(lines, offset))

    def ask_user_question(self, block: str, number: int, lines: list[str], offset: int) -> None:
        questions = _questions_of(block)
        condition = _code_condition(lines, offset)
        auto = "skipped in auto mode (-y): the default is taken" if _auto_guarded(lines, offset) else None
        for question, header, multi, labels in questions or [("", "", False, [])]:
            built = [label for label in labels if "${" in label]  # options the code builds when it runs
            labels = [label for label in labels if "${" not in label] + (["(built at run time)"] if built else [])
            options = tuple(Option(str(i), label, Route("local")) for i, label in enumerate(labels, start=1))
            default = next((o.key for o in options if "recommended" in o.label.lower()), None)
            text = question or (header or "AskUserQuestion")
            kind = PointKind.CHOICE if options else PointKind.QUESTION
            self.point(kind, number, text, options=options, condition=condition, multi=multi, default=default,
                       auto=auto)


#: a halt that only waits (``HALT — I am waiting for your numbered choice``, ``HALT. Ask the user:``): at a choice
#: it is that choice's wait, not a question of its own
_BARE_HALT = re.compile(r"(?i)\bhalt\b\W*(?:(?:and\s+)?wait(?:ing)?\s+for\s+(?:the\s+)?"
                        r"(?:user'?s?\s+|your\s+|human\s+)?(?:numbered\s+)?(?:input|selection|choice|response|answer)|i\s+am\s+waiting|do\s+not\s+proceed|"
                        r"ask\s+the\s+user\s*:\s*$|$)")


#: a line that leads into what a step displays at once: ``Display to user:``, ``**Present:**``
_DISPLAY_LEAD = re.compile(r"(?i)^\**(?:display|present|show)(?:\s+(?:this\s+|it\s+)?to\s+(?:the\s+)?user)?\s*:\**$")
#: a sentence that only waits for the person's answer (``Wait for user confirmation.``, ``Then wait.``)
_BARE_WAIT = re.compile(r"(?i)^(?:then\s+)?(?:halt\s+and\s+)?wait(?:\s+for\s+(?:the\s+)?"
                        r"(?:user'?s?\s+|their\s+|explicit\s+)?"
                        r"(?:confirmation|response|input|answer|reply|approval|selection|feedback))?\W*$")


_INLINE_KEY = re.compile(r"\[([A-Z]|\d{1,2})\]\s*([A-Za-z][^\[\]/|,;\"“”]*?)(?=\s*(?:/|\||,|;|or\b|\[|\"|”|\)|$))")


def _inline_keyed(text: str) -> tuple[Option, ...]:
    """Two or more ``[K] Label`` options written in one sentence that asks (``Would you like to review its
    changes? [Y] Yes / [N] No, let me choose``): a menu written inline. None from other prose."""
    found = [(m[1], re.split(r"\s+[—–-]\s+", m[2].replace("`", ""))[0].strip(" .*"))
             for m in _INLINE_KEY.finditer(text)]
    if len(found) < 2 or len({k for k, _ in found}) < len(found):
        return ()
    if "?" not in text and not re.search(r"(?i)\b(?:select|choose|pick|option|reply|enter|type)\b|"
                                         r"\bask\s+(?:the\s+)?(?:human|user)\s*:", text):
        return ()
    return tuple(Option(k, label, Route("local")) for k, label in found if label)


def _rules_lines(prose: list[tuple[int, str]]) -> set[int]:
    """The lines of the sections (with their subsections) whose heading says they restate rules for a model."""
    lines: set[int] = set()
    level: int | None = None
    tag: str | None = None
    for index, (line_no, line) in enumerate(prose):
        opened = _DESCRIBING_TAG.match(line)
        if opened and not opened[1]:
            tag = opened[2]
        if tag is not None:
            lines.add(line_no)
            if opened and opened[1] and opened[2] == tag:
                tag = None
            continue
        heading = _HEADING.match(line)
        if heading:
            depth = len(heading[1])
            if level is not None and depth <= level:
                level = None
            lead = next((text for _, text in prose[index + 1:] if text.strip()), "")
            if level is None and (_RULES_SECTION.search(heading[2]) or _STANDING_LEAD.search(lead)):
                level = depth
        if level is not None:
            lines.add(line_no)
    return lines


#: a section's opening line that says its items are a standard held throughout, not steps to take once: ``This is
#: the bar — strive for every one of these, every round.``
_STANDING_LEAD = re.compile(r"(?i)\bthis\s+is\s+the\s+bar\b|\b(?:strive|aim)\s+for\s+(?:every|each|all)\s+(?:one\s+)?"
                            r"of\s+these\b|\b(?:these|the\s+following)\s+(?:hold|apply)\s+(?:throughout|at\s+all\s+times|"
                            r"every\s+(?:round|turn))")
#: a CCW skill's tags that describe what the rest does (``<success_criteria>``, ``<auto_mode>``, ``<purpose>``)
_DESCRIBING_TAG = re.compile(r"^\s*<(/?)(success_criteria|auto_mode|purpose|overview|notes?)>\s*$")
_MENU_HANDLER = re.compile(r"^\s*(?:[-*+]\s*)?\**\s*(?i:if)\s+['\"]?(?:[A-Z0-9]{1,4}\b|(?i:any\s+other))[^:]*:")


def _ordered(points: list[Point]) -> tuple[Point, ...]:
    """Points in text order, each route or hand-over once (its first mention), a person's point once per line."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for point in sorted(points, key=lambda p: p.line):
        if point.kind in (PointKind.ROUTE, PointKind.HANDOVER):
            key: tuple[Any, ...] = (point.kind, point.section or point.resolved or point.target, point.condition)
        else:
            key = ("person", point.line, point.text)
        if key in seen:
            continue
        seen.add(key)
        kept.append(point)
    return tuple(kept)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _ends_lead_in(line: str) -> bool:
    stripped = line.rstrip().rstrip("*_\"'").rstrip()
    return stripped.endswith(":")


def _speaks_to_person(text: str) -> bool:
    """A sentence that addresses the person's turn (not a statement about a user of the product)."""
    return bool(re.search(r"\b(?:with|from|ask|to|let|tell|wait\s+for|offer|for)\s+(?:the\s+)?"
                          r"(?:user|human|person|them)\b|\b(?:user|they)\s+(?:must\s+|should\s+|will\s+|gets?\s+to\s+)?"
                          r"(?:choose|chooses|select|selects|pick|picks|decide|decides|approve|approves|confirm|confirms|"
                          r"agree|agrees)\b", text, re.I))


_SPAN = re.compile(r"\*\*([^*]{1,60}?)\*\*|(?<![*\w])\*([^*]{1,60}?)\*(?![*\w])")


#: a sentence that names the person's turn as a fault: ``Asking the user to confirm … is a defect``
_FAULT = re.compile(r"(?i)\bis\s+(?:a\s+)?(?:defect|mistake|failure|bug|forbidden|not\s+allowed|wrong)\b")
_NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "2": 2, "3": 3, "4": 4, "5": 5}
#: a choice that says how many options it offers and lists them: ``offer three paths: a, b, or c``
#: a choice each item of a list gets, its options written inline: ``Per finding: autofix, discuss, defer to open
#: items, or ignore.``
_PER_ITEM = re.compile(r"(?i)^(?:per|for\s+each)\s+[\w-]+(?:\s+[\w-]+)?\s*:\s*(?P<items>[^.;:]+?)\.?$")
#: a menu only some runs get: ``higher stakes get the explicit all/subset/skip menu``
_MENU_FOR = re.compile(r"(?i)(?:^|[;:—]\s*)(?P<who>[^;:—,]{3,80}?)\s+(?:gets?|earns?|warrants?|deserves?)\b"
                       r"[^;:—]*\bmenu\b")
_COUNTED = re.compile(r"(?i)\b(?:offer|present|give|show)\s+(?:the\s+user\s+)?(?P<n>two|three|four|five|[2-5])\s+"
                      r"(?:paths|options|choices|ways|routes)\s*:\s*(?P<items>[^.;]+)")


def _temporal(condition: str) -> bool:
    """Whether a condition's first clause only says when in the flow (see ``_TEMPORAL``)."""
    first = re.split(r"\s[—–]\s|[,;:(]", condition.strip(" *"))[0]
    return bool(first) and _TEMPORAL.match(first.strip()) is not None


def _cue_at(sentence: str, kind: PointKind) -> int:
    """Where in ``sentence`` the cue of its point of ``kind`` is (``ask``, ``confirm``, ``until the user …``)."""
    patterns = {PointKind.LOOP: (_LOOP,), PointKind.CONFIRM: (_CONFIRM, _WEAK_CONFIRM),
                PointKind.CHOICE: (_CHOICE_LEAD, _SLASH_MENU, _COUNTED, _INLINE_KEY, _QUESTION)}
    for pattern in (*patterns.get(kind, ()), _QUESTION, _TURN):
        found = pattern.search(sentence)
        if found:
            return found.start() + len(found[0]) - len(found[0].lstrip(",;:—( "))
    return 0


#: a permission followed by what it requires: ``Rules … can go in a nested `AGENTS.md` there — but only when …``
_PERMISSION = re.compile(r"(?i)^(?!\W*(?:you|we|i)\b)(?:"
                         r"(?P<what>(?:[^.;:]|\.(?=\w))*?\b(?:can|may|could|might)\s+(?!not\b)(?:[^.;:]|\.(?=\w))*?)"
                         r"\s*[—–,]?\s*\bbut\s+only\s+(?:when|if|after|once)\b"
                         r"|(?P<bare>(?:[^.;:—–]|\.(?=\w))*?\b(?:can|may|could|might)\s+(?!not\b)"
                         r"(?:[^.;:—–]|\.(?=\w))*?)\s+only\s+(?:when|if|after|once)\b)")


def _permission_of(sentence: str, cue: int) -> str | None:
    """The permission a sentence grants when the person's turn at ``cue`` is one of the requirements it lists
    after it (``Rules bounded to a directory can go in a nested `AGENTS.md` there … — but only when they are
    substantial, the user approves it, and …``): the turn is the person's only when the permission is used, so
    that is its condition (the permission's first clause). None when the sentence is no such permission."""
    found = _PERMISSION.match(sentence)  # not ``You can proceed only after the user approves``: a gate on the flow
    if found is None or cue < found.end():
        return None
    return re.split(r"\s*(?:,|\s[—–]\s)\s*", found["what"] or found["bare"])[0].strip(" *") or None


def _lead_is_case(lead: re.Match[str]) -> bool:
    """Whether a bold lead-in (:data:`_BOLD_CONDITION`) names a case: by its words (:func:`_reads_as_case`), or by
    the aside after it that gives the value or field it covers (``**Template swap** (`*_template` scalar):``,
    ``**Architecture Review** (`architecture`):``) or a case (``**Standalone Mode** (no story):``); an aside that
    names a file (``**Artifact Analyzer** (`./agents/analyzer.md`) —``) describes a part, not a case."""
    if _reads_as_case(lead["cond"]):
        return True
    aside = (lead["aside"] or "").strip()
    if not aside or _PATH_RE.search(aside) or re.search(r"\.(?:md|ya?ml|json|toml|py|ts|js)\b", aside):
        return False
    return bool(re.match(r"`[^`]+`(?:\s+[\w-]+)?$", aside) or _reads_as_case(aside))


def _reads_as_case(lead: str) -> bool:
    """Whether a bold lead-in names a case (``Resolver missing or fails``, ``Otherwise (interactive)``, a value such
    as ```auto```), not a step's title (``Welcome the user``, ``Resolve the roster``)."""
    lead = lead.strip()
    return bool(_LEADING_CONDITION.match(lead + ", ") or _CASE_WORDS.search(lead) or re.fullmatch(r"`[^`]+`", lead)
                or re.fullmatch(r"[a-z][\w-]*", lead)  # a value (``**bad_spec** —``, ``**readiness** —``)
                or re.match(r"(?i)(?:[a-h]\)|(?:option|path|case)\s+[a-h1-9]\b)", lead))  # ``**a) One-shot**``


def _arrow_case(sentence: str, at: int | None) -> str | None:
    """The case an arrow before ``at`` in ``sentence`` names (``Headless (no interactive user) → follow …``,
    ``Creative Partner → `references/mode-partner.md```, ``(unknown id -> show the names and ask)``): the words
    between the clause's start and the arrow. None when there is no arrow there, or what precedes it is a file, a
    step or an instruction of its own (``Phase 1 → Phase 2``)."""
    if at is None:
        return None
    arrows = [m for m in _ARROW.finditer(sentence) if m.end() <= at + 1]
    if not arrows:
        return None
    arrow = arrows[-1]
    if any(m.start() < at for m in re.finditer(r"[.;]\s|\s[—–]\s", sentence[arrow.end():at])):
        return None  # the point is in another clause than the arrow's
    between = sentence[arrow.end():at]
    if between.count(")") > between.count("("):
        return None  # the arrow is in an aside closed before the point: ``(policy → team, personal → user), confirm``
    depth, begin = 0, 0
    for offset in range(arrow.start() - 1, -1, -1):
        char = sentence[offset]
        if char == ")":
            depth += 1
        elif char == "(":
            if depth == 0:
                begin = offset + 1
                break
            depth -= 1
        elif depth == 0 and (char in ",;:—–" or sentence[offset:offset + 2] in (". ", "? ")):
            begin = offset + 1
            break
    titled = re.fullmatch(r"\s*\*\*[^*]+\*\*\s*[—–-]?\s*", sentence[:begin])
    case = re.sub(r"\*\*\s*[—–]", " —", sentence[0 if titled else begin:arrow.start()]).strip(" *_")
    if (not case or len(case) > 100 or _PATH_RE.search(case) or _ROUTE_VERB.search(case) or _QUESTION.search(case)
            or re.fullmatch(r"(?i)(?:step|phase|section)\s+\S+", case)
            or (case.isupper() and not _CASE_WORDS.search(case))):  # an instruction: ``**EARLY EXIT** → …``
        return None
    return case.rstrip("?")


def _all_negated(text: str) -> bool:
    """Whether the sentence's cue of the person's turn (the first of its strongest kind) is negated (``Do not
    ask.``, ``Never ask what a scan could answer.``), or it says the turn is a fault (``… is a defect``)."""
    if _FAULT.search(text):
        return True
    if _NEGATED.search(text) is None:
        return False
    for pattern in (_CONFIRM, _QUESTION, _WEAK_CONFIRM, _TURN):
        cue = pattern.search(text)
        if cue is not None:
            start = cue.start() + len(cue[0]) - len(cue[0].lstrip(",;:—( "))
            return any(m.start() <= start < m.end() for m in _NEGATED.finditer(text))
    return False


def _inline_options(text: str) -> tuple[Option, ...]:
    """The options a choice sentence lists after its colon as bold or italic spans (``**Vision + Features** (…),
    **Journey-led** (…), or *let me suggest*``), or a menu written as words between slashes (``the all/subset/skip
    menu``); none from any other prose."""
    per = _PER_ITEM.match(text.strip())
    if per:
        labels = [label.strip(" .") for label in re.split(r",\s*(?:or\s+)?|\s+or\s+", per["items"])]
        if len(labels) >= 3 and re.search(r"\bor\s+\S+\s*\.?$", per["items"]) and all(
                0 < len(label.split()) <= 6 for label in labels):
            return tuple(Option(k, label, Route("local")) for k, label in _keyed(labels))
    counted = _COUNTED.search(text)
    if counted:
        labels = [re.sub(r"\s*\([^)]*\)", "", label).replace("*", "").strip(" .") for label in
                  re.split(r",\s*(?:or\s+|and\s+)?|\s+or\s+", counted["items"])]
        labels = [label for label in labels if label]
        if len(labels) == _NUMBERS.get(counted["n"].lower(), 0):
            return tuple(Option(k, label, Route("local")) for k, label in _keyed(labels))
    slashed = _SLASH_MENU.search(text)
    if slashed:
        labels = [w.strip() for w in (slashed["opts"] or slashed["after"] or slashed["picked"]).split("/")
                  if w.strip()]
        return tuple(Option(k, label, Route("local")) for k, label in _keyed(labels))
    colon = text.find(":")
    if colon < 0:
        return ()
    after = re.sub(r"\([^)]*\)", lambda m: " " * len(m[0]), text[colon + 1:])  # an aside names no option
    labels = [(m[1] or m[2]).strip(" .:") for m in _SPAN.finditer(after)]
    labels = [label for label in labels if label]
    if len(labels) < 2:
        return ()
    return tuple(Option(k, label, Route("local")) for k, label in _keyed(labels))


def _keyed(labels: list[str]) -> list[tuple[str, str]]:
    initials = [label[:1].upper() for label in labels]
    unique = len(set(initials)) == len(initials) and all(i.isalnum() for i in initials)
    return [(initials[i] if unique else str(i + 1), label) for i, label in enumerate(labels)]


def _option_route(option: dict[str, Any], base: Path) -> Route:
    kind = option.get("kind")
    if kind == "advanced-elicitation":
        return Route("elicit")
    if kind == "party-mode":
        return Route("party")
    if kind == "exit":
        return Route("exit")
    found = _PATH_RE.search(str(option.get("handler") or ""))
    if found:
        return Route("goto", next(g for g in found.groups() if g))
    return Route("goto") if kind == "continue" else Route("local")


def _resolve(base: Path, file: Path, raw: str) -> Path | None:
    """A route's file: from the skill's folder (``{skill-root}/``, a bare path) or from the document (``./``)."""
    name = raw
    for prefix in ("{skill-root}/", "{installed_path}/"):
        name = name.removeprefix(prefix)
    candidates = [file.parent / name, base / name] if raw.startswith(("./", "../")) else [base / name,
                                                                                          file.parent / name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    return None


def _section_named(title: str, sections: tuple[str, ...]) -> str | None:
    """The section of the document a jump names: ``Step 3`` is the section titled ``Step 3: …``."""
    wanted = title.strip().lower()
    for section in sections:
        lowered = section.lower()
        if lowered == wanted or re.match(re.escape(wanted) + r"\b(?![.\d])", lowered):
            return section
    return None


def _own_name(base: Path) -> str:
    return base.name


# ------------------------------------------------------------------------------------------------- CCW code

_STRING = r"[\"'`]((?:[^\"'`\\]|\\.)*)[\"'`]"


def _drawings(lines: list[str]) -> set[int]:
    """The offsets of the lines of fenced blocks that draw boxes (an architecture diagram, not the flow)."""
    out: set[int] = set()
    start: int | None = None
    for offset, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            if start is None:
                start = offset
                continue
            if any(c in "".join(lines[start:offset]) for c in "┌╔"):
                out.update(range(start, offset + 1))
            start = None
    return out


def _call_block(lines: list[str], offset: int) -> str:
    """The text of the ``AskUserQuestion(`` call starting on ``lines[offset]``, to its closing parenthesis."""
    depth = 0
    started = False
    out = []
    for line in lines[offset:offset + 200]:
        out.append(line)
        for char in line[line.find("AskUserQuestion(") if not started else 0:]:
            if char == "(":
                depth += 1
                started = True
            elif char == ")":
                depth -= 1
        if started and depth <= 0:
            break
    return "\n".join(out)


def _questions_of(block: str) -> list[tuple[str, str, bool, list[str]]]:
    """``(question, header, multiSelect, option labels)`` of each question of an ``AskUserQuestion`` block."""
    found = []
    parts = re.split(r"(?=\bquestion\s*:)", block)
    for part in parts[1:]:
        question = re.search(r"\bquestion\s*:\s*" + _STRING, part)
        header = re.search(r"\bheader\s*:\s*" + _STRING, part)
        multi = re.search(r"\bmultiSelect\s*:\s*true", part) is not None
        labels = [m[1] for m in re.finditer(r"\blabel\s*:\s*" + _STRING, part)]
        found.append((question[1] if question else "", header[1] if header else "", multi, labels))
    return found


def _code_condition(lines: list[str], offset: int) -> str | None:
    """The ``if (…)`` a call in code sits in (the nearest open block above it), else None."""
    depth = 0
    for line in reversed(lines[max(0, offset - 60):offset]):
        depth += line.count("}") - line.count("{")
        if depth < 0:
            match = re.search(r"\b(?:if|else\s+if)\s*\((.*)\)\s*\{", line)
            if match and "autoYes" not in match[1]:
                return match[1].strip()
            if match or re.search(r"\belse\b|\bfunction\b|=>", line):
                return None
            depth = 0
        if line.startswith("```"):
            break
    return None


def _auto_guarded(lines: list[str], offset: int) -> bool:
    """Whether the auto mode (``autoYes``) skips the call: it sits in the ``else`` of ``if (autoYes)`` or under
    ``if (!autoYes)``."""
    window = "\n".join(lines[max(0, offset - 40):offset + 1])
    fence = window.rfind("```")
    window = window[fence:] if fence >= 0 else window
    return bool(re.search(r"!\s*autoYes|autoYes\b[^\n]*\)\s*\{[^}]*\}\s*else|if\s*\(\s*autoYes", window))


def _flow_condition(lines: list[str], offset: int) -> str | None:
    """The condition of an execution-flow line: ``conflictRisk ≥ medium → Ref: …`` on the line itself."""
    line = lines[offset].strip(" │├└─")
    match = re.match(r"(?P<cond>[^→]+?)\s*(?:→|->)", line)
    if match and not re.match(r"(?i)^(?:ref|phase)\b", match["cond"]):
        return match["cond"].strip(' "')
    return _code_condition(lines, offset) or _mode_over(lines, offset)


def _mode_over(lines: list[str], offset: int) -> str | None:
    """The mode whose heading is over the fenced flow holding ``lines[offset]`` when the text names another mode
    the default (``### Plan Mode (default)`` … ``### Verify Mode``): that flow is the run's only in its mode."""
    opened = False
    for line in reversed(lines[:offset]):
        if line.lstrip().startswith("```"):
            if opened:
                return None  # another block's end: no heading over this one
            opened = True
            continue
        heading = re.match(r"(#{2,6})\s+(.+)", line) if opened else None
        if heading:
            title = heading[2].strip(" *")
            default = re.compile(rf"^{heading[1]}\s+.*\bmode\b.*\(default\)", re.I)
            if re.search(r"(?i)\bmode\b", title) and "(default)" not in title.lower() \
                    and any(default.match(other) for other in lines):
                return title
            return None
    return None


def auto_mode_of(text: str) -> str | None:
    """How a CCW skill's text asks for its auto mode (``-y``, ``--yes``), None when it has none."""
    flags = sorted(set(re.findall(r"(?<![\w-])(-y|--yes)\b", text)), key=len)
    return ", ".join(flags) if flags else None


def read_points(text: str, *, file: Path, first_line: int = 1, base: Path,
                find_skill: Callable[[str], Path | None] | None = None,
                sections: Iterable[str] = ()) -> tuple[Point, ...]:
    """The points of one section's or step's ``text`` (which starts on ``first_line`` of ``file``), in text order.

    ``base`` is the skill's folder: routes resolve against it (a ``./`` path against ``file``'s folder first).
    ``find_skill`` names the folder of an installed skill (a hand-over's target); ``sections`` are the titles of
    the document's sections a jump may name (``jump to Step 3``).
    """
    reader = _Reader(text, file, first_line, base, find_skill, tuple(sections))
    return reader.run()


def with_condition(points: Iterable[Point], condition: str | None) -> tuple[Point, ...]:
    """``points`` each under ``condition`` too (a routed file's points under the condition of the route)."""
    if not condition:
        return tuple(points)
    return tuple(replace(p, condition=f"{condition}; {p.condition}" if p.condition else condition) for p in points)
