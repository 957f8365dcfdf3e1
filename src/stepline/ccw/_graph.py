"""Dependency checks of a CCW session that must hold before anything runs: dangling ids and cycles.

Containers are modelled with two points, *start* (after the container's own dependencies) and *end* (after
all its subtasks), so a subtask may depend on a sibling without the container looking like a cycle, while
a subtask that depends on its own container is one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

N = TypeVar("N", bound=Hashable)


def find_cycle(nodes: Iterable[N], successors: Callable[[N], Iterable[N]]) -> list[N] | None:
    """Return one cycle as ``[a, b, …, a]`` if the graph has one, else None (iterative, linear time)."""
    state: dict[N, int] = {}  # 1 = on the current path, 2 = finished
    for root in nodes:
        if root in state:
            continue
        path: list[N] = [root]
        stack = [iter(successors(root))]
        state[root] = 1
        while stack:
            for nxt in stack[-1]:
                seen = state.get(nxt)
                if seen == 1:
                    return [*path[path.index(nxt):], nxt]
                if seen is None:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append(iter(successors(nxt)))
                    break
            else:
                state[path.pop()] = 2
                stack.pop()
    return None


def task_cycle(order: Sequence[str], depends_on: Mapping[str, Sequence[str]],
               parent: Mapping[str, str | None]) -> list[str] | None:
    """Return a dependency cycle among tasks as task ids ``[a, b, …, a]``, None when there is none.

    ``depends_on`` must name known tasks only (check dangling ids first); ``parent`` maps a subtask to its
    container.
    """
    containers = {p for p in parent.values() if p}
    children: dict[str, list[str]] = {}
    dependents: dict[str, list[str]] = {}
    for task_id in order:
        if parent.get(task_id):
            children.setdefault(str(parent[task_id]), []).append(task_id)
        for dep in depends_on.get(task_id, ()):
            dependents.setdefault(dep, []).append(task_id)

    def start(task_id: str) -> tuple[str, bool]:
        return task_id, task_id not in containers

    def successors(node: tuple[str, bool]) -> list[tuple[str, bool]]:
        task_id, is_end = node
        if not is_end:  # a container's start: its subtasks may begin, and its end follows
            return [*(start(child) for child in children.get(task_id, ())), (task_id, True)]
        out = [start(dependent) for dependent in dependents.get(task_id, ())]
        owner = parent.get(task_id)
        if owner:
            out.append((owner, True))
        return out

    cycle = find_cycle((start(task_id) for task_id in order), successors)
    if cycle is None:
        return None
    names: list[str] = []
    for task_id, _ in cycle:
        if not names or names[-1] != task_id:
            names.append(task_id)
    return names
