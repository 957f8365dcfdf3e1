"""Deciding BMAD conditions without a model where their structure allows it (R-E2).

The reader classifies each prose condition once (:func:`stepline.bmad._conditions.classify`); this
module evaluates the classified form against what the runtime knows at that moment: the run's variables, the
files of the project and the last answer a person (or the simulated expert) gave. Whatever it cannot settle it
returns as undecided, and the interpreter sends it to the executor as a yes/no ``decide`` request.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline._placeholders import Unresolved, substitute
from stepline.bmad._conditions import ParsedCondition

__all__ = ["Verdict", "evaluate", "is_known"]

_GLOB = re.compile(r"[*?\[]")
_ANSWER_NAMES = frozenset({"choice", "selection", "response", "answer", "user_choice", "user_response"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """The runtime's answer to a condition: ``value`` None means only judgement can decide it."""

    value: bool | None
    reason: str


def is_known(variables: Mapping[str, Any], name: str) -> bool:
    """Whether ``name`` has a value: present, not None, and not still its own unresolved ``{name}``."""
    if name not in variables or variables[name] is None:
        return False
    value = variables[name]
    return not (isinstance(value, str) and value.strip() in ("{" + name + "}", "{{" + name + "}}"))


def evaluate(parsed: ParsedCondition | None, *, variables: Mapping[str, Any], project_root: Path,
             last_answer: str | None) -> Verdict:
    """Decide ``parsed`` from the run's state, or return an undecided verdict saying what is missing."""
    if parsed is None:
        return Verdict(None, "prose condition")
    if parsed.kind in ("all", "any"):
        return _combine(parsed, variables, project_root, last_answer)
    if parsed.kind == "choice":
        return _choice(parsed, last_answer)
    if parsed.kind == "file-exists":
        verdict = _file_exists(parsed, variables, project_root)
    elif parsed.kind == "compare":
        verdict = _compare(parsed, _with_answer(variables, parsed.variable, last_answer))
    else:
        verdict = _presence(parsed, variables)
    if verdict.value is not None and parsed.negated:
        return Verdict(not verdict.value, f"not ({verdict.reason})")
    return verdict


def _combine(parsed: ParsedCondition, variables: Mapping[str, Any], root: Path, answer: str | None) -> Verdict:
    verdicts = [evaluate(part, variables=variables, project_root=root, last_answer=answer) for part in parsed.parts]
    decisive = parsed.kind == "any"  # one true settles ANY, one false settles ALL
    for verdict in verdicts:
        if verdict.value is decisive:
            return Verdict(decisive, verdict.reason)
    if all(verdict.value is not None for verdict in verdicts):
        return Verdict(not decisive, "; ".join(v.reason for v in verdicts))
    missing = next(v.reason for v in verdicts if v.value is None)
    return Verdict(None, missing)


def _choice(parsed: ParsedCondition, answer: str | None) -> Verdict:
    if answer is None:
        return Verdict(None, "no answer has been given yet")
    given = answer.strip().lower().strip("[]'\"` ").strip()
    for choice in parsed.choices:
        if given == choice or (given.startswith(choice) and not given[len(choice):len(choice) + 1].isalnum()):
            return Verdict(True, f"the answer {answer.strip()!r} is {choice!r}")
    return Verdict(False, f"the answer {answer.strip()!r} is not one of {', '.join(parsed.choices)}")


def _presence(parsed: ParsedCondition, variables: Mapping[str, Any]) -> Verdict:
    name = parsed.variable or ""
    value = variables.get(name) if is_known(variables, name) else None
    filled = value not in (None, "") and not (isinstance(value, list | dict) and not value)
    if isinstance(value, str) and not value.strip():
        filled = False
    holds = filled if parsed.kind == "provided" else not filled
    shown = "has a value" if filled else "is empty or unset"
    return Verdict(holds, f"{name} {shown}")


def _with_answer(variables: Mapping[str, Any], name: str | None, answer: str | None) -> Mapping[str, Any]:
    """``choice == 1`` right after a menu reads the answer when no variable of that name was set."""
    if name in _ANSWER_NAMES and answer is not None and not is_known(variables, name):
        return {**variables, name: answer.strip().strip("[]'\"` ")}
    return variables


def _compare(parsed: ParsedCondition, variables: Mapping[str, Any]) -> Verdict:
    name = parsed.variable or ""
    if not is_known(variables, name):
        return Verdict(None, f"{name} is not known")
    left, right, op = variables[name], parsed.operand, parsed.op or "=="
    if op in ("==", "!="):
        equal = _normal(left) == _normal(right)
        return Verdict(equal if op == "==" else not equal, f"{name} = {left!r}")
    a, b = _number(left), _number(right)
    if a is None or b is None:
        return Verdict(None, f"{name} = {left!r} is not a number")
    result = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    return Verdict(result, f"{name} = {left!r}")


def _normal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    number = _number(value)
    if number is not None:
        return repr(number)
    return str(value).strip().strip("'\"").strip().lower()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def _file_exists(parsed: ParsedCondition, variables: Mapping[str, Any], root: Path) -> Verdict:
    if parsed.variable is not None:
        if not is_known(variables, parsed.variable):
            return Verdict(None, f"{parsed.variable} is not known")
        raw = str(variables[parsed.variable])
    else:
        raw = str(parsed.operand or "")
    try:
        path = substitute(raw, variables, nested=True, strict=True).strip().strip("'\"`")
    except Unresolved as exc:
        return Verdict(None, f"the path {raw!r} is not fully known ({exc})")
    if not path:
        return Verdict(None, f"the path {raw!r} is not fully known")
    target = Path(path) if Path(path).is_absolute() else root / path
    if _GLOB.search(path):
        exists = any(Path(p).is_file() for p in glob.iglob(str(target), recursive=True))
    else:
        exists = target.exists()
    return Verdict(exists, f"{path} {'exists' if exists else 'does not exist'}")
