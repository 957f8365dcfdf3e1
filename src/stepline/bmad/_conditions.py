"""Classify the prose conditions of BMAD instructions into forms a runtime can decide without a model.

BMAD conditions (``<check if="…">``, ``<step if="…">``, ``<action if="…">``, ``<if selection="…">``) are
free text. Many of them follow a handful of shapes: a comparison on a variable (``{{mode}} == 'data'``), a
presence test (``{{story_path}} is provided``), a file test (``{sprint_status} file does NOT exist``) or a
menu answer (``user chooses '2'``). :func:`classify` turns those into a :class:`ParsedCondition` once, at
load time, so the engine evaluates structure and only sends the rest to the executor as a yes/no decision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ConditionKind", "ParsedCondition", "classify"]

ConditionKind = Literal["compare", "provided", "empty", "file-exists", "choice", "all", "any"]
Scalar = str | int | float | bool

_VAR = r"(?:\{\{\s*(?P<v1>[A-Za-z_][\w.-]*)\s*\}\}|\{(?P<v2>[A-Za-z_][\w-]*)\}|(?P<v3>[A-Za-z_][A-Za-z0-9_]*))"
_OPS = {
    "==": "==",
    "!=": "!=",
    ">=": ">=",
    "<=": "<=",
    ">": ">",
    "<": "<",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "gt": ">",
    "le": "<=",
    "ge": ">=",
}
_COMPARE = re.compile(rf"^{_VAR}\s*(?P<op>==|!=|>=|<=|>|<|\b(?:eq|ne|lt|gt|le|ge)\b)\s*(?P<rhs>.+?)$")
_PRESENCE = re.compile(rf"^{_VAR}\s+is\s+(?P<neg>not\s+)?(?P<what>provided|empty|set|defined)$", re.IGNORECASE)
_FILE_VAR_FIRST = re.compile(
    rf"^(?:file\s+)?{_VAR}\s+(?:file\s+)?(?P<neg>does\s+not\s+exist|doesn't\s+exist|not\s+exists?|exists?)$",
    re.IGNORECASE,
)
_FILE_PATH = re.compile(
    r"^(?:file\s+)?(?P<path>\S*(?:/|\{)\S*)\s+(?P<neg>does\s+not\s+exist|doesn't\s+exist|exists?)$",
    re.IGNORECASE,
)
_OPTION = r"(?:'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\d+|yes|no|[A-Za-z])"
_USER_CHOICE = re.compile(
    r"^(?:the\s+)?user\s+(?:chooses|selects|picks|enters|answers|confirms|responds(?:\s+with)?)\s+"
    rf"(?:option\s+)?(?P<opts>{_OPTION}(?:\s+or\s+{_OPTION})*)(?:\s+\(.*\))?$",
    re.IGNORECASE,
)
_SELECTION_IS = re.compile(r"^selection\s+is\s+(?P<opts>\w+(?:\s+or\s+\w+)*)(?:\s*\(.*\))?$", re.IGNORECASE)
_BARE_ANSWER = re.compile(r"^(?P<opt>y|n|yes|no)$", re.IGNORECASE)
_YES_NO = re.compile(
    r"^(?:the\s+)?(?:user|\{user_name\})\s+(?:(?:says|answers|responds)\s+(?P<said>yes|no)|(?P<verb>confirms|declines))$",
    re.IGNORECASE,
)
_SPLIT_OR = re.compile(r"\s+OR\s+")
_SPLIT_AND = re.compile(r"\s+AND\s+")
_SPLITTERS: tuple[tuple[re.Pattern[str], ConditionKind], ...] = ((_SPLIT_OR, "any"), (_SPLIT_AND, "all"))


@dataclass(frozen=True, slots=True)
class ParsedCondition:
    """A condition in a form the engine can evaluate deterministically.

    Attributes:
        kind: ``compare`` (``variable op operand``), ``provided`` / ``empty`` (a variable has / lacks a
            value), ``file-exists`` (the file named by ``variable`` or by the path ``operand``), ``choice``
            (the user's last answer is one of ``choices``), ``all`` / ``any`` (every / some of ``parts``).
        variable: the variable the condition reads (without braces), when there is one.
        operand: the right-hand side of ``compare``, or the literal path of ``file-exists``.
        negated: true when the condition is the negation of ``kind`` (``!=`` is written as ``op``, not here).
        op: the comparison operator of ``compare`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``).
        choices: the accepted answers of ``choice`` (lower-case).
        parts: the sub-conditions of ``all`` / ``any``.
    """

    kind: ConditionKind
    variable: str | None = None
    operand: Scalar | None = None
    negated: bool = False
    op: str | None = None
    choices: tuple[str, ...] = ()
    parts: tuple[ParsedCondition, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Serialise to a plain JSON dict (empty fields omitted)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.variable is not None:
            out["variable"] = self.variable
        if self.operand is not None:
            out["operand"] = self.operand
        if self.negated:
            out["negated"] = True
        if self.op is not None:
            out["op"] = self.op
        if self.choices:
            out["choices"] = list(self.choices)
        if self.parts:
            out["parts"] = [part.to_dict() for part in self.parts]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParsedCondition:
        """Rebuild a condition from :meth:`to_dict` output."""
        return cls(
            kind=data["kind"],
            variable=data.get("variable"),
            operand=data.get("operand"),
            negated=bool(data.get("negated", False)),
            op=data.get("op"),
            choices=tuple(data.get("choices", ())),
            parts=tuple(cls.from_dict(part) for part in data.get("parts", ())),
        )


def classify(condition: str, *, attribute: str = "if") -> ParsedCondition | None:
    """Return the structured form of ``condition``, or None when only judgement can decide it.

    Args:
        condition: the condition text as written in the instructions.
        attribute: the attribute it came from; ``selection`` and ``response`` (``<if selection="2 or …">``,
            ``<if response="a">``) are menu answers, whatever their wording.
    """
    text = " ".join(condition.split())
    if not text:
        return None
    if attribute in ("selection", "response"):
        first = re.split(r"\s+or\s+", text, maxsplit=1, flags=re.IGNORECASE)[0]
        return ParsedCondition(kind="choice", choices=(_unquote(first).lower(),))
    return _classify(text)


def _classify(text: str) -> ParsedCondition | None:
    for splitter, kind in _SPLITTERS:
        pieces = splitter.split(text)
        if len(pieces) > 1:
            parts: list[ParsedCondition] = []
            for piece in pieces:
                part = _classify(piece)
                if part is None:
                    return None
                parts.append(part)
            return ParsedCondition(kind=kind, parts=tuple(parts))
    return _simple(text)


def _simple(text: str) -> ParsedCondition | None:
    match = _USER_CHOICE.match(text)
    if match:
        options = re.split(r"\s+or\s+", match.group("opts"), flags=re.IGNORECASE)
        return ParsedCondition(kind="choice", choices=tuple(_unquote(o).strip("[]").lower() for o in options))
    match = _SELECTION_IS.match(text)
    if match:
        options = re.split(r"\s+or\s+", match.group("opts"), flags=re.IGNORECASE)
        return ParsedCondition(kind="choice", choices=tuple(o.lower() for o in options))
    match = _YES_NO.match(text)
    if match:
        yes = (match.group("said") or "").lower() == "yes" or (match.group("verb") or "").lower() == "confirms"
        return ParsedCondition(kind="choice", choices=("y", "yes") if yes else ("n", "no"))
    match = _BARE_ANSWER.match(text)
    if match:
        return ParsedCondition(kind="choice", choices=(match.group("opt").lower(),))
    match = _PRESENCE.match(text)
    if match:
        what = match.group("what").lower()
        kind: ConditionKind = "empty" if what == "empty" else "provided"
        return ParsedCondition(kind=kind, variable=_variable(match), negated=bool(match.group("neg")))
    match = _FILE_VAR_FIRST.match(text)
    if match and (match.group("v1") or match.group("v2")):
        return ParsedCondition(kind="file-exists", variable=_variable(match), negated=_negated_exists(match))
    match = _FILE_PATH.match(text)
    if match:
        return ParsedCondition(kind="file-exists", operand=match.group("path"), negated=_negated_exists(match))
    match = _COMPARE.match(text)
    if match:
        operand = _operand(match.group("rhs"))
        if operand is None:
            return None
        return ParsedCondition(
            kind="compare", variable=_variable(match), op=_OPS[match.group("op").lower()], operand=operand
        )
    return None


def _variable(match: re.Match[str]) -> str:
    return match.group("v1") or match.group("v2") or match.group("v3")


def _negated_exists(match: re.Match[str]) -> bool:
    return match.group("neg").lower().replace("'", "").startswith(("does", "doesnt", "not"))


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _operand(text: str) -> Scalar | None:
    """Parse a comparison's right-hand side: a quoted string, number, boolean or single bare word."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    if re.fullmatch(r"[\w.-]+", text):
        return text
    return None
