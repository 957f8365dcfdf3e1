"""What `stepline sprint status` and the dashboard show of the loop: each story's latest run (its state, stage,
builds, tokens, cost, last event), what the blocked stories wait on with the command that settles each, a story held
back by a dependency that was deferred, and whether the loop runs, ended, or was killed (``.stepline/sprint/``:
``loop.jsonl``, what the loops did; ``loop.lock``, held by the process driving one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline.model import Run
from stepline.sprint._board import read_board
from stepline.sprint._usage import Usage

if TYPE_CHECKING:
    from stepline.sprint._project import SprintProject
    from stepline.store import RunStore

__all__ = ["STORY_PREFIX", "StoryRun", "Waiting", "board_rows", "latest_story_runs", "loop_driver", "loop_lock_path",
           "loop_log_path", "loop_state", "story_usage", "waiting", "waiting_on_board"]

#: The workflow id of a story's run is this and its key.
STORY_PREFIX = "sprint-story:"


@dataclass(frozen=True, slots=True)
class StoryRun:
    """A story's latest run, as its manifest says."""

    key: str
    run_id: str
    status: str


def latest_story_runs(store: RunStore) -> dict[str, StoryRun]:
    """Each story's latest run in the store."""
    found: dict[str, StoryRun] = {}
    for summary in store.summaries():
        if summary.workflow.startswith(STORY_PREFIX):
            key = summary.workflow[len(STORY_PREFIX):]
            found[key] = StoryRun(key=key, run_id=summary.run_id, status=summary.status)
    return found


def story_usage(run: Run) -> Usage:
    """What a story's run has cost so far (its stages' recorded usage)."""
    total = Usage()
    for name, value in run.variables.items():
        if name.startswith("sprint_usage:") and isinstance(value, dict):
            total = total + Usage.from_record(value)
    return total


def loop_lock_path(root: Path) -> Path:
    """``.stepline/sprint/loop.lock``: held by the process driving a loop here."""
    return root / ".stepline" / "sprint" / "loop.lock"


def loop_log_path(root: Path) -> Path:
    """``.stepline/sprint/loop.jsonl``: what the loops here did, story by story (``stepline sprint watch`` reads it;
    a view, never state: each story's run journal is the truth)."""
    return root / ".stepline" / "sprint" / "loop.jsonl"


def loop_driver(root: Path) -> int | None:
    """The pid of the process driving a loop here now, or None."""
    from stepline.store import lock_holder

    return lock_holder(loop_lock_path(root))


def loop_state(root: Path) -> str | None:
    """``running`` (a process drives the loop), ``killed`` (the last loop started and did not end, and no process
    drives it), ``ended: <outcome>``, or None when no loop was started here."""
    path = loop_log_path(root)
    if not path.is_file():
        return None
    last: dict[str, Any] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if '"loop-started"' in line or '"loop-ended"' in line:
            record = json.loads(line)
            if record.get("event") in ("loop-started", "loop-ended"):
                last = record
    if loop_driver(root) is not None:
        return "running"
    if last is None:
        return None
    return f"ended: {last.get('outcome')}" if last["event"] == "loop-ended" else "killed"


def _story_state(run: Run, gates: list[dict[str, Any]]) -> str:
    defer = run.steps.get("defer")
    if defer is not None and defer.status.value == "completed":
        return "deferred"
    if run.status.value == "blocked" and gates and not any(g.get("status") == "pending" for g in gates):
        return "answered"  # the person has answered: `stepline sprint resume` (or the running loop) goes on
    return run.status.value


def board_rows(project: SprintProject, store: RunStore) -> list[dict[str, Any]]:
    """The board as `stepline sprint status` and the dashboard show it: each entry of sprint-status.yaml with its
    story's latest run — the loop's state (a running story of a killed loop: ``killed``), the current stage, builds
    tried, tokens and cost, the last event — and, for a story not done, a dependency that was deferred."""
    from stepline import Engine

    board = read_board(project.board_path)
    runs = latest_story_runs(store)
    loader = Engine(project_root=project.root)
    killed = loop_state(project.root) == "killed"
    rows: list[dict[str, Any]] = []
    for entry in board.entries:
        row: dict[str, Any] = {"key": entry.key, "kind": entry.kind, "status": entry.status, "run": None,
                               "state": None, "stage": None, "attempts": 0, "tokens": 0, "cost_usd": 0.0,
                               "last_event": None, "waits_for": None}
        story_run = runs.get(entry.key)
        if story_run is not None:
            run_dir = store.open(story_run.run_id)
            story = loader.load(run_dir)
            events = run_dir.events()
            usage = story_usage(story)
            state = _story_state(story, [g for g in run_dir.read("gates.json", []) or [] if isinstance(g, dict)])
            started = [e.step_id for e in events if e.type == "WorkflowStepStarted" and e.step_id]
            current = started[-1] if started else None
            stage = f"{current} ({story.steps[current].status.value})" if current in story.steps else None
            row.update(run=story.run_id, state="killed" if killed and state == "running" else state, stage=stage,
                       attempts=sum(1 for sid in story.steps if sid.split("@")[0] == "build"
                                    and story.steps[sid].status.value != "pending"),
                       tokens=int(usage.tokens), cost_usd=round(usage.cost_usd or 0.0, 4),
                       last_event=f"{events[-1].type} {events[-1].time[11:19]}" if events else None)
        rows.append(row)
    _deferred_dependencies(project, board.stories, rows)
    return rows


def _deferred_dependencies(project: SprintProject, stories: list[Any], rows: list[dict[str, Any]]) -> None:
    """Note on each story not done whose dependency was deferred which one (``waits_for``): it is not taken until
    that one is committed (``stepline sprint retry KEY`` takes a deferred story again)."""
    deferred = {row["key"] for row in rows if row["state"] == "deferred"}
    if not deferred:
        return
    from stepline.sprint._parallel import story_needs

    open_rows = {row["key"]: row for row in rows if row["kind"] == "story" and row["status"] != "done"
                 and row["state"] not in ("completed", "deferred")}
    needs = story_needs(project, list(open_rows), [story.key for story in stories])
    for key, row in open_rows.items():
        if held := sorted(needs[key].after & deferred):
            row["waits_for"] = held


@dataclass(frozen=True, slots=True)
class Waiting:
    """A question or gate a blocked story waits on, and the command that settles it."""

    key: str
    run_id: str
    gate_id: str
    kind: str
    question: str

    @property
    def command(self) -> str:
        """What a person types to settle it (``ANSWER`` stands for their answer)."""
        if self.kind == "question":
            return f"stepline answer {self.run_id} ANSWER --gate {self.gate_id}"
        if self.gate_id:
            return f"stepline approve {self.run_id} {self.gate_id} --by NAME (or reject)"
        return f"stepline gates {self.run_id}"

    def line(self) -> str:
        """One line: the story, the command, the question (cut short)."""
        question = " ".join(self.question.split())
        return f"story {self.key}: `{self.command}` — {question[:400]}"


def waiting(store: RunStore, blocked: list[tuple[str, str]]) -> list[Waiting]:
    """Every question and gate the stories ``blocked`` (story key, run id) wait on, in that order. A story whose
    gates a person has all settled (the loop has not gone on with it yet) waits on no one."""
    found: list[Waiting] = []
    for key, run_id in blocked:
        gates = [g for g in store.open(run_id).read("gates.json", []) or [] if isinstance(g, dict)]
        pending = [Waiting(key, run_id, str(gate.get("gate_id")), str(gate.get("kind")), str(gate.get("reason") or ""))
                   for gate in gates if gate.get("status") == "pending"]
        if not pending and not gates:
            pending = [Waiting(key, run_id, "", "", "blocked, with no pending gate found in its gates.json")]
        found += pending
    return found


def waiting_on_board(project: SprintProject, store: RunStore) -> list[Waiting]:
    """What the board's blocked stories wait on (their latest runs), in board order."""
    runs = latest_story_runs(store)
    return waiting(store, [(entry.key, runs[entry.key].run_id) for entry in read_board(project.board_path).entries
                           if entry.key in runs and runs[entry.key].status == "blocked"])
