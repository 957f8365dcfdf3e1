"""Which steps may run next: a dependency schedule shared by sequential and DAG workflows.

A sequential workflow is the special case where each step depends on the one before it. The schedule is
incremental (dependents are released when a step completes, skipped transitively when it fails), so picking
the next steps costs O(1) per step even for 10,000-task CCW sessions.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from stepline.model import Run, StepStatus, WorkflowSpec

__all__ = ["CursorFlow", "DependencySchedule", "Flow", "make_schedule"]

_DONE = (StepStatus.COMPLETED, StepStatus.SKIPPED)


class Flow(Protocol):
    """Decides the order of steps; the engine asks it what may start and tells it what finished."""

    def take_ready(self, limit: int) -> list[str]:
        """Up to ``limit`` step ids that may start now."""

    def finished(self, step_id: str, status: StepStatus) -> list[str]:
        """Record how a step ended; return the ids of steps that can never run now (to be skipped)."""


_OPEN = (StepStatus.RUNNING, StepStatus.BLOCKED, StepStatus.FAILED)


class CursorFlow:
    """One step at a time, where the last completed step led: for families whose next step is decided as a step
    runs (a menu choice, a route), not known ahead.

    The position is the run's state, not the flow's: a step that is running, blocked or failed is continued;
    otherwise the run's cursor (``CursorMoved``'s ``next``, journaled by the driver before the step completes)
    names the next visit; a run without one starts at ``first``.
    """

    def __init__(self, run: Run, first: str) -> None:
        self.run = run
        self.first = first
        self.current = self._position()

    def _position(self) -> str | None:
        for sid, step in self.run.steps.items():
            if step.status in _OPEN:
                return sid
        if "next" in self.run.cursor:
            return str(self.run.cursor["next"]) if self.run.cursor["next"] else None
        first = self.run.steps.get(self.first)
        return self.first if first is None or first.status == StepStatus.PENDING else None

    def take_ready(self, limit: int) -> list[str]:
        """The one step that runs next, if any."""
        if self.current is None or limit < 1:
            return []
        sid, self.current = self.current, None
        return [sid]

    def finished(self, step_id: str, status: StepStatus) -> list[str]:
        """After a completed step, go where the cursor led; a blocked or failed step stops the run."""
        if status == StepStatus.COMPLETED:
            following = self.run.cursor.get("next")
            self.current = str(following) if following else None
        return []


class DependencySchedule:
    """Kahn-style release of steps whose dependencies have completed."""

    def __init__(self, order: list[str], deps: dict[str, list[str]], run: Run) -> None:
        self.order = order
        self.deps = deps
        self.dependents: dict[str, list[str]] = {sid: [] for sid in order}
        self.waiting: dict[str, int] = {}
        self.ready: deque[str] = deque()
        self.dead: set[str] = set()
        status = {sid: run.steps[sid].status if sid in run.steps else StepStatus.PENDING for sid in order}
        for sid in order:
            for dep in deps.get(sid, []):
                self.dependents[dep].append(sid)
        for sid in order:
            if status[sid] in _DONE:
                continue
            missing = sum(1 for dep in deps.get(sid, []) if status[dep] not in _DONE)
            self.waiting[sid] = missing
            if missing == 0:
                self.ready.append(sid)

    def take_ready(self, limit: int) -> list[str]:
        """Up to ``limit`` step ids that may start now, in workflow order of release."""
        taken: list[str] = []
        while self.ready and len(taken) < limit:
            sid = self.ready.popleft()
            if sid not in self.dead:
                taken.append(sid)
        return taken

    def finished(self, step_id: str, status: StepStatus) -> list[str]:
        """Release dependents of a completed step; return every transitive dependent of a failed one."""
        self.waiting.pop(step_id, None)
        if status == StepStatus.COMPLETED or status == StepStatus.SKIPPED:
            for nxt in self.dependents[step_id]:
                if nxt in self.waiting and nxt not in self.dead:
                    self.waiting[nxt] -= 1
                    if self.waiting[nxt] == 0:
                        self.ready.append(nxt)
            return []
        if status == StepStatus.FAILED:
            doomed: list[str] = []
            stack = list(self.dependents[step_id])
            while stack:
                nxt = stack.pop()
                if nxt in self.dead or nxt not in self.waiting:
                    continue
                self.dead.add(nxt)
                doomed.append(nxt)
                stack.extend(self.dependents[nxt])
            return doomed
        return []


def make_schedule(workflow: WorkflowSpec, run: Run) -> DependencySchedule:
    """Build the schedule: explicit ``depends_on`` when any step declares one, else a chain in file order."""
    order = [spec.id for spec in workflow.steps]
    if any(spec.depends_on for spec in workflow.steps) or workflow.meta.get("scheduling") == "dag":
        deps = {spec.id: list(spec.depends_on) for spec in workflow.steps}
    else:
        deps = {sid: ([order[i - 1]] if i else []) for i, sid in enumerate(order)}
    return DependencySchedule(order, deps, run)
