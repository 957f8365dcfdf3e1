"""CCW (Claude-Code-Workflow) sessions: find them, index them lazily, turn them into a WorkflowSpec.

Three layouts exist::

    .workflow/active/WFS-<topic>/        2025-11 and later (``.workflow/archives/WFS-*`` once completed)
    .workflow/WFS-<topic>/               2025-09/10, active while ``.workflow/.active-WFS-<topic>`` exists
    … + plan.json, flat task JSON        2026 (same folders, ``schemas/task-schema.json`` tasks)

A session folder holds ``workflow-session.json``, ``IMPL_PLAN.md``, ``TODO_LIST.md``, ``.task/*.json``
(plus ``plan.json``, ``.summaries/``, ``.process/context-package.json``). The index reads TODO_LIST.md and
only the scheduling fields of each task JSON (id, depends_on, group, parent, status, type, agent);
:meth:`CcwSession.load_task` reads a whole task when it runs. Readers never write.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from stepline._limits import cut
from stepline._paths import escape, link_out
from stepline.ccw._graph import task_cycle
from stepline.ccw._plan import (
    ExecutionModel,
    ExecutionStrategy,
    PlanItem,
    combine,
    parse_impl_plan,
    read_plan_json,
)
from stepline.ccw._task import (
    CcwTask,
    TaskRef,
    TaskSchema,
    TaskStatus,
    infer_agent,
    line_of,
    normalize_status,
    read_task_file,
    scan_task_file,
)
from stepline.ccw._todo import (
    TodoEntry,
    TodoList,
    mark_todo_completed,
    parse_todo_text,
    read_todo_list,
    render_todo_line_completed,
    summary_href_for,
)
from stepline.errors import NotFoundError, ReaderError, UsageError
from stepline.formats import parse_json, read_text
from stepline.model import WorkflowSpec

__all__ = [
    "CcwSession",
    "CcwTask",
    "ExecutionModel",
    "ExecutionStrategy",
    "Layout",
    "PlanItem",
    "SessionInfo",
    "TaskRef",
    "TaskStatus",
    "TodoEntry",
    "TodoList",
    "confined_session",
    "discover_sessions",
    "find_session",
    "infer_agent",
    "load_ccw_session",
    "mark_todo_completed",
    "normalize_status",
    "parse_todo_text",
    "read_ccw_session",
    "render_todo_line_completed",
    "summary_href_for",
]

Layout = Literal["active", "archived", "legacy", "detached"]

SESSION_FILE = "workflow-session.json"
CREATE_HINT = 'create one with CCW\'s /workflow:plan "task description"'
_NATURAL = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``IMPL-2`` before ``IMPL-10``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _NATURAL.split(text) if part)


def session_layout(session_dir: Path) -> tuple[Layout, Path | None]:
    """Return the layout of a session folder and its project root (the folder holding ``.workflow``)."""
    parent = session_dir.parent
    if parent.name in ("active", "archives") and parent.parent.name == ".workflow":
        return ("active" if parent.name == "active" else "archived"), parent.parent.parent
    if parent.name == ".workflow":
        return "legacy", parent.parent
    return "detached", None


def confined_session(session_dir: Path) -> Path:
    """The real path of a session folder, refused (:class:`ReaderError`) when the folder sits in a project's
    ``.workflow`` but symlinks lead it out of the project: its task files would be sent to agents and rewritten
    out there, and the run would lose its project."""
    written = Path(os.path.abspath(session_dir))
    project_root = session_layout(written)[1]
    real = link_out(written, project_root) if project_root is not None else None
    if real is not None:
        raise ReaderError(f"the session folder is a symlink to {real}, outside the project",
                          path=str(written / SESSION_FILE), line=1,
                          hint="move the session into the project's .workflow folder")
    return written.resolve()


def read_json_object(path: Path) -> dict[str, Any]:
    """Read a JSON object file; syntax errors and non-objects are ReaderErrors at file:line."""
    data = parse_json(read_text(path), path, what=f"{path.name} does not parse")
    if not isinstance(data, dict):
        raise ReaderError(f"{path.name} must be a JSON object", path=str(path), line=1)
    return data


@dataclass(slots=True)
class CcwSession:
    """The index of one session: its files, its tasks' scheduling fields in document order, its strategy.

    ``tasks`` holds :class:`TaskRef` only; read a task's full JSON with :meth:`load_task` when it runs.
    ``status`` is the effective status (TODO_LIST.md's box decides completed-or-not, the task JSON the finer
    state); ``conflicts`` lists the tasks whose TODO box and JSON status disagree.
    """

    session_id: str
    session_dir: Path
    layout: Layout
    project_root: Path | None
    session: dict[str, Any]
    tasks: dict[str, TaskRef]
    status: dict[str, TaskStatus]
    children: dict[str, list[str]]
    strategy: ExecutionStrategy
    todo: TodoList | None = None
    conflicts: list[str] = field(default_factory=list)

    @property
    def task_schema(self) -> TaskSchema | Literal["mixed"] | None:
        """``six-field``, ``flat``, ``mixed`` or None (no task JSON)."""
        schemas = {ref.schema for ref in self.tasks.values() if ref.path is not None}
        if len(schemas) > 1:
            return "mixed"
        return next(iter(schemas), None)

    def paths(self) -> dict[str, str | None]:
        """Every path of the session the engine and the writers need, as strings."""
        base = self.session_dir

        def existing(name: str) -> str | None:
            return str(base / name) if (base / name).exists() else None

        return {
            "session_dir": str(base),
            "project_root": str(self.project_root) if self.project_root else None,
            "workflow_session": str(base / SESSION_FILE),
            "impl_plan": existing("IMPL_PLAN.md"),
            "plan_json": existing("plan.json"),
            "todo_list": str(base / "TODO_LIST.md"),
            "task_dir": str(base / ".task"),
            "summaries_dir": str(base / ".summaries"),
            "process_dir": str(base / ".process"),
            "context_package": existing(".process/context-package.json"),
        }

    def load_task(self, task_id: str) -> CcwTask:
        """Read and validate the whole task JSON of ``task_id`` (call it when the task is about to run)."""
        ref = self.tasks.get(task_id)
        if ref is None:
            raise NotFoundError(f"session {self.session_id} has no task {task_id}")
        if ref.path is None:
            raise ReaderError(f"task {task_id} is a container without a task JSON",
                              path=str(self.session_dir))
        return read_task_file(ref.path)

    def to_workflow_spec(self) -> WorkflowSpec:
        """Return the session as a ``ccw`` WorkflowSpec: one step per task, in TODO_LIST.md order."""
        todo_entries = self.todo.by_id if self.todo else {}
        steps: list[dict[str, Any]] = []  # validated with the spec, in one call: per-step models cost twice
        for task_id, ref in self.tasks.items():
            entry = todo_entries.get(task_id)
            phase = self.strategy.phases.get(task_id)
            path = str(ref.path) if ref.path else None
            steps.append({
                "id": task_id,
                "name": ref.title or (entry.title if entry else ""),
                "phase": f"Phase {phase}" if phase else "",
                "depends_on": list(ref.depends_on),
                "execution_group": ref.execution_group,
                "source": {"path": path} if path else None,
                "meta": {
                    "task_json": path,
                    "schema": ref.schema,
                    "container": task_id in self.children,
                    "parent": ref.parent,
                    "children": list(self.children.get(task_id, ())),
                    "type": ref.type,
                    "agent": infer_agent(ref.agent, ref.type),
                    "agent_declared": ref.agent is not None,
                    "status": self.status[task_id],
                    "json_status": ref.status,
                    "todo_line": entry.line if entry else None,
                    "module": entry.section if entry else None,
                },
            })
        try:
            return self._spec(steps)
        except ValidationError as exc:  # a task's id or fields a workflow step cannot have: one line, at its file
            first = exc.errors()[0]
            loc = first["loc"]
            index = loc[1] if len(loc) > 1 and loc[0] == "steps" and isinstance(loc[1], int) else None
            where = steps[index]["meta"]["task_json"] if index is not None else None
            problem = ("may not hold a slash, a backslash or white space"
                       if first["type"] == "string_pattern_mismatch" and loc[-1] == "id" else first["msg"])
            raise ReaderError(f"{'.'.join(str(p) for p in loc[2:] or loc)} {cut(repr(first.get('input')), 40)}: "
                              f"{problem}", path=where or str(self.session_dir / SESSION_FILE),
                              hint="fix the task JSON and TODO_LIST.md") from None

    def _spec(self, steps: list[dict[str, Any]]) -> WorkflowSpec:
        strategy = self.strategy
        return WorkflowSpec.model_validate({
            "id": self.session_id,
            "name": str(self.session.get("project") or self.session.get("description") or self.session_id),
            "format": "ccw",
            "source": {"path": str(self.session_dir / SESSION_FILE)},
            "root": str(self.project_root or self.session_dir),
            "steps": steps,
            "meta": {
                "session_id": self.session_id,
                "layout": self.layout,
                "task_schema": self.task_schema,
                "session_status": self.session.get("status"),
                "execution_model": strategy.model,
                "execution_model_sources": {"impl_plan": strategy.impl_plan_model,
                                            "plan_json": strategy.plan_json_model},
                "serialization": strategy.serialization_groups,
                "serialization_text": [item.text for item in strategy.serialization],
                "parallelization": [item.text for item in strategy.parallelization],
                "critical_path": list(strategy.critical_path),
                "phases": dict(strategy.phases),
                "plan": dict(strategy.plan_json),
                "status_conflicts": list(self.conflicts),
                "paths": self.paths(),
            },
        })


def _scan_tasks(task_dir: Path) -> dict[str, TaskRef]:
    refs: dict[str, TaskRef] = {}
    try:
        # scandir, not glob: the same names (``*.json``, no dotfiles) at a fraction of the cost per file.
        with os.scandir(task_dir) as entries:
            found = [(entry.name, entry.is_symlink()) for entry in entries
                     if entry.name.endswith(".json") and entry.name[0] != "."]
    except (FileNotFoundError, NotADirectoryError):
        return refs
    links = {name for name, link in found if link}
    for name in sorted((name for name, _ in found), key=natural_key):
        path = task_dir / name
        if name in links and escape(task_dir.parent, path) is not None:
            # a task's JSON is sent to its agent and rewritten on completion: it must be the session's own
            raise ReaderError(f"a symlink to {path.resolve()}, outside the session", path=str(path),
                              hint="copy the task file into the session's .task folder")
        ref = scan_task_file(path)
        if ref.id in refs:
            raise ReaderError(f"task id {ref.id} is also used by {refs[ref.id].path}", path=str(path),
                              line=line_of(path.read_bytes(), "id"))
        refs[ref.id] = ref
    return refs


def _effective_status(ref: TaskRef, entry: TodoEntry | None) -> tuple[TaskStatus, bool]:
    """TODO_LIST.md is the source of truth for done-or-not; the task JSON adds the finer state."""
    if entry is None or entry.is_container:
        return ref.status, False
    if entry.state == "completed":
        return "completed", ref.status != "completed"
    if ref.status == "completed":
        return "pending", True
    if entry.state == "in_progress" and ref.status == "pending":
        return "in_progress", False
    return ref.status, False


def _check_dependencies(session_dir: Path, refs: dict[str, TaskRef], parent: dict[str, str | None]) -> None:
    for ref in refs.values():
        for dep in ref.depends_on:
            if dep not in refs:
                text = ref.path.read_bytes() if ref.path else b""
                raise ReaderError(f"task {ref.id} depends on {dep}, which is not a task of this session",
                                  path=str(ref.path or session_dir), line=line_of(text, dep),
                                  hint="fix depends_on or restore the missing task JSON")
        owner = parent.get(ref.id)
        if owner and owner not in refs:
            raise ReaderError(f"task {ref.id} names parent {owner}, which is not a task of this session",
                              path=str(ref.path or session_dir))
    cycle = task_cycle(list(refs), {r.id: r.depends_on for r in refs.values()}, parent)
    if cycle:
        first = refs[cycle[0]]
        raise ReaderError(f"dependency cycle: {' → '.join(cycle)}", path=str(first.path or session_dir),
                          hint="remove one of these depends_on entries")


def read_ccw_session(session_dir: Path) -> CcwSession:
    """Index a CCW session folder (``WFS-*``) without reading the bodies of its tasks.

    Raises:
        NotFoundError: the folder does not exist.
        ReaderError: workflow-session.json missing or broken, a task JSON that does not parse, duplicate
            ids, a TODO_LIST.md line or a dependency naming a missing task, a dependency cycle, no tasks.
    """
    session_dir = confined_session(session_dir)
    if not session_dir.is_dir():
        raise NotFoundError(f"no CCW session folder at {session_dir}", hint=CREATE_HINT)
    session_file = session_dir / SESSION_FILE
    if not session_file.is_file():
        raise ReaderError(f"{SESSION_FILE} is missing", path=str(session_file),
                          hint="`stepline ccw check` reports it; recreate it with this session_id and status "
                               "\"active\"")
    session = read_json_object(session_file)
    layout, project_root = session_layout(session_dir)

    todo_path = session_dir / "TODO_LIST.md"
    todo = read_todo_list(todo_path) if todo_path.is_file() else None
    if todo is not None and todo.duplicates:
        dup = todo.duplicates[0]
        first = todo.by_id[dup.task_id].line
        raise ReaderError(f"task {dup.task_id} is listed twice (first at line {first})",
                          path=str(todo_path), line=dup.line)
    scanned = _scan_tasks(session_dir / ".task")

    # Document order: TODO_LIST.md first, then tasks it does not list, in natural id order.
    refs: dict[str, TaskRef] = {}
    todo_parent: dict[str, str | None] = {}
    todo_containers = todo.containers if todo else frozenset()
    for entry in todo.entries if todo else ():
        todo_parent[entry.task_id] = entry.parent
        ref = scanned.get(entry.task_id)
        if ref is None:
            if entry.task_id not in todo_containers:
                raise ReaderError(f"TODO_LIST.md names task {entry.task_id}, which has no task JSON",
                                  path=str(todo_path), line=entry.line,
                                  hint="restore the task JSON or remove the line")
            ref = TaskRef(id=entry.task_id, path=None, schema=None, title=entry.title, status="container")
        refs[entry.task_id] = ref
    for task_id in sorted(scanned.keys() - refs.keys(), key=natural_key):
        refs[task_id] = scanned[task_id]
    if not refs:
        raise ReaderError("session has no tasks (.task/ holds no task JSON)", path=str(session_dir),
                          hint=CREATE_HINT)

    parent = {task_id: ref.parent or todo_parent.get(task_id) for task_id, ref in refs.items()}
    _check_dependencies(session_dir, refs, parent)
    children: dict[str, list[str]] = {}
    for task_id, owner in parent.items():
        if owner:
            children.setdefault(owner, []).append(task_id)
    for task_id, ref in refs.items():
        if ref.status == "container" or task_id in todo_containers:
            children.setdefault(task_id, [])

    status: dict[str, TaskStatus] = {}
    conflicts: list[str] = []
    todo_by_id = todo.by_id if todo else {}
    for task_id, ref in refs.items():
        status[task_id], conflict = _effective_status(ref, todo_by_id.get(task_id))
        if conflict:
            conflicts.append(task_id)
    for task_id, kids in children.items():
        if kids:
            status[task_id] = ("completed" if all(status[kid] == "completed" for kid in kids)
                               else "container")

    impl_plan = session_dir / "IMPL_PLAN.md"
    strategy = (parse_impl_plan(read_text(impl_plan), refs.keys()) if impl_plan.is_file()
                else ExecutionStrategy())
    plan_path = session_dir / "plan.json"
    strategy = combine(strategy, read_plan_json(plan_path) if plan_path.is_file() else None)
    return CcwSession(
        session_id=session_dir.name, session_dir=session_dir, layout=layout, project_root=project_root,
        session=session, tasks=refs, status=status, children=children, strategy=strategy, todo=todo,
        conflicts=conflicts,
    )


def load_ccw_session(session_dir: Path) -> WorkflowSpec:
    """Read a CCW session folder into a ``ccw`` WorkflowSpec (task bodies are read later, lazily)."""
    return read_ccw_session(session_dir).to_workflow_spec()


# --- discovery ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session as discovery lists it: ``id | project | done/total (%)``."""

    id: str
    project: str
    done: int
    total: int
    path: Path
    layout: Layout
    active: bool
    status: str | None = None

    @property
    def percent(self) -> int:
        """Completed share of the leaf tasks, rounded down (0 when there are none)."""
        return self.done * 100 // self.total if self.total else 0

    def format_line(self) -> str:
        """Return the line a session chooser shows."""
        return f"{self.id} | {self.project} | {self.done}/{self.total} tasks ({self.percent}%)"


def _session_info(path: Path, layout: Layout, active: bool) -> SessionInfo:
    project, status = "Unknown", None
    try:
        data = json.loads(read_text(path / SESSION_FILE))
    except (OSError, ValueError, ReaderError, RecursionError):
        data = None
    if isinstance(data, dict):
        project = str(data.get("project") or data.get("description") or "Unknown")
        status = data["status"] if isinstance(data.get("status"), str) else None
    done = total = 0
    todo_path = path / "TODO_LIST.md"
    if todo_path.is_file():
        done, total = read_todo_list(todo_path).progress()
    return SessionInfo(id=path.name, project=project, done=done, total=total, path=path, layout=layout,
                       active=active, status=status)


def _all_sessions(project_root: Path) -> list[SessionInfo]:
    workflow = project_root / ".workflow"
    found: dict[Path, SessionInfo] = {}
    active_dir = workflow / "active"
    for path in sorted(active_dir.glob("WFS-*")) if active_dir.is_dir() else ():
        if path.is_dir():
            found[path] = _session_info(path, "active", True)
    markers = {marker.name.removeprefix(".active-") for marker in workflow.glob(".active-*")}
    for path in sorted(workflow.glob("WFS-*")) if workflow.is_dir() else ():
        if path.is_dir():
            found[path] = _session_info(path, "legacy", path.name in markers)
    archives = workflow / "archives"
    for path in sorted(archives.glob("WFS-*")) if archives.is_dir() else ():
        if path.is_dir():
            found[path] = _session_info(path, "archived", False)
    return list(found.values())


def discover_sessions(project_root: Path, *, include_inactive: bool = False) -> list[SessionInfo]:
    """List the project's active CCW sessions (``.workflow/active/WFS-*`` and marked legacy ones).

    ``include_inactive`` adds archived sessions and legacy sessions without an ``.active-*`` marker.

    Raises:
        NotFoundError: no session at all, with the way to create one.
    """
    sessions = [info for info in _all_sessions(Path(project_root)) if include_inactive or info.active]
    if not sessions:
        raise NotFoundError(f"no active CCW workflow session in {Path(project_root) / '.workflow'}",
                            hint=CREATE_HINT)
    return sessions


def find_session(project_root: Path, id_or_partial: str) -> SessionInfo:
    """Return the session whose id is ``id_or_partial`` or the only one containing it (active ones first).

    Raises:
        NotFoundError: nothing matches (the message names the available sessions).
        UsageError: the partial id matches several sessions (the message names them).
    """
    sessions = _all_sessions(Path(project_root))
    wanted = id_or_partial.strip()
    for hits in ([s for s in sessions if s.id == wanted],
                 [s for s in sessions if s.id.lower() == wanted.lower()]):
        if hits:
            return next((info for info in hits if info.active), hits[0])
    matches = [info for info in sessions if wanted.lower() in info.id.lower()] if wanted else []
    active = [info for info in matches if info.active]
    if len(active) == 1:
        return active[0]
    if len(matches) == 1:
        return matches[0]
    if matches:
        names = ", ".join(info.id for info in (active or matches))
        raise UsageError(f"session id {wanted!r} matches several sessions: {names}",
                         hint="give more of the id")
    ids = [info.id for info in sessions]
    close = difflib.get_close_matches(wanted, ids, n=3)
    if close:
        hint = f"did you mean {', '.join(close)}?"
    elif ids:
        hint = f"sessions: {', '.join(ids)}"
    else:
        hint = CREATE_HINT
    raise NotFoundError(f"no CCW session matches {wanted!r} in {Path(project_root) / '.workflow'}", hint=hint)

