"""``stepline ccw check``: every problem of a CCW session folder, one Diagnostic (file:line) each.

Unlike :func:`stepline.ccw._session.read_ccw_session`, which stops at the first problem, the check reads
everything it can and reports all of it. It never repairs anything.
"""

from __future__ import annotations

from pathlib import Path

from stepline._paths import escape
from stepline.ccw._graph import task_cycle
from stepline.ccw._session import SESSION_FILE, confined_session, natural_key, session_layout
from stepline.ccw._task import TaskRef, TaskView, line_of, ref_from_data, validate_task_data
from stepline.ccw._todo import TodoList, read_todo_list
from stepline.errors import NotFoundError, ReaderError
from stepline.formats import Diagnostic, Severity, parse_json, read_text

__all__ = ["check_ccw_session"]


class _Report:
    def __init__(self) -> None:
        self.items: list[Diagnostic] = []
        #: Ids (file stems) of task files already reported as unreadable, not to be reported again as missing.
        self.unreadable: set[str] = set()

    def add(self, severity: Severity, code: str, message: str, path: Path, line: int | None = None) -> None:
        self.items.append(Diagnostic(severity, code, message, str(path), line))

    def unreadable_file(self, exc: OSError | ReaderError, path: Path) -> None:
        """Report a file that cannot be read, or whose bytes are not UTF-8 (at the line of the first bad one)."""
        if isinstance(exc, ReaderError):
            detail = f"{exc.detail}; {exc.hint}" if exc.hint else exc.detail
            self.add("error", "not-utf8", detail, Path(exc.path or path), exc.line)
        else:
            self.add("error", "unreadable", f"cannot read {path.name}: {exc.strerror or exc}", path)


def _read_json(report: _Report, path: Path) -> tuple[object, str] | None:
    try:
        text = read_text(path)
    except (OSError, ReaderError) as exc:
        report.unreadable_file(exc, path)
        return None
    try:
        return parse_json(text, path, what=f"{path.name} does not parse"), text
    except ReaderError as exc:
        report.add("error", "json-syntax", exc.detail, path, exc.line)
    return None


def _check_session_file(report: _Report, session_dir: Path) -> None:
    path = session_dir / SESSION_FILE
    if not path.is_file():
        report.add("error", "missing-session-file",
                   f"{SESSION_FILE} is missing (recreate it with session_id \"{session_dir.name}\" "
                   "and status \"active\")", path)
        return
    parsed = _read_json(report, path)
    if parsed is None:
        return
    data, text = parsed
    if not isinstance(data, dict):
        report.add("error", "json-syntax", f"{SESSION_FILE} must be a JSON object", path, 1)
    elif isinstance(data.get("session_id"), str) and data["session_id"] != session_dir.name:
        report.add("warning", "session-id-mismatch",
                   f"session_id {data['session_id']!r} differs from the folder name {session_dir.name!r}",
                   path, line_of(text, "session_id"))


def _outside(path: str, project_root: Path) -> bool:
    """Whether ``path`` (as a task names it: relative to the project, or absolute) leaves the project."""
    return escape(project_root, path.split(" (")[0].strip()) is not None  # task_item_text's "path (action)"


def _check_paths(report: _Report, path: Path, data: dict[str, object], text: str, project_root: Path,
                 severity: Severity) -> None:
    """A task's ``focus_paths`` and ``target_files`` must stay in the project: the agent is told to work there."""
    view = TaskView(data)
    for field, items in (("focus_paths", view.focus_paths), ("target_files", view.target_files)):
        for item in items:
            if item and _outside(item, project_root):
                report.add(severity, "path-outside-project",
                           f"{field} names {item!r}, which is outside the project {project_root}", path,
                           line_of(text, item.split(" (")[0]))


def _check_tasks(report: _Report, task_dir: Path, project_root: Path | None = None,
                 outside: Severity = "warning") -> dict[str, TaskRef]:
    refs: dict[str, TaskRef] = {}
    paths = sorted(task_dir.glob("*.json"), key=lambda p: natural_key(p.name)) if task_dir.is_dir() else []
    for path in paths:
        parsed = _read_json(report, path)
        data, text = parsed if parsed is not None else (None, "")
        if not isinstance(data, dict):
            if parsed is not None:
                report.add("error", "task-schema", "task JSON must be an object", path, 1)
            report.unreadable.add(path.stem)
            continue
        for message, line in validate_task_data(data, text):
            report.add("error", "task-schema", message, path, line)
        if project_root is not None:
            _check_paths(report, path, data, text, project_root, outside)
        try:
            ref = ref_from_data(data, path, text)
        except ReaderError:  # the schema problems above already describe it
            report.unreadable.add(path.stem)
            continue
        if ref.id in refs:
            report.add("error", "duplicate-task", f"task id {ref.id} is also used by {refs[ref.id].path}",
                       path, line_of(text, "id"))
            continue
        if path.stem != ref.id:
            report.add("warning", "id-mismatch", f"file name {path.name} does not match task id {ref.id}",
                       path, line_of(text, "id"))
        refs[ref.id] = ref
    return refs


def _check_todo(report: _Report, todo: TodoList, refs: dict[str, TaskRef]) -> None:
    for dup in todo.duplicates:
        report.add("error", "duplicate-task",
                   f"task {dup.task_id} is listed twice (first at line {todo.by_id[dup.task_id].line})",
                   todo.path, dup.line)
    containers = todo.containers
    for entry in todo.entries:
        ref = refs.get(entry.task_id)
        if ref is None and entry.task_id in report.unreadable:
            continue
        if ref is None:
            if entry.task_id in containers:
                if entry.task_href:
                    report.add("warning", "todo-missing-task",
                               f"container {entry.task_id} links to a task JSON that does not exist",
                               todo.path, entry.line)
            else:
                report.add("error", "todo-missing-task",
                           f"TODO_LIST.md names task {entry.task_id}, which has no task JSON in .task/",
                           todo.path, entry.line)
            continue
        if not entry.is_container and (entry.state == "completed") != (ref.status == "completed"):
            report.add("warning", "status-mismatch",
                       f"task {entry.task_id} is {'ticked' if entry.state == 'completed' else 'not ticked'} "
                       f"here but {ref.status!r} in {ref.path.name if ref.path else 'its JSON'}",
                       todo.path, entry.line)
    for task_id in refs.keys() - todo.by_id.keys():
        ref = refs[task_id]
        report.add("warning", "task-not-in-todo", f"task {task_id} is not listed in TODO_LIST.md",
                   ref.path or todo.path)


def _check_graph(report: _Report, refs: dict[str, TaskRef], todo: TodoList | None) -> None:
    parent = {task_id: ref.parent or (todo.by_id[task_id].parent if todo and task_id in todo.by_id else None)
              for task_id, ref in refs.items()}
    if todo is not None:
        for entry in todo.entries:
            parent.setdefault(entry.task_id, entry.parent)
    known = parent.keys()
    dangling = False
    for ref in refs.values():
        text = ref.path.read_bytes() if ref.path else b""
        for dep in ref.depends_on:
            if dep not in known:
                dangling = True
                report.add("error", "missing-dependency",
                           f"task {ref.id} depends on {dep}, which is not a task of this session",
                           ref.path or Path(ref.id), line_of(text, dep))
        if ref.parent and ref.parent not in known:
            dangling = True
            report.add("error", "missing-parent",
                       f"task {ref.id} names parent {ref.parent}, which does not exist",
                       ref.path or Path(ref.id), line_of(text, ref.parent))
    if dangling:
        return
    order = sorted(known, key=natural_key)
    cycle = task_cycle(order, {task_id: ref.depends_on for task_id, ref in refs.items()}, parent)
    if cycle:
        first = refs.get(cycle[0])
        report.add("error", "dependency-cycle", f"dependency cycle: {' → '.join(cycle)}",
                   first.path if first and first.path else Path(order[0]))


def _check_plan_json(report: _Report, path: Path, refs: dict[str, TaskRef]) -> None:
    parsed = _read_json(report, path)
    if parsed is None:
        return
    data, text = parsed
    if not isinstance(data, dict):
        report.add("error", "json-syntax", "plan.json must be a JSON object", path, 1)
        return
    task_ids = data.get("task_ids")
    for task_id in task_ids if isinstance(task_ids, list) else ():
        if isinstance(task_id, str) and task_id not in refs:
            report.add("warning", "plan-missing-task",
                       f"plan.json lists task {task_id}, which has no task JSON", path,
                       line_of(text, task_id))


def check_ccw_session(session_dir: Path, *, project_root: Path | None = None,
                      strict: bool = False) -> list[Diagnostic]:
    """Report every problem of a CCW session folder (R-E8b), errors and warnings, each with file:line.

    A path a task names outside the project (``focus_paths``, ``target_files``) is a warning, an error when
    ``strict``. The project is the folder holding the session's ``.workflow``; ``project_root`` is used for a
    session outside one (without either, paths are not checked).

    Raises:
        NotFoundError: ``session_dir`` is not a folder.
    """
    try:
        session_dir = confined_session(session_dir)
    except ReaderError as exc:
        return [Diagnostic("error", "link-leaves-project", exc.detail, exc.path or str(session_dir), exc.line)]
    if not session_dir.is_dir():
        raise NotFoundError(f"no CCW session folder at {session_dir}")
    project_root = session_layout(session_dir)[1] or project_root
    project_root = project_root.resolve() if project_root is not None else None
    report = _Report()
    _check_session_file(report, session_dir)
    if not (session_dir / "IMPL_PLAN.md").is_file():
        report.add("warning", "missing-impl-plan",
                   "IMPL_PLAN.md is missing; the execution model falls back to the task dependencies",
                   session_dir / "IMPL_PLAN.md")
    refs = _check_tasks(report, session_dir / ".task", project_root, "error" if strict else "warning")
    todo_path = session_dir / "TODO_LIST.md"
    todo: TodoList | None = None
    if not todo_path.is_file():
        report.add("warning", "missing-todo-list", "TODO_LIST.md is missing; tasks run in task-id order",
                   todo_path)
    else:
        try:
            todo = read_todo_list(todo_path)
        except (OSError, ReaderError) as exc:
            report.unreadable_file(exc, todo_path)
        else:
            _check_todo(report, todo, refs)
    if not refs and not (todo and todo.entries):
        report.add("error", "no-tasks", "session has no tasks (.task/ holds no task JSON)",
                   session_dir / ".task")
    _check_graph(report, refs, todo)
    if (session_dir / "plan.json").is_file():
        _check_plan_json(report, session_dir / "plan.json", refs)
    return report.items
