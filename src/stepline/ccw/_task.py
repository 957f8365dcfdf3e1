"""CCW task JSON: the 6-field schema and the flat 2026 schema, status spellings, light scan and full load.

Two shapes exist in the wild:

* the **6-field** schema (2025): ``id``, ``title``, ``status``, ``meta`` (type, agent, execution_group),
  ``context`` (depends_on, parent, requirements, …), ``flow_control`` (pre_analysis, …);
* the **flat** schema (2026, ``task-schema.json``): ``id``, ``title``, ``description``, ``depends_on`` and
  ``convergence`` at the top level, ``type``, ``parallel_group``, ``meta.agent`` and many optional blocks.

Scheduling needs only a handful of fields, so the session index uses :func:`scan_task_file`, which parses a
file, keeps those fields and drops the rest; :func:`read_task_file` reads and validates the whole task when
it is about to run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from stepline.errors import ReaderError
from stepline.formats import FileVersion, decode_text, parse_json, read_file

TaskStatus = Literal["pending", "in_progress", "completed", "blocked", "container", "failed", "skipped"]
TaskSchema = Literal["six-field", "flat"]

#: Longest title kept in the index; a title is display text and must not make the index grow with the JSON.
MAX_INDEX_TITLE = 200

_STATUS_SPELLINGS: dict[str, TaskStatus] = {
    "pending": "pending",
    "todo": "pending",
    "not_started": "pending",
    "ready": "pending",
    "active": "in_progress",
    "in_progress": "in_progress",
    "inprogress": "in_progress",
    "running": "in_progress",
    "started": "in_progress",
    "completed": "completed",
    "complete": "completed",
    "done": "completed",
    "blocked": "blocked",
    "container": "container",
    "failed": "failed",
    "error": "failed",
    "skipped": "skipped",
}

#: Agent per task type when ``meta.agent`` is missing (the assignment rules of ``/workflow:execute``).
_AGENT_BY_TYPE = {
    "feature": "@code-developer",
    "test-gen": "@code-developer",
    "test-fix": "@test-fix-agent",
    "review": "@universal-executor",
    "docs": "@doc-generator",
}
DEFAULT_AGENT = "@code-developer"


_SEPARATORS = re.compile(r"[\s-]+")


def normalize_status(value: object) -> TaskStatus | None:
    """Return the canonical spelling of a task status (``active`` → ``in_progress``), None when unknown."""
    if not isinstance(value, str):
        return None
    known = _STATUS_SPELLINGS.get(value)  # nearly always spelled as is: no normalising needed
    if known is not None:
        return known
    return _STATUS_SPELLINGS.get(_SEPARATORS.sub("_", value.strip().lower()))


def infer_agent(agent: str | None, task_type: str | None) -> str:
    """Return the agent that runs a task: ``meta.agent`` when given, else the one its type implies."""
    if agent:
        return agent
    return _AGENT_BY_TYPE.get(task_type or "", DEFAULT_AGENT)


def detect_schema(data: Mapping[str, Any]) -> TaskSchema | None:
    """Tell the flat schema (``convergence``/top-level ``depends_on``) from the 6-field one (``context``)."""
    if "convergence" in data or "depends_on" in data or ("description" in data and "context" not in data):
        return "flat"
    if "context" in data or "flow_control" in data:
        return "six-field"
    return None


def line_of(text: str | bytes, needle: str) -> int | None:
    """Return the 1-based line of the first ``"needle"`` (a JSON string) in ``text``, None if absent."""
    if isinstance(text, bytes):  # task files are read as bytes; only an error message needs a line
        text = text.decode("utf-8", "replace")
    pos = text.find(json.dumps(needle))
    return text.count("\n", 0, pos) + 1 if pos >= 0 else None


@dataclass(frozen=True, slots=True)
class TaskRef:
    """What scheduling needs of one task, without the task's body (the session index holds only these).

    ``path`` is None for a container that TODO_LIST.md names but that has no task JSON.
    """

    id: str
    path: Path | None
    schema: TaskSchema | None
    title: str
    status: TaskStatus
    depends_on: tuple[str, ...] = ()
    execution_group: str | None = None
    parent: str | None = None
    type: str | None = None
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class CcwTask:
    """A whole task JSON, read when the task runs; ``data`` is the parsed file as written, ``version`` that
    of the file it was read from."""

    ref: TaskRef
    data: dict[str, Any]
    version: FileVersion | None = None

    @property
    def id(self) -> str:
        """The task id."""
        return self.ref.id

    @property
    def agent(self) -> str:
        """The agent that runs the task (``meta.agent`` or inferred from the type)."""
        return infer_agent(self.ref.agent, self.ref.type)

    @property
    def description(self) -> str:
        """The task's goal: ``description`` (flat) or the joined ``context.requirements`` (6-field)."""
        if isinstance(self.data.get("description"), str):
            return str(self.data["description"])
        context = self.data.get("context")
        requirements = context.get("requirements") if isinstance(context, dict) else None
        if isinstance(requirements, list):
            return "\n".join(str(item) for item in requirements)
        return ""


def parse_task_text(text: str | bytes, path: Path) -> dict[str, Any]:
    """Parse task JSON; a syntax error or a non-object is a ReaderError at the offending line."""
    try:
        data = orjson.loads(text)  # several times faster; every task is read at load and when it runs
    except orjson.JSONDecodeError:
        if isinstance(text, bytes):  # bytes that are not UTF-8 are a ReaderError naming the offset
            text = decode_text(text, path)
        try:  # what orjson refuses but Python reads (NaN, huge integers), or the error
            data = parse_json(text, path, what="task JSON does not parse")
        except ReaderError as exc:
            exc.hint = "fix the file or restore it from its last good version"
            raise
    if not isinstance(data, dict):
        raise ReaderError("task JSON must be an object", path=str(path), line=1)
    return data


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str_or_none(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)  # not through float: a huge integer would overflow it
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else str(value)
    return value if isinstance(value, str) and value else None


def ref_from_data(data: Mapping[str, Any], path: Path, text: str | bytes) -> TaskRef:
    """Extract the scheduling fields of a parsed task; wrong types there are ReaderErrors with file:line."""
    schema = detect_schema(data)
    task_id = data.get("id")
    if not isinstance(task_id, str) or not task_id.strip():
        raise ReaderError("task JSON has no string `id`", path=str(path), line=line_of(text, "id") or 1)
    meta = _object(data.get("meta"))
    context = _object(data.get("context"))
    if schema == "flat":
        deps: object = data.get("depends_on", [])
        group = _str_or_none(meta.get("execution_group")) or _str_or_none(data.get("parallel_group"))
        parent = _str_or_none(data.get("parent")) or _str_or_none(meta.get("parent"))
        task_type = _str_or_none(data.get("type")) or _str_or_none(meta.get("type"))
    else:
        deps = context.get("depends_on", [])
        group = _str_or_none(meta.get("execution_group"))
        parent = _str_or_none(context.get("parent"))
        task_type = _str_or_none(meta.get("type"))
    if deps is None:
        deps = []
    if not isinstance(deps, list) or not all(isinstance(dep, str) for dep in deps):
        raise ReaderError(f"task {task_id}: `depends_on` must be a list of task ids", path=str(path),
                          line=line_of(text, "depends_on") or 1)
    raw_status = data.get("status", "pending")
    status = normalize_status(raw_status)
    if status is None:
        raise ReaderError(f"task {task_id}: unknown status {raw_status!r}", path=str(path),
                          line=line_of(text, "status") or 1,
                          hint="use pending, in_progress (active), completed, blocked, container, failed "
                               "or skipped")
    title = data.get("title")
    return TaskRef(
        id=task_id,
        path=path,
        schema=schema,
        title=title[:MAX_INDEX_TITLE] if isinstance(title, str) else "",
        status=status,
        depends_on=tuple(dict.fromkeys(deps)),
        execution_group=group,
        parent=parent,
        type=task_type,
        agent=_str_or_none(meta.get("agent")),
    )


def scan_task_file(path: Path) -> TaskRef:
    """Read one task file for the session index: keep the scheduling fields, drop everything else."""
    text = read_file(path)[0]  # bytes: orjson needs no str, and decoding is half the cost of a small read
    return ref_from_data(parse_task_text(text, path), path, text)


def read_task_file(path: Path) -> CcwTask:
    """Read and validate a whole task JSON (when its task is about to run)."""
    text, version = read_file(path)
    data = parse_task_text(text, path)
    problems = validate_task_data(data, text)
    if problems:
        message, line = problems[0]
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ReaderError(message + more, path=str(path), line=line,
                          hint="`stepline ccw check` lists every problem of the session")
    return CcwTask(ref=ref_from_data(data, path, text), data=data, version=version)


def _expect(problems: list[tuple[str, int | None]], text: str | bytes, data: Mapping[str, Any], key: str,
            kind: type | tuple[type, ...], label: str, where: str = "") -> None:
    value = data.get(key)
    if not isinstance(value, kind):
        problems.append((f"{where}`{key}` must be {label}", line_of(text, key) or 1))


def _expect_str_list(problems: list[tuple[str, int | None]], text: str | bytes, data: Mapping[str, Any], key: str,
                     where: str = "") -> None:
    value = data.get(key)
    if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
        problems.append((f"{where}`{key}` must be a list of strings", line_of(text, key) or 1))


def _check_pre_analysis(problems: list[tuple[str, int | None]], text: str | bytes, steps: object) -> None:
    if steps is None:
        return
    if not isinstance(steps, list):
        problems.append(("`pre_analysis` must be a list of steps", line_of(text, "pre_analysis") or 1))
        return
    for number, step in enumerate(steps, start=1):
        if not isinstance(step, dict) or not isinstance(step.get("step"), str):
            problems.append((f"pre_analysis step {number} needs a string `step` name",
                             line_of(text, "pre_analysis") or 1))


def validate_task_data(data: Mapping[str, Any], text: str | bytes) -> list[tuple[str, int | None]]:
    """Return every schema problem of a parsed task as ``(message, line)``; empty when the task is valid."""
    problems: list[tuple[str, int | None]] = []
    schema = detect_schema(data)
    if schema is None:
        return [("task JSON matches neither the 6-field schema (id, title, status, meta, context, "
                 "flow_control) nor the flat schema (id, title, description, depends_on, convergence)", 1)]
    required = (("id", "title", "status", "meta", "context", "flow_control") if schema == "six-field"
                else ("id", "title", "description", "depends_on", "convergence"))
    missing = [key for key in required if key not in data]
    if missing:
        problems.append((f"{schema} task JSON lacks {', '.join(missing)}", 1))
    for key in ("id", "title"):
        if key in data:
            _expect(problems, text, data, key, str, "a string")
    if isinstance(data.get("id"), str) and re.search(r"[\s/\\]", data["id"]):
        # a task id names its step and its summary file: .summaries/<id>-summary.md
        problems.append((f"task id {data['id']!r} may not hold a slash, a backslash or white space",
                         line_of(text, "id") or 1))
    if "status" in data and normalize_status(data["status"]) is None:
        problems.append((f"unknown status {data['status']!r}", line_of(text, "status") or 1))
    if schema == "six-field":
        for key in ("meta", "context", "flow_control"):
            if key in data:
                _expect(problems, text, data, key, dict, "an object")
        context = _object(data.get("context"))
        for key in ("depends_on", "requirements", "focus_paths", "acceptance"):
            _expect_str_list(problems, text, context, key, "context.")
        flow = _object(data.get("flow_control"))
        _check_pre_analysis(problems, text, flow.get("pre_analysis"))
    else:
        if "description" in data:
            _expect(problems, text, data, "description", str, "a string")
        if "depends_on" in data:
            _expect_str_list(problems, text, data, "depends_on")
        if "convergence" in data:
            criteria = _object(data["convergence"]).get("criteria")
            if not (isinstance(criteria, list) and criteria and all(isinstance(c, str) for c in criteria)):
                problems.append(("`convergence.criteria` must be a non-empty list of strings",
                                 line_of(text, "convergence") or 1))
        if "meta" in data:
            _expect(problems, text, data, "meta", dict, "an object")
        if "parallel_group" in data and (isinstance(data["parallel_group"], bool)
                                         or not isinstance(data["parallel_group"], int | float)):
            problems.append(("`parallel_group` must be a number", line_of(text, "parallel_group") or 1))
        _check_pre_analysis(problems, text, data.get("pre_analysis"))
    return problems


def task_items(value: object) -> list[Any]:
    """A task field as a list: a list as it is, a single value as one item, nothing as none."""
    if isinstance(value, list):
        return value
    return [] if value is None or value == "" else [value]


def task_item_text(value: object) -> str:
    """One item of a task field as text (a ``{path, action}`` object as ``path (action)``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        path = value.get("path") or value.get("file")
        if path:
            extra = value.get("action") or value.get("change") or value.get("contains") or value.get("type")
            return f"{path} ({extra})" if extra else str(path)
        return ", ".join(f"{key}: {val}" for key, val in value.items())
    return str(value)


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task JSON's fields, read from either schema (6-field ``context``/``flow_control`` or flat 2026)."""

    data: Mapping[str, Any]

    @property
    def flat(self) -> bool:
        """True for the flat 2026 schema (no ``context`` block)."""
        return "context" not in self.data and "flow_control" not in self.data

    def _context(self, key: str) -> Any:
        return self.data.get(key) if self.flat else _object(self.data.get("context")).get(key)

    @property
    def requirements(self) -> list[str]:
        """``context.requirements``, or the flat schema's ``description``."""
        if self.flat:
            return [str(self.data["description"])] if self.data.get("description") else []
        return [task_item_text(item) for item in task_items(self._context("requirements"))]

    @property
    def focus_paths(self) -> list[str]:
        """Where the change happens."""
        return [task_item_text(item) for item in task_items(self._context("focus_paths"))]

    @property
    def acceptance(self) -> list[str]:
        """``context.acceptance``, or the flat schema's ``convergence.criteria``."""
        if self.flat:
            return [task_item_text(item) for item in task_items(_object(self.data.get("convergence")).get("criteria"))]
        return [task_item_text(item) for item in task_items(self._context("acceptance"))]

    @property
    def artifacts(self) -> list[str]:
        """Brainstorming outputs and specifications the task refers to."""
        return [task_item_text(item) for item in task_items(self._context("artifacts"))]

    @property
    def depends_on(self) -> list[str]:
        """Ids of the tasks this one depends on."""
        return [str(item) for item in task_items(self._context("depends_on"))]

    @property
    def inherited(self) -> Any:
        """Context inherited from a parent task."""
        return self._context("inherited")

    @property
    def approach(self) -> list[Any]:
        """``flow_control.implementation_approach``, or the flat schema's ``implementation``."""
        if self.flat:
            return task_items(self.data.get("implementation"))
        return task_items(_object(self.data.get("flow_control")).get("implementation_approach"))

    @property
    def target_files(self) -> list[str]:
        """``flow_control.target_files``, or the flat schema's ``files``."""
        if self.flat:
            return [task_item_text(item) for item in task_items(self.data.get("files"))]
        return [task_item_text(item) for item in task_items(_object(self.data.get("flow_control")).get("target_files"))]

    @property
    def pre_analysis(self) -> list[Any]:
        """The context-gathering steps the runtime runs before the agent."""
        if self.flat:
            return task_items(self.data.get("pre_analysis"))
        return task_items(_object(self.data.get("flow_control")).get("pre_analysis"))
