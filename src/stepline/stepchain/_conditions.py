"""Conditions of a step's prose that the runtime reads itself, without asking the executor.

A route, a checkpoint or a point of the plan may hang from a condition. These are read from the run's facts: a
file that exists or is missing (``If `{x}/STOP.md` exists``), a variable or ``{workflow.<x>}`` / config value
compared to a literal or (non-)empty, a frontmatter field of the file a variable names, whether a person takes
part (``If launched headless``: not in normal mode). Anything else is prose
only the executor can judge: None. ``render`` substitutes the family's placeholders (a skill's ``{workflow.x}``,
``{{.config}}``, a workflow's ``{var}``) into a path or token.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepline.formats import read_frontmatter, read_text

__all__ = ["EXISTS", "attendance_fact", "condition_fact", "existence_fact", "status_of"]

#: a line that hinges on a file: ``If `x` exists →``, ``when `x` is missing``
EXISTS = re.compile(r"\b(?:if|when)\s+`([^`]+)`\s+(exists|is missing|does not exist|doesn't exist)\b", re.I)
_TOKEN = r"`?(\{\{?[^{}`\s]+\}?\})`?"
_COMPARE = re.compile(_TOKEN + r"\s+(?P<op>==|=|!=|is not|is)\s+`?[\"']?(?P<value>[\w.-]+)[\"']?`?", re.I)
_EMPTINESS = re.compile(_TOKEN + r"\s+is\s+(?P<value>non-empty|not empty|empty|set|unset)\b", re.I)
_FIELD = re.compile(_TOKEN + r"\s+(?:exists\s+)?(?:with|has)\s+`(?P<field>\w+):\s*(?P<value>[\w-]+)`", re.I)
_EMPTY = {"", "[]", "{}", "none", "null"}

Render = Callable[[str], str]


def _path(root: Path, text: str) -> Path:
    return Path(text) if Path(text).is_absolute() else root / text


def status_of(root: Path, value: Any) -> tuple[Path, str] | None:
    """``(path, status)`` when ``value`` names a Markdown file under ``root`` whose frontmatter has a ``status``."""
    if not isinstance(value, str) or not value.strip().endswith(".md"):
        return None
    path = _path(root, value)
    if not path.is_file():
        return None
    status = read_frontmatter(read_text(path), path=str(path)).data.get("status")
    return (path, str(status)) if status not in (None, "") else None


def existence_fact(line: str, render: Render, root: Path) -> tuple[bool, Path] | None:
    """``(holds, path)`` for a line that hinges on a file (``If `{x}/STOP.md` exists``, ``is missing``, ``does not
    exist``), once the path renders completely; None for any other line."""
    match = EXISTS.search(line)
    if match is None:
        return None
    rendered = render(match[1])
    if "{" in rendered or "<" in rendered:
        return None
    path = _path(root, rendered)
    exists = path.exists()
    return (exists if match[2].lower() == "exists" else not exists), path


#: a condition on whether a person takes part: ``If launched headless``, ``No interactive user``, ``Otherwise
#: (interactive)``; the words left once those are taken out say whether it is only that
_HEADLESS = re.compile(r"(?i)\b(?:headless|non-?interactive|unattended|no\s+interactive\s+user|"
                       r"no\s+(?:human|user|person)\s+(?:present|here|available))\b")
_INTERACTIVE = re.compile(r"(?i)(?<![-\w])(?:interactive(?:\s+user)?|"
                          r"a\s+(?:human|user|person)\s+is\s+(?:present|here))\b")
_FILLER = re.compile(r"(?i)\b(?:if|when|whenever|otherwise|else|launched|running|run|runs|is|are|it|the|a|an|in|mode|"
                     r"session|there|there's|user|human|person)\b|[\W_]+")


def attendance_fact(condition: str, attended: bool) -> tuple[bool, str] | None:
    """``(holds, why)`` for a condition that is only about whether a person takes part (``If launched headless``,
    ``Headless (no interactive user)``, ``Otherwise (interactive)``), read from the run (``attended``: normal mode);
    when such a part comes with prose (``If interactive and unclear``), it decides only when it does not hold; None
    otherwise."""
    headless = _HEADLESS.search(condition)
    interactive = _INTERACTIVE.search(_HEADLESS.sub(" ", condition))
    if not headless and not interactive:
        return None
    holds = not attended if headless else attended
    why = f"the run {'has a' if attended else 'has no'} person answering " + (
        "(normal mode)" if attended else "(unattended)")
    rest = _FILLER.sub("", _INTERACTIVE.sub(" ", _HEADLESS.sub(" ", re.sub(r"\([^)]*\)", " ", condition))))
    if not rest:
        return holds, why
    if not holds and not re.search(r"(?i)\bor\b", condition):  # ``Interactive create``, ``interactive and unclear``
        return False, why
    return None


def condition_fact(condition: str, render: Render, root: Path,
                   attended: bool | None = None) -> tuple[bool, str] | None:
    """``(holds, why)`` for a condition the runtime can read (see the module doc), None for prose; ``attended``:
    whether a person takes part in the run (None: not known)."""
    negate = condition.strip().lower().startswith("unless")
    fact: tuple[bool, str] | None = attendance_fact(condition, attended) if attended is not None else None
    if fact is not None:
        return fact
    on_disk = existence_fact(condition, render, root)
    if on_disk is not None:
        holds, path = on_disk
        fact = holds, f"{path} {'exists' if path.exists() else 'is missing'}"
    elif (match := _FIELD.search(condition)) is not None:
        rendered = render(match[1])
        if "{" not in rendered:
            path = _path(root, rendered)
            value = read_frontmatter(read_text(path), path=str(path)).data.get(match["field"]) \
                if path.is_file() else None
            fact = str(value) == match["value"], f"{path} has {match['field']}: {value}"
    elif (match := _EMPTINESS.search(condition)) is not None:
        value = render(match[1])
        if match[1] not in value:
            empty = value.strip().lower() in _EMPTY
            fact = (empty if match["value"].lower() in ("empty", "unset") else not empty), f"{match[1]} = {value!r}"
    elif (match := _COMPARE.search(condition)) is not None:
        value = render(match[1])
        if match[1] not in value:
            equal = value.strip().lower() == match["value"].lower()
            fact = (not equal if match["op"].lower() in ("!=", "is not") else equal), f"{match[1]} = {value!r}"
    if fact is None:
        return None
    return (not fact[0], f"{fact[1]} (unless)") if negate else fact
