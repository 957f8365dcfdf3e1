"""Planning CCW tasks into waves: Kahn levels over ``depends_on``, tightened by the session's strategy.

Pure: no I/O, no clock, no randomness; the same tasks and strategy always give the same waves.

* A **wave** is the set of tasks whose dependencies are all done once the previous waves are; its tasks may
  run concurrently and are grouped by ``execution_group`` (a task without one is a group of its own).
* The **execution model** can only make the plan more sequential: ``parallel`` (or none) keeps the Kahn
  waves; ``phased`` adds a barrier after each ``Phase N`` of IMPL_PLAN.md; ``sequential`` and ``tdd`` run
  one task per wave, in topological order with document order breaking ties.
* Each **serialization requirement** names tasks that must not run at the same time: at most one of them
  per wave (overlapping requirements merge). Serialization and phases order tasks; they are not
  dependencies, so a failure skips only the tasks that really depend on it (:meth:`TaskGraph.dependents_of`).
* A **container** is never run: it starts when its own dependencies are done (so its subtasks wait for
  them) and completes when all its subtasks have; :attr:`Wave.containers_completed` says when.

Everything is linear in tasks + dependencies (plus a log factor for ordering).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

from stepline.ccw._graph import find_cycle
from stepline.ccw._plan import ExecutionModel
from stepline.errors import NotFoundError, ReaderError
from stepline.model import WorkflowSpec

__all__ = [
    "DagTask",
    "ExecutionModel",
    "TaskGraph",
    "TaskGroup",
    "Wave",
    "plan_waves",
    "plan_workflow_waves",
    "tasks_from_spec",
]

_REAL, _START, _END, _BARRIER = 0, 1, 2, 3
_SEQUENTIAL_MODELS = frozenset({"sequential", "tdd"})


@dataclass(frozen=True, slots=True)
class DagTask:
    """What planning needs of a task; a task is a container if ``is_container`` or another names it parent."""

    id: str
    depends_on: tuple[str, ...] = ()
    execution_group: str | None = None
    parent: str | None = None
    is_container: bool = False


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """Tasks of one wave sharing an ``execution_group`` (``key`` is the group, or the task id alone)."""

    key: str
    execution_group: str | None
    tasks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Wave:
    """Tasks that may run together once every earlier wave is done.

    ``tasks`` is in start order (critical-path tasks first, then document order). ``containers_completed``
    are the containers that are complete once this wave's tasks are; a leading wave with no tasks carries
    containers that are complete before anything runs.
    """

    index: int
    tasks: tuple[str, ...]
    groups: tuple[TaskGroup, ...]
    containers_completed: tuple[str, ...] = ()


class TaskGraph:
    """The dependency graph of a set of tasks, checked once, planned as often as needed.

    Raises:
        ReaderError: duplicate ids, a dependency or parent naming an unknown task, or a cycle (the message
            names the tasks).
    """

    def __init__(self, tasks: Iterable[DagTask]) -> None:
        self._tasks = list(tasks)
        self._index: dict[str, int] = {}
        for position, task in enumerate(self._tasks):
            if task.id in self._index:
                raise ReaderError(f"task id {task.id} appears twice")
            self._index[task.id] = position
        self._children: dict[int, list[int]] = {}
        problems = []
        for position, task in enumerate(self._tasks):
            problems += [f"{task.id} → {dep}" for dep in task.depends_on if dep not in self._index]
            if task.parent is not None:
                if task.parent not in self._index:
                    problems.append(f"{task.id} → parent {task.parent}")
                else:
                    self._children.setdefault(self._index[task.parent], []).append(position)
        if problems:
            raise ReaderError(f"dependencies name tasks that do not exist: {', '.join(problems)}")
        self._kind: list[int] = []
        self._owner: list[int] = []  # task position of each node
        self._entry: list[int] = []
        self._exit: list[int] = []
        for position, task in enumerate(self._tasks):
            if task.is_container or position in self._children:
                self._entry.append(self._node(_START, position))
                self._exit.append(self._node(_END, position))
            else:
                node = self._node(_REAL, position)
                self._entry.append(node)
                self._exit.append(node)
        self._succ: list[list[int]] = [[] for _ in self._kind]
        for position, task in enumerate(self._tasks):
            for dep in dict.fromkeys(task.depends_on):
                self._succ[self._exit[self._index[dep]]].append(self._entry[position])
            if self._entry[position] != self._exit[position]:
                self._succ[self._entry[position]].append(self._exit[position])
            for child in self._children.get(position, ()):
                self._succ[self._entry[position]].append(self._entry[child])
                self._succ[self._exit[child]].append(self._exit[position])
        cycle = find_cycle(range(len(self._kind)), self._succ.__getitem__)
        if cycle:
            raise ReaderError(f"dependency cycle: {self._describe(cycle, {})}",
                              hint="remove one of these depends_on entries")

    def _node(self, kind: int, position: int) -> int:
        self._kind.append(kind)
        self._owner.append(position)
        return len(self._kind) - 1

    def _describe(self, cycle: Sequence[int], barrier_phase: Mapping[int, int]) -> str:
        names: list[str] = []
        for node in cycle:
            name = (f"end of phase {barrier_phase[node]}" if node in barrier_phase
                    else self._tasks[self._owner[node]].id)
            if not names or names[-1] != name:
                names.append(name)
        return " → ".join(names)

    @property
    def containers(self) -> list[str]:
        """Ids of the container tasks, in document order."""
        return [self._tasks[p].id for p in range(len(self._tasks)) if self._entry[p] != self._exit[p]]

    def children_of(self, task_id: str) -> list[str]:
        """The direct subtasks of a container (empty for a leaf)."""
        return [self._tasks[child].id for child in self._children.get(self._position(task_id), ())]

    def _position(self, task_id: str) -> int:
        try:
            return self._index[task_id]
        except KeyError:
            raise NotFoundError(f"no task {task_id} in this plan") from None

    def dependents_of(self, task_id: str) -> list[str]:
        """Every task that cannot complete if ``task_id`` does not (transitively, containers included).

        Follows ``depends_on`` and containment only: a failed subtask takes its container and the
        container's dependents with it, never its siblings. Serialization and phases are not followed.
        """
        start = self._exit[self._position(task_id)]
        seen = {start}
        stack = [start]
        while stack:
            for nxt in self._succ[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        owners = {self._owner[node] for node in seen} - {self._index[task_id]}
        return [self._tasks[position].id for position in sorted(owners)]

    def _leaves_under(self, position: int) -> list[int]:
        if self._entry[position] == self._exit[position]:
            return [self._entry[position]]
        out: list[int] = []
        for child in self._children.get(position, ()):
            out += self._leaves_under(child)
        return out

    def _exclusion_groups(self, serialization: Iterable[Collection[str]]) -> dict[int, int]:
        """Map each real node named by a serialization requirement to its (merged) group."""
        root: dict[int, int] = {}

        def find(node: int) -> int:
            while root[node] != node:
                root[node] = root[root[node]]
                node = root[node]
            return node

        for names in serialization:
            nodes = [leaf for name in names if name in self._index
                     for leaf in self._leaves_under(self._index[name])]
            for node in nodes:
                root.setdefault(node, node)
            for node in nodes[1:]:
                root[find(node)] = find(nodes[0])
        return {node: find(node) for node in root}

    def waves(self, execution_model: ExecutionModel | None = None,
              serialization: Iterable[Collection[str]] = (), *, phases: Mapping[str, int] | None = None,
              priority: Sequence[str] = (), completed: Collection[str] = ()) -> list[Wave]:
        """Plan the tasks into waves (see the module docstring for the rules).

        Args:
            execution_model: ``parallel``/None, ``phased``, ``sequential`` or ``tdd``.
            serialization: groups of task ids that must not run at the same time.
            phases: task id → phase number; used only by the ``phased`` model.
            priority: task ids to start first inside a wave (the critical path).
            completed: tasks already done (a resumed session); they are planned into no wave.

        Raises:
            ReaderError: the phases contradict the dependencies (the message names the cycle).
        """
        kind = list(self._kind)
        extra: dict[int, list[int]] = {}
        barrier_phase: dict[int, int] = {}
        if execution_model == "phased" and phases:
            numbers = sorted({number for task_id, number in phases.items() if task_id in self._index})
            barrier = {number: len(kind) + offset for offset, number in enumerate(numbers)}
            kind += [_BARRIER] * len(numbers)
            barrier_phase = {node: number for number, node in barrier.items()}
            previous = {numbers[i]: barrier[numbers[i - 1]] for i in range(1, len(numbers))}
            for task_id, number in phases.items():
                if task_id in self._index:
                    position = self._index[task_id]
                    extra.setdefault(self._exit[position], []).append(barrier[number])
                    if number in previous:
                        extra.setdefault(previous[number], []).append(self._entry[position])
        indegree = [0] * len(kind)
        for node in range(len(kind)):
            for nxt in chain(self._succ[node] if node < len(self._succ) else (), extra.get(node, ())):
                indegree[nxt] += 1

        sequential = execution_model in _SEQUENTIAL_MODELS
        done_positions = {self._index[task_id] for task_id in completed if task_id in self._index}
        exclusive = {} if sequential else self._exclusion_groups(serialization)
        free: list[int] = []
        queued: dict[int, list[int]] = {}
        nonempty: set[int] = set()
        resolved = 0

        def enqueue(node: int) -> None:
            group = exclusive.get(node, -1) if not sequential else 0
            if group < 0:
                free.append(node)
                return
            heapq.heappush(queued.setdefault(group, []), node)
            nonempty.add(group)

        def resolve(nodes: Iterable[int]) -> list[str]:
            nonlocal resolved
            finished: list[str] = []
            stack = list(nodes)
            while stack:
                node = stack.pop()
                resolved += 1
                if kind[node] == _END:
                    finished.append(self._tasks[self._owner[node]].id)
                for nxt in chain(self._succ[node] if node < len(self._succ) else (), extra.get(node, ())):
                    indegree[nxt] -= 1
                    if indegree[nxt] == 0:
                        if kind[nxt] == _REAL and self._owner[nxt] not in done_positions:
                            enqueue(nxt)
                        else:
                            stack.append(nxt)
            return sorted(finished, key=self._index.__getitem__)

        start: list[int] = []
        for node in range(len(kind)):
            if indegree[node] == 0:
                if kind[node] == _REAL and self._owner[node] not in done_positions:
                    enqueue(node)
                else:
                    start.append(node)
        waves: list[Wave] = []
        finished = resolve(start)
        if finished:
            waves.append(Wave(index=0, tasks=(), groups=(), containers_completed=tuple(finished)))
        rank = {task_id: place for place, task_id in enumerate(priority)}
        while True:
            batch = free[:]
            free.clear()
            for group in list(nonempty):
                heap = queued[group]
                batch.append(heapq.heappop(heap))
                if not heap:
                    nonempty.discard(group)
            if not batch:
                break
            ids = [self._tasks[self._owner[node]].id for node in batch]
            ids.sort(key=lambda task_id: (rank.get(task_id, len(rank)), self._index[task_id]))
            finished = resolve(batch)
            waves.append(Wave(index=len(waves), tasks=tuple(ids), groups=self._groups(ids),
                              containers_completed=tuple(finished)))
        if resolved < len(kind):
            def successors(node: int) -> Iterable[int]:
                return chain(self._succ[node] if node < len(self._succ) else (), extra.get(node, ()))

            cycle = find_cycle((node for node in range(len(kind)) if indegree[node] > 0), successors)
            where = self._describe(cycle or [], barrier_phase)
            raise ReaderError(f"the phases contradict the dependencies: {where}",
                              hint="move the tasks to the right Phase in IMPL_PLAN.md or fix depends_on")
        return waves

    def _groups(self, ids: Sequence[str]) -> tuple[TaskGroup, ...]:
        grouped: dict[str, list[str]] = {}
        for task_id in ids:
            group = self._tasks[self._index[task_id]].execution_group
            grouped.setdefault(group if group is not None else task_id, []).append(task_id)
        return tuple(TaskGroup(key=key, execution_group=self._tasks[self._index[members[0]]].execution_group,
                               tasks=tuple(members)) for key, members in grouped.items())


def plan_waves(tasks: Iterable[DagTask], execution_model: ExecutionModel | None = None,
               serialization: Iterable[Collection[str]] = (), *, phases: Mapping[str, int] | None = None,
               priority: Sequence[str] = (), completed: Collection[str] = ()) -> list[Wave]:
    """Check ``tasks`` and plan them into waves (:meth:`TaskGraph.waves` documents the arguments)."""
    return TaskGraph(tasks).waves(execution_model, serialization, phases=phases, priority=priority,
                                  completed=completed)


def tasks_from_spec(spec: WorkflowSpec) -> list[DagTask]:
    """Return the planning view of a ``ccw`` WorkflowSpec's steps (parent/container from ``step.meta``)."""
    return [DagTask(id=step.id, depends_on=tuple(step.depends_on), execution_group=step.execution_group,
                    parent=step.meta.get("parent"), is_container=bool(step.meta.get("container")))
            for step in spec.steps]


def plan_workflow_waves(spec: WorkflowSpec, *, completed: Collection[str] | None = None) -> list[Wave]:
    """Plan a ``ccw`` WorkflowSpec with the strategy its reader stored in ``spec.meta``.

    ``completed`` defaults to the steps whose ``meta["status"]`` is ``completed`` (a resumed session).
    """
    meta = spec.meta
    if completed is None:
        completed = [step.id for step in spec.steps if step.meta.get("status") == "completed"]
    return plan_waves(tasks_from_spec(spec), meta.get("execution_model"), meta.get("serialization", ()),
                      phases=meta.get("phases"), priority=meta.get("critical_path", ()), completed=completed)
