"""Running CCW sessions: the task flow, the task driver, and starting, resuming and completing a session.

* :class:`CcwFlow`: which tasks may start now (dependencies, containers, execution modes, critical path first);
* :func:`run_ccw_task`: one task, its ``pre_analysis`` steps through the engine's tool pipeline (gated and
  journaled like any tool call), its ``work`` request, its journaled completion;
* :func:`execute_session` and :func:`complete_session`: a session started, resumed or archived.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import heapq
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline import time
from stepline._paths import confine
from stepline.ccw._commit import commit_task
from stepline.ccw._prompt import build_task_prompt, render_container_summary, render_summary
from stepline.ccw._session import CcwSession, read_ccw_session
from stepline.ccw._state import (
    Committer,
    Completion,
    SessionWriter,
    Stopped,
    json_bytes,
    unfinished_completions,
    write_files,
)
from stepline.ccw._task import TaskView, read_task_file
from stepline.ccw._waves import plan_workflow_waves
from stepline.engine import StepBlocked, register_driver, run_tool_once
from stepline.errors import (
    JournalError,
    OutsideRootError,
    ReaderError,
    RunLockedError,
    RunStateError,
    StepFailed,
    StorageError,
)
from stepline.formats import parse_json
from stepline.model import EventType, Run, RunStatus, StepStatus, WorkflowSpec

if TYPE_CHECKING:
    from stepline.engine import Engine, StepContext
    from stepline.store import RunDir, RunStore

__all__ = [
    "CcwFlow",
    "PendingCompletions",
    "SessionLock",
    "complete_session",
    "execute_session",
    "pending_completions",
    "prepare_session",
    "run_ccw_task",
    "session_lock",
    "session_run",
]

_SEQUENTIAL = frozenset({"sequential", "tdd"})
_LEAF, _START, _END, _BARRIER = 0, 1, 2, 3
SESSION_FILE, ARCHIVING_MARKER = "workflow-session.json", ".archiving"


#: The session paths the driver and the completion path use (CcwSession.paths writes them all as strings).
_PATHS = ("session_dir", "todo_list", "task_dir", "summaries_dir")


def _check_session_spec(workflow: WorkflowSpec, run: Run) -> None:
    """What the driver reads of a session's spec, checked: a resumed run's spec comes back from its manifest, and
    a damaged one is one JournalError naming the field (exit 6), not a KeyError in the middle of a task."""
    def damaged(what: str) -> JournalError:
        return JournalError(what, path=f"manifest.json of run {run.run_id}",
                            hint=f"`stepline doctor {run.run_id}` explains it and what can be saved")

    paths = workflow.meta.get("paths")
    if not isinstance(paths, dict) or not all(isinstance(paths.get(name), str) for name in _PATHS):
        raise damaged(f"workflow.meta.paths must name the session's {', '.join(_PATHS)}")
    for name, kind in (("phases", dict), ("critical_path", list), ("serialization", list)):
        if workflow.meta.get(name) is not None and not isinstance(workflow.meta[name], kind):
            raise damaged(f"workflow.meta.{name} is not a{'n object' if kind is dict else ' list'}")
    for step in workflow.steps:
        meta = step.meta
        if not isinstance(meta.get("children") or [], list) or not isinstance(meta.get("parent") or "", str):
            raise damaged(f"step {step.id}: meta.children / meta.parent are not a list / a task id")
        if not meta.get("container") and meta.get("status") != "completed" and not isinstance(
                meta.get("task_json"), str):
            raise damaged(f"step {step.id}: meta.task_json is not the path of its task JSON")


class CcwFlow:
    """Which CCW tasks may start now.

    Releases tasks incrementally with the semantics of :func:`stepline.ccw._waves.plan_waves`:
    a task starts once its ``depends_on`` are done; a container's subtasks start once the container's own
    dependencies are, and the container completes (its step runs, without an agent) once all its subtasks
    have; ``sequential``/``tdd`` run one task at a time in document order; ``phased`` puts a barrier after
    each ``Phase N``; a serialization requirement lets one of its tasks run at a time. Ready tasks start
    critical path first, then by execution group, then in document order; in a resumed run, the tasks a
    crash interrupted start before all others. A failure returns the tasks that really depend on the failed
    one (``depends_on`` and containment, never phases or serialization), which the engine journals as
    skipped. Cost is O(1) per release, so a 10,000-task session schedules in linear time.
    """

    def __init__(self, workflow: WorkflowSpec, run: Run) -> None:
        _check_session_spec(workflow, run)
        steps = workflow.steps
        meta = workflow.meta
        model = meta.get("execution_model")
        self.sequential = model in _SEQUENTIAL
        self.ids = [step.id for step in steps]
        self.index = index = {sid: position for position, sid in enumerate(self.ids)}
        count = len(steps)
        self.kind = [_LEAF] * count
        self.owner = list(range(count))
        exit_node = list(range(count))
        for position, step in enumerate(steps):
            if step.meta.get("container"):
                self.kind[position] = _START
                exit_node[position] = self._node(_END, position)
        self.succ: list[list[int]] = [[] for _ in self.kind]
        for position, step in enumerate(steps):
            for dep in dict.fromkeys(step.depends_on):
                self.succ[exit_node[index[dep]]].append(position)
            parent = step.meta.get("parent")
            if parent in index and self.kind[index[parent]] == _START:
                self.succ[parent_entry := index[parent]].append(position)
                self.succ[exit_node[position]].append(exit_node[parent_entry])
            if self.kind[position] == _START:
                self.succ[position].append(exit_node[position])
        phases: Mapping[str, int] = meta.get("phases") or {}
        if model == "phased" and phases:
            numbers = sorted({number for sid, number in phases.items() if sid in index})
            barrier = {number: self._node(_BARRIER, -1) for number in numbers}
            self.succ += [[] for _ in numbers]
            for sid, number in phases.items():
                if sid in index:
                    self.succ[exit_node[index[sid]]].append(barrier[number])
                    earlier = [n for n in numbers if n < number]
                    if earlier:
                        self.succ[barrier[earlier[-1]]].append(index[sid])
        self.exit_node = exit_node
        self.indegree = [0] * len(self.kind)
        for successors in self.succ:
            for nxt in successors:
                self.indegree[nxt] += 1
        rank = {sid: place for place, sid in enumerate(meta.get("critical_path") or ())}
        group_first: dict[str, int] = {}
        for position, step in enumerate(steps):
            if step.execution_group is not None:
                group_first.setdefault(step.execution_group, position)
        status = {sid: (run.steps[sid].status if sid in run.steps else StepStatus.PENDING) for sid in self.ids}
        # Tasks a crash interrupted go first: each finishes (replaying its journal) before a new one starts, so
        # no new task's effect lands between an interrupted effect and its redo.
        self.key = [(0 if status[sid] == StepStatus.RUNNING else 1,
                     rank.get(sid, len(rank)) if not self.sequential else 0,
                     group_first.get(steps[p].execution_group or "", p) if not self.sequential else p, p)
                    for p, sid in enumerate(self.ids)]
        self.exclusive: dict[int, int] = {}
        if not self.sequential:
            for number, names in enumerate(meta.get("serialization") or ()):
                for name in names:
                    if name in index:
                        for leaf in self._leaves(index[name]):
                            self.exclusive.setdefault(leaf, number)
        self.busy: set[int] = set()
        self.running = 0
        self.ready: list[tuple[tuple[int, int, int, int], int]] = []
        self.dead: set[int] = set()
        self.done_before = {p for p, step in enumerate(steps) if step.meta.get("status") == "completed"}
        self.finished_in_run = {p for p, sid in enumerate(self.ids)
                                if status[sid] in (StepStatus.COMPLETED, StepStatus.SKIPPED)}
        self._resolve([node for node in range(len(self.kind)) if self.indegree[node] == 0])

    def _node(self, kind: int, position: int) -> int:
        self.kind.append(kind)
        self.owner.append(position)
        return len(self.kind) - 1

    def _leaves(self, position: int) -> list[int]:
        if self.kind[position] == _LEAF:
            return [position]
        children = [nxt for nxt in self.succ[position] if nxt < len(self.ids)]
        return [leaf for child in children for leaf in self._leaves(child)]

    def _runnable(self, node: int) -> int | None:
        """The task position whose step runs when ``node`` is reached (None for starts and barriers)."""
        kind = self.kind[node]
        return self.owner[node] if kind in (_LEAF, _END) else None

    def _resolve(self, nodes: list[int]) -> None:
        """Pass every node in ``nodes`` (whose indegree is 0): release, or resolve what needs no run."""
        stack = list(nodes)
        while stack:
            node = stack.pop()
            task = self._runnable(node)
            if task is not None:
                if task in self.dead:
                    continue
                if task not in self.finished_in_run:
                    heapq.heappush(self.ready, (self.key[task], node))
                    if task not in self.done_before:
                        continue  # done when the engine says so; completed-before tasks pass right away
            for nxt in self.succ[node]:
                self.indegree[nxt] -= 1
                if self.indegree[nxt] == 0:
                    stack.append(nxt)

    def take_ready(self, limit: int) -> list[str]:
        """Up to ``limit`` task ids that may start now."""
        taken: list[str] = []
        held: list[tuple[tuple[int, int, int, int], int]] = []
        while self.ready and len(taken) < limit:
            if self.sequential and self.running:
                break
            item = heapq.heappop(self.ready)
            task = self.owner[item[1]]
            if task in self.dead:
                continue
            group = self.exclusive.get(task)
            if group is not None and group in self.busy:
                held.append(item)
                continue
            if group is not None:
                self.busy.add(group)
            self.running += 1
            taken.append(self.ids[task])
        for item in held:
            heapq.heappush(self.ready, item)
        return taken

    def finished(self, step_id: str, status: StepStatus) -> list[str]:
        """Record how a task ended; a failed task's dependents are returned (to be skipped)."""
        position = self.index[step_id]
        self.running -= 1
        self.busy.discard(self.exclusive.get(position, -1))
        if status in (StepStatus.COMPLETED, StepStatus.SKIPPED):
            self.finished_in_run.add(position)
            if position not in self.done_before:
                self._resolve_after(self.exit_node[position])
            return []
        if status != StepStatus.FAILED:
            return []
        doomed: list[str] = []
        stack = [self.exit_node[position]]
        seen = set(stack)
        while stack:
            for nxt in self.succ[stack.pop()]:
                if self.kind[nxt] == _BARRIER or nxt in seen:
                    continue
                seen.add(nxt)
                stack.append(nxt)
                task = self._runnable(nxt)
                if task is not None and task != position and task not in self.dead:
                    self.dead.add(task)
                    doomed.append(self.ids[task])
        return doomed

    def _resolve_after(self, node: int) -> None:
        for nxt in self.succ[node]:
            self.indegree[nxt] -= 1
            if self.indegree[nxt] == 0:
                self._resolve([nxt])


# --- one task ------------------------------------------------------------------------------------------


def _committer(engine: Engine, run: Run) -> Committer:
    """The run's committer (one run is driven at a time by an engine); a new one redoes the completions a
    crash interrupted, before any task goes on."""
    cached: Committer | None = getattr(engine, "_ccw_committer", None)
    if cached is None or cached.run is not run:
        cached = Committer(engine, run)
        engine._ccw_committer = cached  # type: ignore[attr-defined]
        asyncio.get_running_loop().call_soon(_mark_session, cached)  # once the first tasks wait for their agents
    if cached.error is not None:  # the completion path failed: no task goes on (see Stopped)
        raise Stopped(cached.error)
    return cached


def _mark_session(committer: Committer) -> None:
    """Mark the session active (once the first tasks are under way, at the latest when the run settles) and
    delete the temp files a killed writer left; failing, it stops the run as a failed write does."""
    if committer.session_marked or committer.error is not None:
        return
    committer.session_marked = True
    try:
        remove_stale_temp_files(committer.writer.session_dir)
        mark_session_started(committer.writer.session_dir, time.now_iso())
    except Exception as exc:
        committer.error = exc


async def settle(engine: Engine, run: Run) -> None:
    """The engine's hook before a CCW run's last record: every completion written, durable and journaled done.

    Needed for correctness: a task's step completes once its intent is journaled, before its files are
    written, and a run that finished is never resumed, so a completion still on its way at the run's last
    record would never be redone."""
    committer = _committer(engine, run)
    _mark_session(committer)
    await committer.drain()


async def run_ccw_task(ctx: StepContext) -> None:
    """Run one CCW task (or complete one container), ending with its journaled completion.

    First its ``pre_analysis`` steps (``bash(...)``, plain commands, ``Read``, ``Glob``, ``Grep``/``Search``, with
    ``[var]`` substitution and ``on_error``; :func:`_pre_analysis`), then one ``work`` request to
    the executor with the prompt built from the task JSON (read when the task starts), then the completion as
    one journaled change, handed to the run's :class:`stepline.ccw._state.Committer`.
    """
    spec = ctx.spec
    committer = _committer(ctx.engine, ctx.run)
    key = f"{spec.id}/ccw/complete"
    calls = ctx.engine.calls
    if key in calls.recorded or key in calls.started:  # done (a crash's intents are redone by the committer),
        ctx.step.summary = ctx.step.summary or "completed"  # or journaled in this process and on its way
        return
    if spec.meta.get("status") == "completed":
        ctx.step.summary = "already completed in the session"
        return
    if spec.meta.get("container"):
        completion = _container_completion(ctx)
        ctx.step.summary = "all subtasks completed"
    else:
        completion, changed = await _task_completion(ctx, committer)
        if ctx.run.workflow.meta.get("with_commit"):
            await commit_task(ctx, changed, ctx.step.summary or completion.summary)  # the agent's words first
    committer.commit(spec.id, key, completion)


def _session_relative(ctx: StepContext, path: str) -> str:
    return Path(path).relative_to(str(ctx.run.workflow.meta["paths"]["session_dir"])).as_posix()


def _history(from_status: object, started_at: str | None, now: str) -> tuple[dict[str, str], ...]:
    entries = []
    before = from_status if isinstance(from_status, str) else "pending"
    if before not in ("in_progress", "active"):
        entries.append({"from": before, "to": "in_progress", "changed_at": started_at or now})
    entries.append({"from": "in_progress", "to": "completed", "changed_at": now})
    return tuple(entries)


def _container_completion(ctx: StepContext) -> Completion:
    spec = ctx.spec
    task_json = spec.meta.get("task_json")
    from_status: object = "container"
    if task_json:
        from_status = read_task_file(Path(task_json)).data.get("status", "container")
    now = time.now_iso()
    history = ({"from": str(from_status), "to": "completed", "changed_at": now},)
    return Completion(task_id=spec.id, task_json=_session_relative(ctx, task_json) if task_json else None,
                      history=history, summary_path=f".summaries/{spec.id}-summary.md",
                      summary=render_container_summary(spec.id, spec.name, spec.meta.get("children") or []))


async def _task_completion(ctx: StepContext, committer: Committer) -> tuple[Completion, list[str]]:
    """The task's completion, and the project files its agent changed (outside the session folder)."""
    spec = ctx.spec
    paths: dict[str, Any] = ctx.run.workflow.meta["paths"]
    task_json = str(spec.meta["task_json"])
    task = read_task_file(Path(task_json))  # lazily, now that the task runs
    view = TaskView(task.data)
    await committer.visible(spec.depends_on)  # their files are on disk for pre_analysis and the agent
    flow_context = await _pre_analysis(ctx, view)
    prompt, dependencies = _task_prompt(ctx, view, flow_context)
    agent = str(spec.meta.get("agent"))
    outcome = await ctx.invoke("work", title=f"{spec.id}: {spec.name}", content=prompt,
                               hints={"agent": agent, "task_id": spec.id, "execution_group": spec.execution_group,
                                      "format": "ccw"},
                               context={"task": task.data, "task_json": task_json, "session": paths,
                                        "flow_context": flow_context, "dependencies": dependencies})
    summary_path = f".summaries/{spec.id}-summary.md"
    own_summary = Path(paths["session_dir"]) / summary_path if outcome.written else None
    written = list(dict.fromkeys(outcome.written))
    if own_summary is not None and any(ctx.project_root / rel == own_summary for rel in written):  # agent wrote it
        summary = own_summary.read_text(encoding="utf-8")
    else:
        summary = render_summary(view, task_id=spec.id, title=spec.name, agent_summary=outcome.summary,
                                 files_modified=written)
    ctx.step.summary = next(iter((outcome.summary or "").strip().splitlines()), "")[:200] or None
    session_dir = Path(paths["session_dir"])
    changed = [rel for rel in written if not (ctx.project_root / rel).is_relative_to(session_dir)]
    return Completion(task_id=spec.id, task_json=_session_relative(ctx, task_json),
                      history=_history(task.data.get("status"), ctx.step.started_at, time.now_iso()),
                      summary_path=summary_path, summary=summary), changed


def _task_prompt(ctx: StepContext, view: TaskView, flow_context: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The agent's prompt for a task, and the summaries of its dependencies that it holds."""
    spec = ctx.spec
    paths: dict[str, Any] = ctx.run.workflow.meta["paths"]
    dependencies = {dep: _read_text(os.path.join(paths["summaries_dir"], f"{dep}-summary.md"))
                    for dep in spec.depends_on}
    prompt = build_task_prompt(view, task_id=spec.id, title=spec.name, agent=str(spec.meta.get("agent")),
                               execution_group=spec.execution_group, paths=paths,
                               task_json=str(spec.meta["task_json"]), dependencies=dependencies,
                               flow_context=flow_context)
    return prompt, dependencies


def _read_text(path: Path | str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (FileNotFoundError, UnicodeDecodeError):
        return ""


# --- pre_analysis --------------------------------------------------------------------------------------

_CALL = re.compile(r"^\s*(?P<name>bash|Bash|Read|Glob|Grep|Search)\s*\((?P<arg>.*)\)\s*$", re.DOTALL)
_VAR = re.compile(r"\[([A-Za-z_][\w-]*)\]")
_KEYWORD = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^,]+))""")
_SKIP = frozenset({"skip_optional", "skip"})


@dataclass(frozen=True, slots=True)
class _Result:
    ok: bool
    output: str
    error: str | None = None


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _search_args(arg: str) -> tuple[str, str]:
    """``pattern, path`` or ``pattern="…", path="…"`` (path defaults to the project root)."""
    named = {m[1]: m[2] if m[2] is not None else (m[3] if m[3] is not None else m[4].strip())
             for m in _KEYWORD.finditer(arg)}
    if "pattern" in named:
        return named["pattern"], named.get("path", ".")
    pattern, comma, path = arg.rpartition(",")
    if not comma or not pattern.strip():
        return _unquote(arg), "."
    return _unquote(pattern), _unquote(path) or "."


def _glob_base(pattern: str) -> str:
    parts = []
    for part in pattern.split("/"):
        if any(ch in part for ch in "*?["):
            break
        parts.append(part)
    return "/".join(parts[:-1] if len(parts) == len(pattern.split("/")) else parts) or "."


#: Why a plan's command may run without a person in an unattended (``-y``) run: journaled with the call.
_UNATTENDED = "-y (unattended): a pre_analysis command of the session's plan"


async def _tool(ctx: StepContext, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One pre_analysis call through the engine's tool pipeline, its risk policy included: a shell command is
    high risk, so it waits at its gate for a person unless the run is unattended (``-y``), where the allowance
    is journaled with the call."""
    return await ctx.engine.run_tool(ctx, name, args, required=False,
                                     allowed_by=_UNATTENDED if ctx.run.mode == "yolo" else None)


@dataclass(frozen=True, slots=True)
class _Call:
    """A pre_analysis command as the tool call that runs it: ``kind`` is bash, Read, Glob or Grep."""

    kind: str
    arg: str
    tool: str
    args: dict[str, Any]
    searched: str | None = None  # Grep's path, confined to the project as readFile's is


def _tool_call(command: str) -> _Call:
    match = _CALL.match(command)
    kind, arg = (match["name"], match["arg"].strip()) if match else ("bash", command.strip())
    if kind in ("bash", "Bash"):
        return _Call("bash", arg, "shell", {"command": arg})
    if kind == "Read":
        return _Call(kind, arg, "readFile", {"path": _unquote(arg), "max_bytes": 200_000})
    if kind == "Glob":
        base = _glob_base(_unquote(arg))
        return _Call(kind, arg, "listFiles", {"path": base, "recursive": True, "max_entries": 100_000})
    pattern, path = _search_args(arg)
    return _Call("Grep", arg, "shell",
                 {"command": f"grep -rnE -e {shlex.quote(pattern)} -- {shlex.quote(path)}; test $? -le 1"}, path)


async def _run_command(ctx: StepContext, key: str, call: _Call) -> _Result:
    """Run one pre_analysis command's tool call through the tool pipeline and return its text output. A ``bash``
    command runs once (:func:`~stepline.engine._session.run_tool_once`: its intent journaled before it starts; one
    a crash interrupted is not run again silently). Read, Glob and the Grep built here only read: run again."""
    if call.searched is not None:
        try:
            confine(ctx.project_root, call.searched)
        except OutsideRootError as exc:
            return _Result(False, "", exc.format_message())
    if call.kind == "bash":
        record = await run_tool_once(ctx, key, "pre_analysis", call.tool, call.args,
                                     lambda: _tool(ctx, call.tool, call.args))
    else:
        record = await _tool(ctx, call.tool, call.args)
    if call.kind == "Read":
        output = str((record.get("result") or {}).get("content", ""))
    elif call.kind == "Glob":
        pattern = _unquote(call.arg)
        entries = (record.get("result") or {}).get("entries") or []
        output = "\n".join(e for e in entries if fnmatch.fnmatch(e, pattern)
                           or fnmatch.fnmatch(e, pattern.replace("**/", "")))
    else:
        output = str(record.get("stdout") or "")
    output = str(ctx.guard("pre_analysis", output))  # secrets found are reported, and never reach the prompt
    if record.get("status") != "ok":
        return _Result(False, output, str(record.get("error") or record.get("status")))
    return _Result(True, output)


async def _command(ctx: StepContext, key: str, command: str) -> _Result:
    """Run a command once: a result already journaled is replayed, not run again."""
    recorded = ctx.engine.calls.recorded.get(key)
    if recorded is not None:
        return _Result(**recorded["result"])
    result = await _run_command(ctx, key, _tool_call(command))
    ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": "pre_analysis", "args": {"command": command},
                                       "result": {"ok": result.ok, "output": result.output, "error": result.error}})
    return result


def _substitute(text: str, values: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: values.get(m[1], m[0]), text)


async def _pre_analysis(ctx: StepContext, view: TaskView) -> dict[str, str]:
    """Run the task's pre_analysis steps in order; return their ``output_to`` values.

    The commands run through the engine's tool pipeline like any tool call: the allow/blocklist,
    the timeout, path confinement (``Read(/etc/passwd)`` is refused) and the risk policy. A ``bash(...)`` command
    is high risk: in a normal run its task waits at the gate ``tool:shell:<task>`` for a person (one approval
    covers the task's commands); in an unattended run (``-y``) it runs and the allowance is journaled. Their
    output passes the secret guardrail (reported, redacted) before it reaches the agent's prompt. Results are
    journaled; a resumed task replays them. A ``bash`` command's intent is journaled before it starts, and one a
    crash interrupted is never run again silently: as the step protocol's ``call_tool``, its effect is read back
    where the tool can tell, else the task waits at the gate ``rerun:shell:<call>`` for a person.
    """
    outputs: dict[str, str] = {}
    prefix = f"{ctx.spec.id}/{ctx.attempt}/pre"
    for number, step in enumerate(view.pre_analysis):
        if not isinstance(step, dict):
            continue
        name = str(step.get("step") or f"step {number + 1}")
        commands = [str(c) for c in step.get("commands") or ([step["command"]] if step.get("command") else [])]
        on_error = str(step.get("on_error") or "fail")
        texts: list[str] = []
        failure: str | None = None
        for index, raw in enumerate(commands):
            command = _substitute(raw, outputs)
            result = await _command(ctx, f"{prefix}/{number}/{index}", command)
            if not result.ok and on_error == "retry_once":
                result = await _command(ctx, f"{prefix}/{number}/{index}/retry", command)
            if not result.ok:
                failure = f"{command!r}: {result.error}"
                texts.append(result.output)
                break
            texts.append(result.output)
        value = "\n".join(text.rstrip("\n") for text in texts)
        if failure is not None:
            if on_error in _SKIP:
                value = ""
            elif on_error == "manual_intervention":
                _manual_intervention(ctx, number, name, failure)
            elif on_error != "continue":
                raise StepFailed(f"task {ctx.spec.id}: pre_analysis step {name!r} failed: {failure}",
                                 retryable=False, hint=f"on_error is {on_error!r}")
        if step.get("output_to"):
            outputs[str(step["output_to"])] = value
    return outputs


def _manual_intervention(ctx: StepContext, number: int, name: str, failure: str) -> None:
    """Block the task for a person (``on_error: manual_intervention``); approval continues, rejection fails."""
    engine = ctx.engine
    gate_id = f"ccw:{ctx.spec.id}:pre_analysis:{number}"
    decision = engine.calls.decisions.get(gate_id)
    if decision is not None:
        if decision["decision"] == "rejected":
            raise StepFailed(f"task {ctx.spec.id}: pre_analysis step {name!r} failed and gate {gate_id} was "
                             "rejected", retryable=False)
        return
    reason = f"pre_analysis step {name!r} of {ctx.spec.id} needs manual intervention: {failure}"
    existing = engine.gates.get(gate_id)
    if existing is None or existing.status != "pending":
        engine.gates.open(gate_id, kind="human", step_id=ctx.spec.id, reason=reason, phase=ctx.spec.phase)
        ctx.emit(EventType.HUMAN_GATE_REQUIRED, {"gate_id": gate_id, "reason": reason, "phase": ctx.spec.phase})
    raise StepBlocked(f"waiting for approval of gate {gate_id} ({reason})", gate_id)


register_driver("ccw", run_ccw_task, CcwFlow, settle=settle, completion_durable=True)


# --- a session as a whole ------------------------------------------------------------------------------


def prepare_session(session_dir: Path) -> tuple[CcwSession, WorkflowSpec]:
    """Read and check a session for running; nothing is written.

    Raises:
        ReaderError: a file that does not parse, a TODO line or dependency naming a missing task, a
            dependency cycle (all from the reader), IMPL_PLAN.md or TODO_LIST.md missing, or phases that
            contradict the dependencies.
    """
    session = read_ccw_session(session_dir)
    for name in ("IMPL_PLAN.md", "TODO_LIST.md"):
        if not (session.session_dir / name).is_file():
            raise ReaderError(f"{name} is missing; a session needs a plan and a task list to run",
                              path=str(session.session_dir / name),
                              hint="re-run CCW's /workflow:plan, or `stepline ccw check` for every problem")
    spec = session.to_workflow_spec()
    if spec.meta.get("execution_model") == "phased" and spec.meta.get("phases"):
        plan_workflow_waves(spec)  # the one check the reader has not made: phases against dependencies
    spec.meta["scheduling"] = "dag"
    return session, spec


def _journal_status(events: list[Any]) -> RunStatus:
    for event in reversed(events):
        if event.type in (EventType.WORKFLOW_STARTED.value, EventType.WORKFLOW_RESUMED.value):
            return RunStatus.RUNNING
        if event.type == EventType.WORKFLOW_COMPLETED.value:
            return RunStatus.COMPLETED
        if event.type == EventType.WORKFLOW_FAILED.value:
            return RunStatus.FAILED
        if event.type == EventType.WORKFLOW_BLOCKED.value:
            return RunStatus.BLOCKED
    return RunStatus.RUNNING


def _session_runs(store: RunStore, session_dir: Path) -> Iterator[RunDir]:
    """The runs of the session at ``session_dir`` in this project, newest first."""
    from stepline.store import RunDir, read_json

    for summary in reversed(list(store.summaries())):
        if summary.workflow != session_dir.name:
            continue
        run_dir = RunDir(store.root / summary.run_id)
        try:
            manifest = read_json(run_dir.manifest_path, {}) or {}
        except JournalError:
            continue  # a damaged run is not this session's to resume: `stepline doctor` says what is wrong
        paths = ((manifest.get("workflow") or {}).get("meta") or {}).get("paths") or {}
        if paths.get("session_dir") == str(session_dir):
            yield run_dir


def session_run(engine: Engine, session_dir: Path) -> tuple[str, RunStatus] | None:
    """The newest run of the session in this project and its status as the journal says (None: no run).

    Raises:
        RunLockedError: a live process is running the session.
    """
    from stepline.store import lock_holder

    for run_dir in _session_runs(engine.store, session_dir):
        holder = lock_holder(run_dir.path / "lock")
        if holder is not None:
            raise RunLockedError(f"session {session_dir.name} is being executed by process {holder} "
                                 f"(run {run_dir.run_id})", hint="wait for it, or stop that process first")
        return run_dir.run_id, _journal_status(run_dir.events())
    return None


def session_lock(store: RunStore, session_dir: Path) -> SessionLock:
    """The lock one process holds while it executes or completes the session at ``session_dir``."""
    return SessionLock(store, Path(session_dir).resolve())


class SessionLock:
    """One driver per session: ``ccw execute`` and ``ccw complete`` hold it for as long as they work on it.

    A run's own lock keeps a second process off that run, but two executes of one session would each start
    a run of their own and both do every task (every model call paid twice). This lock is taken before the
    session's run is looked for. It is an ``flock`` on a file in the store (``.sessions/``, not in the
    session folder, which is CCW's), so a holder that dies drops it and the next execute takes the session
    over, resuming the dead holder's run.
    """

    def __init__(self, store: RunStore, session_dir: Path) -> None:
        from stepline.store import RunLock

        digest = hashlib.sha256(str(session_dir).encode("utf-8")).hexdigest()[:12]
        self.store, self.session_dir = store, session_dir
        self.path = store.root / ".sessions" / f"{session_dir.name}-{digest}.lock"
        self._lock = RunLock(self.path, session_dir.name)

    def acquire(self) -> None:
        """Take the lock, or raise :class:`RunLockedError` naming the holder's pid and its run."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError.from_os(exc, self.path.parent, "create") from exc
        try:
            self._lock.acquire()
        except RunLockedError:
            from stepline.store import lock_holder

            holder = lock_holder(self.path)
            run = next((run_dir.run_id for run_dir in _session_runs(self.store, self.session_dir)
                        if lock_holder(run_dir.path / "lock") == holder), None)
            doing = f"run {run}" if run else "its run is starting"
            raise RunLockedError(f"session {self.session_dir.name} is being executed by process {holder} "
                                 f"({doing})", hint="wait for it to finish, or stop that process first") from None

    def release(self) -> None:
        """Drop the lock."""
        self._lock.release()

    def __enter__(self) -> SessionLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True, slots=True)
class PendingCompletions:
    """Tasks whose completion the session's newest run journaled but whose files do not say so yet, and the
    live process writing them now (None: none is; the next execute or complete writes them)."""

    tasks: tuple[str, ...] = ()
    holder: int | None = None


def pending_completions(store: RunStore, session_dir: Path) -> PendingCompletions:
    """What the session's newest run journaled as completed that its files may not say yet, read without
    writing anything (``ccw status``, ``check`` and ``sessions`` are readers: on a full disk or a read-only
    folder they still answer). A crash between a completion's intent and its done record leaves them; the next
    ``ccw execute`` or ``ccw complete`` writes them (idempotent)."""
    from stepline.store import lock_holder

    session_dir = Path(session_dir).resolve()
    newest = next(_session_runs(store, session_dir), None)
    pending = unfinished_completions(newest.journal_path) if newest is not None else []
    if not pending:
        return PendingCompletions()
    return PendingCompletions(tasks=tuple(item.completion.task_id for item in pending),
                              holder=lock_holder(session_lock(store, session_dir).path))


def _apply_pending(store: RunStore, session_dir: Path) -> None:
    """Write the completions the session's newest run journaled but did not finish writing (the caller holds
    the session's lock)."""
    run_dir = next(_session_runs(store, session_dir), None)
    pending = unfinished_completions(run_dir.journal_path) if run_dir is not None else []
    if run_dir is None or not pending:
        return
    with run_dir.lock():  # a `stepline resume` of the run itself does not take the session's lock
        SessionWriter(session_dir).write([item.completion for item in pending])


async def execute_session(engine: Engine, session_dir: Path, *, with_commit: bool = False) -> Run:
    """Run a session to its end: resume its interrupted or blocked run, else start a new one.

    ``with_commit`` (a new run's setting, kept by its resumes): one git commit per completed task, of the
    files it changed (:mod:`stepline.ccw._commit`).

    A run that completed or failed is not resumed: a new run starts from the session's files, where the
    completed tasks are ticked (they complete without their agent) and a failed task is tried again. One
    process at a time executes a session (:class:`SessionLock`); a second is refused, naming the first.
    """
    with session_lock(engine.store, session_dir):
        session, spec = prepare_session(session_dir)
        previous = session_run(engine, session.session_dir)
        try:
            # The session is marked active by the run's committer, once the first tasks are under way.
            if previous is not None and previous[1] in (RunStatus.RUNNING, RunStatus.BLOCKED):
                return await engine.resume(previous[0])
            if with_commit:
                spec.meta["with_commit"] = True
            return await engine.start(spec)
        except Stopped as stopped:
            raise RunStateError(f"session {session.session_id}: its files could not be written ({stopped.cause}); "
                                "the run stopped", hint="fix the cause and execute the session again: the run "
                                "resumes and finishes the completions it had journaled") from stopped.cause


def complete_session(session_dir: Path, store: RunStore | None = None) -> dict[str, Any]:
    """Mark every task completed, then archive the session (``/workflow:session:complete``).

    With the project's run ``store``, the session's lock is held throughout (a session being executed is
    refused) and the completions its last run journaled are written first, so a task an agent did keeps its
    own summary. A task that was never completed is ticked with a summary saying so; every change goes through
    the same idempotent writer, so an interrupted completion is finished by running it again.
    """
    if store is None:
        return _complete_session(session_dir)
    with session_lock(store, session_dir):
        _apply_pending(store, Path(session_dir).resolve())
        return _complete_session(session_dir)


def _complete_session(session_dir: Path) -> dict[str, Any]:
    session = read_ccw_session(session_dir)
    parent = session.session_dir.parent
    if session.layout == "active":
        archives = parent.parent / "archives"
    elif session.layout == "archived":
        archives = parent
    elif session.layout == "legacy":
        archives = parent / "archives"
    else:
        raise RunStateError(f"session {session.session_id} is not inside a .workflow folder, so it has no archive",
                            hint="move it to .workflow/active/ first")
    now = time.now_iso()
    completions = []
    for task_id, status in session.status.items():
        if status == "completed":
            continue
        ref = session.tasks[task_id]
        kids = session.children.get(task_id)
        summary = (render_container_summary(task_id, ref.title, kids) if kids else
                   f"# Task: {task_id} {ref.title}\n\n## Implementation Summary\n\nMarked completed when session "
                   f"{session.session_id} was completed; stepline did not run it.\n\n## Status: ✅ Complete\n")
        completions.append(Completion(
            task_id=task_id, task_json=ref.path.relative_to(session.session_dir).as_posix() if ref.path else None,
            history=({"from": ref.status, "to": "completed", "changed_at": now},),
            summary_path=f".summaries/{task_id}-summary.md", summary=summary))
    SessionWriter(session.session_dir).write(completions)
    if session.layout == "legacy":
        (parent / f".active-{session.session_id}").unlink(missing_ok=True)
    return archive_session(session.session_dir, archives, now, relative_to=session.project_root)


def read_session_file(session_dir: Path) -> dict[str, Any]:
    """workflow-session.json as a dict (a :class:`ReaderError` when it is missing or not a JSON object)."""
    path = session_dir / SESSION_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReaderError(f"{SESSION_FILE} is missing", path=str(path),
                          hint="`stepline ccw check` reports it") from None
    data = parse_json(text, path, what=f"{SESSION_FILE} does not parse")
    if not isinstance(data, dict):
        raise ReaderError(f"{SESSION_FILE} must be a JSON object", path=str(path), line=1)
    return data


def mark_session_started(session_dir: Path, now: str) -> None:
    """Set ``status: active`` and, the first time, ``execution_started_at`` in workflow-session.json."""
    data = read_session_file(session_dir)
    updated = {**data, "status": "active"}
    updated.setdefault("execution_started_at", now)
    if updated != data:
        write_files([(session_dir / SESSION_FILE, json_bytes(updated))])


def remove_stale_temp_files(session_dir: Path) -> None:
    """Delete temp files a killed writer left (``.<name>.<pid>.tmp`` of a process that no longer exists)."""
    from stepline.store import sweep_temp_files

    for folder in (session_dir, session_dir / ".task", session_dir / ".summaries"):
        sweep_temp_files(folder)


def _hours_between(start: object, end: str) -> float | None:
    from datetime import datetime

    if not isinstance(start, str):
        return None
    try:
        delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    except (ValueError, TypeError):
        return None
    return round(delta.total_seconds() / 3600, 2)


def archive_session(session_dir: Path, archives_dir: Path, now: str, *, relative_to: Path | None) -> dict[str, Any]:
    """Mark the session completed, move it into ``archives_dir`` and append its entry to ``manifest.json``.

    Follows ``/workflow:session:complete``: an ``.archiving`` marker first (an interrupted archive is
    finished, not restarted), the session file updated, the folder moved with one rename, the manifest
    entry appended (once: an entry for the same archive path is not added twice), the marker removed.
    ``session_dir`` may already be in ``archives_dir`` when an earlier attempt was interrupted after the move.
    """
    session_id = session_dir.name
    target = archives_dir / session_id
    if session_dir != target and target.exists():
        raise RunStateError(f"{target} already exists; session {session_id} was archived before",
                            hint="move or rename the older archive first")
    (session_dir / ARCHIVING_MARKER).touch()
    data = read_session_file(session_dir)
    if data.get("status") != "completed":
        data = {**data, "status": "completed", "completed_at": now}
        write_files([(session_dir / SESSION_FILE, json_bytes(data))])
    tasks = len(list((session_dir / ".task").glob("*.json")))
    summaries = len(list((session_dir / ".summaries").glob("*.md")))
    if session_dir != target:
        archives_dir.mkdir(parents=True, exist_ok=True)
        os.rename(session_dir, target)
    archive_path = target.relative_to(relative_to).as_posix() if relative_to else str(target)
    metrics: dict[str, Any] = {"tasks_completed": tasks, "summaries_generated": summaries}
    hours = _hours_between(data.get("execution_started_at") or data.get("created_at"),
                           str(data.get("completed_at") or now))
    if hours is not None:
        metrics["duration_hours"] = hours
    entry: dict[str, Any] = {"session_id": session_id,
                             "description": str(data.get("description") or data.get("project") or session_id),
                             "archived_at": now, "archive_path": archive_path, "metrics": metrics}
    _append_manifest(archives_dir / "manifest.json", entry)
    (target / ARCHIVING_MARKER).unlink(missing_ok=True)
    return entry


def _append_manifest(path: Path, entry: dict[str, Any]) -> None:
    """Append to a manifest that is a list (CCW 2025-11+) or ``{"archives": [...]}``; once per archive path."""
    try:
        manifest: Any = parse_json(path.read_text(encoding="utf-8"), path, what="manifest.json does not parse")
    except FileNotFoundError:
        manifest = []
    except ReaderError as exc:
        exc.hint = "fix it by hand; the session is already in the archive"
        raise
    entries = manifest.get("archives") if isinstance(manifest, dict) else manifest
    if not isinstance(entries, list):
        raise ReaderError("manifest.json is neither a list nor {\"archives\": [...]}", path=str(path), line=1)
    if any(isinstance(old, dict) and old.get("archive_path") == entry["archive_path"] for old in entries):
        return
    entries.append(entry)
    write_files([(path, json_bytes(manifest))])
