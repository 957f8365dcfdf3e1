"""The result a skill's headless mode returns to automation, as its headless reference describes it.

BMAD's skills end a headless run "with a JSON status block": ``references/headless.md`` (or a ``## Headless``
section of SKILL.md, or the schema file either points to, ``assets/headless-schemas.md``) shows its shape in
fenced ``json`` blocks, one per intent (``## Create``, ``## Update``, ``## Validate``) or one for all, and
states the rules: ``status`` is ``complete``, ``partial`` (produced, but ``open_questions`` remain) or
``blocked`` (no artifact produced); keys of artifacts not produced are omitted. :func:`result_shapes` reads the
shapes; :func:`fill_result` fills one from the run's facts — the runtime's (the intent, which files exist,
the files written) over the executor's (its own JSON status, for the judgement fields: ``assumptions``,
``open_questions``, ``changes_summary``, …).

Pure: reads files, never imports the engine.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepline._placeholders import Kind, find
from stepline.formats import read_text

__all__ = ["ResultFacts", "ResultShape", "executor_status", "fill_result", "pick_shape", "result_shapes"]

_FENCE = re.compile(r"^```json\s*\n(.*?)^```", re.M | re.S)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
_SCHEMA_REF = re.compile(r"`((?:assets|references)/[\w./-]*(?:headless|schema)[\w./-]*\.md)`", re.I)
_FILE_SUFFIX = re.compile(r"\.(?:md|html|json|ya?ml|csv|txt)$")
#: Path-valued keys that are not the skill's artifacts: having only these is not having produced anything.
_NOT_ARTIFACTS = {"memlog", "doc_workspace", "workspace"}


@dataclass(frozen=True, slots=True)
class ResultShape:
    """One JSON result a headless reference shows: the heading it sits under, the file and line, its keys."""

    heading: str
    path: Path
    line: int
    template: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResultFacts:
    """What the runtime knows at the end of a headless run.

    ``render`` resolves a template value's ``{placeholders}`` from the run (unresolved ones stay), ``exists``
    says whether a rendered path is on disk, ``files`` are the files the run wrote, ``reported`` is the
    executor's own JSON status (empty when it gave none).
    """

    intent: str | None
    render: Callable[[str], str]
    exists: Callable[[str], bool]
    files: list[str]
    reported: dict[str, Any]
    variables: dict[str, Any]


def _headless_docs(root: Path) -> list[tuple[Path, str]]:
    """The texts that describe headless mode: references/headless.md, SKILL.md's headless sections, and the
    schema files they name."""
    docs: list[tuple[Path, str]] = []
    reference = root / "references" / "headless.md"
    if reference.is_file():
        docs.append((reference, read_text(reference)))
    skill = root / "SKILL.md"
    if skill.is_file():
        text = read_text(skill)
        starts = [m.start() for m in re.finditer(r"(?m)^#{2,3}\s", text)] + [len(text)]
        for begin, end in itertools.pairwise(starts):
            if "headless" in text[begin:text.find("\n", begin)].lower():
                docs.append((skill, text[:begin].count("\n") * "\n" + text[begin:end]))  # keep line numbers
        named = [line for line in text.splitlines() if "headless" in line.lower()]
        docs.extend(_schema_files(root, named))
    for _, text in list(docs):
        docs.extend(_schema_files(root, text.splitlines()))
    return list(dict.fromkeys(docs))


def _schema_files(root: Path, lines: Iterable[str]) -> list[tuple[Path, str]]:
    found = []
    for line in lines:
        for match in _SCHEMA_REF.finditer(line):
            path = root / match[1]
            if path.is_file() and path.name != "headless.md":
                found.append((path, read_text(path)))
    return found


def result_shapes(root: Path) -> list[ResultShape]:
    """Every JSON result (an object with a ``status``) the skill at ``root`` describes for headless runs."""
    shapes: list[ResultShape] = []
    for path, text in _headless_docs(root):
        for match in _FENCE.finditer(text):
            try:
                value = json.loads(match[1])
            except json.JSONDecodeError:
                continue
            if not isinstance(value, dict) or "status" not in value:
                continue
            headings = _HEADING.findall(text[:match.start()])
            shapes.append(ResultShape(headings[-1] if headings else "", path, text[:match.start()].count("\n") + 1,
                                      value))
    return shapes


def pick_shape(shapes: list[ResultShape], intent: str | None, blocked: bool) -> ResultShape | None:
    """The shape for this run: a blocked one when the run is blocked, else the one under the intent's heading
    (``## Create``), else the first that is not the blocked one."""
    def is_blocked(shape: ResultShape) -> bool:
        return "blocked" in shape.heading.lower() or shape.template.get("status") == "blocked"

    if blocked:
        found = next((s for s in shapes if is_blocked(s)), None)
        if found is not None:
            return found
    if intent:
        found = next((s for s in shapes if s.heading.lower().startswith(intent.lower())), None) or next(
            (s for s in shapes if intent.lower() in _choices(s.template.get("intent"))), None)
        if found is not None:
            return found
    return next((s for s in shapes if not is_blocked(s)), shapes[0] if shapes else None)


def executor_status(texts: Iterable[str | None]) -> dict[str, Any]:
    """The last JSON object with a ``status`` among the executor's texts (its summaries), else ``{}``."""
    found: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    for text in texts:
        for index in [m.start() for m in re.finditer(r"\{", text or "")]:
            try:
                value, _ = decoder.raw_decode(text or "", index)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and "status" in value:
                found = value
    return found


def _pathlike(value: str) -> bool:
    """Whether a shape's value names a file: a file's name, or a folder's placeholder (``{doc_workspace}/…``)."""
    return bool(_FILE_SUFFIX.search(value)) or any(value.startswith("/", p.end)
                                                    for p in find(value, {Kind.VAR, Kind.CUSTOM}))


def _choices(value: Any) -> list[str]:
    """``"create | update | validate"`` -> its alternatives, lower-case; a plain word -> itself."""
    return [v.strip().lower() for v in value.split("|")] if isinstance(value, str) else []


def fill_result(shape: ResultShape, facts: ResultFacts) -> dict[str, Any]:
    """The result, key by key in the shape's order (see the module doc); keys nothing fills are omitted."""
    reported = facts.reported
    result: dict[str, Any] = {}
    produced: list[str] = []
    for key, value in shape.template.items():
        if key == "status":
            continue
        if key == "intent":  # the run's intent; else the shape's own word ("brainstorm"); else the executor's
            options = _choices(value)
            intent = facts.intent or (options[0] if len(options) == 1 else reported.get(key))
            if intent:
                result[key] = intent
        elif key == "files" and isinstance(value, list):
            result[key] = list(facts.files)
            produced += facts.files
        elif isinstance(value, str) and (key in _NOT_ARTIFACTS or _pathlike(value)):
            path = facts.render(value) if "{" in value else str(facts.variables.get(key) or "")
            if path and "{" not in path and "<" not in path and facts.exists(path):
                result[key] = path
                if key not in _NOT_ARTIFACTS:
                    produced.append(path)
        elif isinstance(value, bool):
            result[key] = reported.get(key, value) if isinstance(reported.get(key), bool) else value
        elif isinstance(value, list):
            given = reported.get(key)
            result[key] = given if isinstance(given, list) else []
        elif key in reported and key != "reason":
            result[key] = reported[key]
    names_artifacts = any(isinstance(v, str) and _pathlike(v) and k not in _NOT_ARTIFACTS
                          for k, v in shape.template.items()) or "files" in shape.template
    if reported.get("status") == "blocked" or (names_artifacts and not produced):
        reason = reported.get("reason") or ("the run produced none of the artifacts the headless reference names"
                                            if not produced else "the executor reported the run blocked")
        kept: dict[str, Any] = {k: result[k] for k in ("intent", "doc_workspace") if k in result}
        blocked: dict[str, Any] = {"status": "blocked", **kept, "reason": reason}
        if reported.get("error_code"):
            blocked["error_code"] = reported["error_code"]
        return blocked
    partial = reported.get("status") == "partial" or bool(result.get("open_questions"))
    return {"status": "partial" if partial else "complete", **result}
