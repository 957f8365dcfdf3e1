"""The sprint loop: take the board's stories in sprint order, one durable run each, until none is left.

No model decides what happens next: the loop picks the next ``ready-for-dev`` story, starts its run (see
:mod:`stepline.sprint._driver`) and reads how it ended — committed, deferred, blocked on a person, failed.
A story whose run was interrupted (the loop was killed) or is blocked is resumed before any new one starts;
a story committed or deferred by an earlier loop is never taken again. What the loop was asked to do
(``--epic``, ``--max-stories`` …) is kept in ``.stepline/sprint/loop.json`` for ``stepline sprint resume``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline import time
from stepline.errors import NotFoundError, RunStateError
from stepline.model import Run, RunStatus
from stepline.sprint._board import Board, read_board
from stepline.sprint._config import BudgetLimit, SprintConfig
from stepline.sprint._driver import story_workflow
from stepline.sprint._link import LoopLedger, StoryEngine, StoryLink
from stepline.sprint._parallel import MergeQueue
from stepline.sprint._plan import plan_stories
from stepline.sprint._project import SprintProject
from stepline.sprint._status import (
    latest_story_runs,
    loop_driver,
    loop_lock_path,
    loop_log_path,
    story_usage,
)
from stepline.sprint._usage import Usage, budget_prices, over_limit

if TYPE_CHECKING:
    from stepline.engine import Engine
    from stepline.model import WorkflowSpec
    from stepline.store import RunStore

__all__ = ["LoopOptions", "StoryResult", "deferred_run", "load_loop", "loop_outcome", "plan_loop", "run_loop",
           "save_loop"]


@dataclass(slots=True)
class LoopOptions:
    """What a loop was asked to do."""

    epic: int | None = None
    story: str | None = None
    max_stories: int | None = None
    executor: str | None = None
    #: Stories built at once (``-j``); None: the config's ``max_parallel``.
    jobs: int | None = None
    sprint_id: str = field(default_factory=lambda: "sprint-" + time.now().strftime("%Y%m%d-%H%M%S"))
    #: The stories this loop has started, in order (``max_stories`` counts them across resumes).
    taken: list[str] = field(default_factory=list)
    #: Deferred stories taken again (``stepline sprint retry``): story key -> the deferred run.
    retry: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class StoryResult:
    """How one story of the loop ended."""

    key: str
    run_id: str
    outcome: str  # committed, deferred, blocked, failed; stopped (the loop's budget), halted (the same failure)
    summary: str
    usage: Usage
    #: How its agent failed last, when it was not committed (see :class:`_SameFailure`).
    failure: str | None = None


class _SameFailure:
    """The stories in a row that ended (not committed) with the same agent failure: past ``limit`` of them the loop
    takes no further story — the agent is broken, not the stories."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.keys: list[str] = []
        self.failure: str | None = None

    def ended(self, result: StoryResult) -> None:
        if result.outcome == "committed" or not result.failure:
            self.keys, self.failure = [], None
            return
        if result.failure != self.failure:
            self.keys, self.failure = [], result.failure
        self.keys.append(result.key)

    def halt(self, key: str, log: _LoopLog) -> StoryResult | None:
        """The loop's result for ``key`` when no further story is taken (it is logged), else None."""
        if len(self.keys) < self.limit:
            return None
        why = (f"the loop stopped: the agent failed the same way on {len(self.keys)} stories in a row "
               f"({', '.join(self.keys)}): {self.failure}")
        log.write("story-ended", key=key, run_id="", outcome="halted", summary=why)
        return StoryResult(key, "", "halted", why, Usage())


def _loop_file(root: Path) -> Path:
    return root / ".stepline" / "sprint" / "loop.json"


def save_loop(root: Path, options: LoopOptions) -> None:
    """Keep the loop's options for ``stepline sprint resume``."""
    from stepline.store import atomic_write_json

    path = _loop_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, asdict(options))


def load_loop(root: Path) -> LoopOptions:
    """The options of the last ``stepline sprint run`` here."""
    from stepline.store import read_json

    raw = read_json(_loop_file(root), None)
    if not isinstance(raw, dict):
        raise NotFoundError(f"{_loop_file(root)}: no sprint loop was started here",
                            hint="start one with `stepline sprint run`")
    return LoopOptions(epic=raw.get("epic"), story=raw.get("story"), max_stories=raw.get("max_stories"),
                       executor=raw.get("executor"), jobs=raw.get("jobs"),
                       sprint_id=str(raw.get("sprint_id") or "sprint"),
                       taken=[str(key) for key in raw.get("taken") or []],
                       retry={str(key): str(run) for key, run in (raw.get("retry") or {}).items()})


def deferred_run(project: SprintProject, store: RunStore, story: str) -> tuple[str, str]:
    """The story ``story`` names (its key, or its ``N-M`` prefix) and its latest run, which deferred it: what
    ``stepline sprint retry`` takes again. Anything else is refused in one line."""
    board = read_board(project.board_path)
    named = [entry.key for entry in board.stories if entry.key == story or entry.key.startswith(story + "-")]
    if len(named) != 1:
        raise NotFoundError(f"{board.path}: {story!r} names no single story (matches: {', '.join(named) or 'none'})",
                            hint="pass a story key as `stepline sprint status` shows it")
    key = named[0]
    latest = latest_story_runs(store).get(key)
    if latest is None:
        raise RunStateError(f"story {key} was never taken by the loop: there is nothing to retry",
                            hint=f"`stepline sprint run --story {key}` takes it")
    events = store.open(latest.run_id).events()
    if not any(e.type == "WorkflowStepCompleted" and e.step_id == "defer" for e in events):
        raise RunStateError(f"story {key} was not deferred: its latest run {latest.run_id} is {latest.status}",
                            hint="`stepline sprint status` shows each story's state; `stepline sprint resume` goes "
                                 "on with an unfinished one")
    return key, latest.run_id


def loop_outcome(results: list[StoryResult]) -> str:
    """How a loop ended, the worst of its stories: ``failed`` (a story failed, or the loop stopped at the same agent
    failure on stories in a row), ``blocked`` (on a person), ``deferred`` (a story set aside, or the loop's budget
    spent before the next one), else ``done`` (nothing left, or all committed)."""
    outcomes = {"failed" if r.outcome == "halted" else r.outcome for r in results}
    for worst in ("failed", "blocked"):
        if worst in outcomes:
            return worst
    return "deferred" if outcomes & {"deferred", "stopped"} else "done"


def _outcome(run: Run) -> tuple[str, str]:
    if run.status == RunStatus.BLOCKED:
        return "blocked", run.blocked_reason or "waiting for a person"
    if run.status == RunStatus.FAILED:
        return "failed", run.error or "a stage failed"
    for sid, outcome in (("advance", "committed"), ("defer", "deferred")):
        step = run.steps.get(sid)
        if step is not None and step.status.value == "completed":
            return outcome, step.summary or outcome
    return "failed", "the run ended without settling the story"


def _variables(project: SprintProject, config: SprintConfig, key: str, options: LoopOptions,
               spent: Usage) -> dict[str, Any]:
    dev = project.dev
    layers = ([{"id": layer.id, "name": layer.name or layer.id, "instruction": layer.instruction}
               for layer in config.review.layers] if config.review.layers else
              [{"id": layer.id, "name": layer.name, "instruction": layer.instruction}
               for layer in (dev.review_layers if dev else ())])
    return {"sprint_story": key, "sprint_id": options.sprint_id, "sprint_board": str(project.board_path),
            "sprint_isolation": config.isolation, "sprint_config": config.model_dump(mode="json"),
            "sprint_dev": {"name": dev.name, "path": str(dev.path), "era": dev.era} if dev else None,
            "sprint_layers": layers, "sprint_spent_before": spent.to_record()}


def settled_and_unfinished(store: RunStore) -> tuple[set[str], dict[str, str]]:
    """Stories an earlier loop settled (their run completed), and those whose run is to be resumed."""
    settled: set[str] = set()
    unfinished: dict[str, str] = {}
    for key, story_run in latest_story_runs(store).items():
        if story_run.status == RunStatus.COMPLETED.value:
            settled.add(key)
        elif story_run.status in (RunStatus.RUNNING.value, RunStatus.BLOCKED.value, RunStatus.FAILED.value):
            unfinished[key] = story_run.run_id
    return settled, unfinished


def plan_loop(project: SprintProject, store: RunStore, options: LoopOptions) -> tuple[Board, list[str], dict[str, str]]:
    """The board, the stories the loop takes in order, and the runs of those to resume."""
    board = read_board(project.board_path)
    settled, unfinished = settled_and_unfinished(store)
    runs = latest_story_runs(store)
    retried = {key for key, run_id in options.retry.items() if key in runs and runs[key].run_id == run_id}
    settled -= retried  # taken again, whatever the board says of it
    taken_anyway = {*unfinished, *retried}
    keys = plan_stories(board, epic=options.epic, story=options.story, max_stories=options.max_stories,
                        unfinished=taken_anyway, settled=settled)
    if options.max_stories is not None and options.taken:  # a resumed loop: the stories it started count
        room = options.max_stories - len(options.taken)
        keys = []
        for key in plan_stories(board, epic=options.epic, story=options.story, unfinished=taken_anyway,
                                settled=settled):
            if key in options.taken:
                keys.append(key)  # unfinished (a settled one is not planned): already counted
            elif room > 0:
                keys.append(key)
                room -= 1
    return board, keys, {k: unfinished[k] for k in keys if k in unfinished}


class _LoopLog:
    def __init__(self, root: Path) -> None:
        self.path = loop_log_path(root)

    def write(self, event: str, **data: Any) -> None:
        import json

        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"time": time.now_iso(), "event": event, **data}) + "\n")


def _spent_before(engine: Engine, options: LoopOptions, keys: list[str]) -> Usage:
    """What the stories this loop settled before a resume cost (the loop's budget counts them)."""
    spent = Usage()
    runs = latest_story_runs(engine.store)
    for key in options.taken:
        if key not in keys and key in runs:
            spent = spent + story_usage(engine.load(engine.store.open(runs[key].run_id)))
    return spent


async def run_loop(engine: Engine, project: SprintProject, config: SprintConfig, options: LoopOptions,
                   *, report: Any = None, resumed: bool = False) -> list[StoryResult]:
    """Run the loop until no story is left, one blocks or fails, or the loop's enforced budget is spent.

    One loop at a time drives a project (a second is refused naming the first's pid). ``report(result)`` is
    called as each story ends; each story's start and end and the loop's end go to :func:`loop_log_path`.
    """
    if (options.jobs or config.max_parallel) > 1 and config.isolation != "worktree":
        from stepline.errors import UsageError

        raise UsageError(f"-j {options.jobs or config.max_parallel} builds stories at once, each in its own worktree: "
                         "it needs isolation: worktree", hint="set isolation: worktree in config/sprint.yaml, or run "
                         "with -j 1")
    if project.dev is None:
        raise NotFoundError(f"{project.root}: no BMAD dev workflow is installed (bmad-build-auto, bmad-dev-auto, "
                            "bmad-dev-story or dev-story)", hint="install BMAD with `stepline bmad install SRC`")
    import subprocess

    from stepline.errors import RunLockedError
    from stepline.store import RunLock

    probe = subprocess.run(["git", "-C", str(project.root), "rev-parse", "--verify", "-q", "HEAD"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise RunStateError(f"{project.root} is not a git repository with a commit",
                            hint="the loop commits each story: `git init` and commit the project first")
    loop_lock_path(project.root).parent.mkdir(parents=True, exist_ok=True)
    lock = RunLock(loop_lock_path(project.root), options.sprint_id)
    try:
        lock.acquire()
    except RunLockedError:
        raise RunLockedError(f"a sprint loop is already running in {project.root} (process "
                             f"{loop_driver(project.root) or 'unknown'})",
                             hint="watch it with `stepline sprint watch`, or stop it first") from None
    log = _LoopLog(project.root)
    results: list[StoryResult] = []
    try:
        _, keys, to_resume = plan_loop(project, engine.store, options)
        log.write("loop-started", sprint_id=options.sprint_id, pid=os.getpid(), resumed=resumed, stories=keys)
        for key in [key for key in keys if key in options.retry and key not in to_resume]:
            kept = await _set_aside(project.root, key, options.retry[key])
            log.write("story-retried", key=key, run_id=options.retry[key], kept=kept)
        width = options.jobs or config.max_parallel
        if width > 1:
            results = await _parallel_stories(engine, project, config, options, width, keys, to_resume, log, report)
        else:
            results = await _stories(engine, project, config, options, keys, to_resume, log, report)
        log.write("loop-ended", outcome=loop_outcome(results))  # before the lock goes: a watcher sees one or the other
    except BaseException as exc:
        log.write("loop-ended", outcome="error", error=str(exc) or type(exc).__name__)
        raise
    finally:
        lock.release()
    return results


async def _set_aside(root: Path, key: str, run_id: str) -> str:
    """Before a deferred story is built again: its kept worktree and branch (the deferred attempt) move out of the
    new run's way, to ``.stepline/sprint/deferred/<key>-<run>`` on branch ``sprint-deferred/<key>/<run>`` (done
    again harmlessly after a crash halfway). Says where the attempt is kept."""
    from stepline.tools import git, git_error

    folder = root / ".stepline" / "sprint" / "worktrees" / key
    aside = root / ".stepline" / "sprint" / "deferred" / f"{key}-{run_id}"
    branch = f"sprint-deferred/{key}/{run_id}"
    if (folder / ".git").exists():
        aside.parent.mkdir(parents=True, exist_ok=True)
        code, out = await git(root, "worktree", "move", str(folder), str(aside))
        if code != 0:
            raise RunStateError(f"cannot move the deferred attempt of {key} out of the way: {git_error(out)}",
                                hint=f"move or remove the worktree {folder} by hand, then retry")
    code, _ = await git(root, "rev-parse", "--verify", "-q", f"refs/heads/sprint/{key}")
    if code == 0:
        await git(aside if (aside / ".git").exists() else root, "branch", "-m", f"sprint/{key}", branch)
        return f"branch {branch}" + (f" (worktree {aside})" if (aside / ".git").exists() else "")
    return "its patch under .stepline/sprint/deferred/"


def _workflow(key: str, config: SprintConfig) -> WorkflowSpec:
    return story_workflow(key, builds=config.retries.build, reviews=config.retries.review,
                          merge=config.isolation == "worktree", plan_gate=config.checkpoints.before_build,
                          commit_gate=config.checkpoints.after_commit, closeout=config.closeout is not None)


def _story_ended(run: Run, spent: Usage, limit: BudgetLimit, log: _LoopLog, report: Any) -> StoryResult:
    """How a story's run ended, written to loop.jsonl (with what the loop has spent, this story included) and
    reported."""
    outcome, summary = _outcome(run)
    usage = story_usage(run)
    spent = spent + usage
    key = run.variables.get("sprint_story") or run.workflow.meta.get("story")
    failure = run.variables.get("sprint_agent_failure") if outcome != "committed" else None
    result = StoryResult(key=str(key), run_id=run.run_id, outcome=outcome, summary=summary, usage=usage,
                         failure=str(failure) if failure else None)
    log.write("story-ended", key=result.key, run_id=run.run_id, outcome=outcome, summary=summary,
              usage=usage.to_record(), loop_spent=spent.to_record(),
              loop_left={"tokens": None if limit.tokens is None else limit.tokens - spent.tokens,
                         "cost_usd": None if limit.cost_usd is None else limit.cost_usd - (spent.cost_usd or 0.0)})
    if report is not None:
        report(result)
    return result


def _story_engine(engine: Engine, key: str, link: StoryLink, log: _LoopLog) -> StoryEngine:
    """The engine of one story's run (see :class:`~stepline.sprint._link.StoryEngine`), which writes the story's run
    id to loop.jsonl as soon as its run has one."""
    story_engine = StoryEngine(engine, link)

    def announce(event: Any) -> None:
        if event.type in ("WorkflowStarted", "WorkflowResumed"):
            log.write("story-run", key=key, run_id=event.run_id)

    story_engine.listeners.append(announce)
    return story_engine


def _held_back(after: set[str], ended: dict[str, str], statuses: dict[str, str]) -> tuple[str, bool] | None:
    """Why a story that depends on ``after`` is not taken now, and whether for the rest of the loop (a story it
    depends on ended in this loop without a commit); None: its dependencies are done."""
    if any(ended.get(dep, "committed") != "committed" for dep in after):
        return "a story it depends on was not committed", True
    for dep in sorted(after):
        if statuses.get(dep) != "done":
            return f"it depends on {dep}, not done yet", False
    return None


async def _stories(engine: Engine, project: SprintProject, config: SprintConfig, options: LoopOptions,
                   keys: list[str], to_resume: dict[str, str], log: _LoopLog, report: Any) -> list[StoryResult]:
    """One story at a time, in sprint order; a story whose dependencies are not done is passed over."""
    from stepline.sprint._parallel import story_needs

    needs = story_needs(project, keys, [s.key for s in read_board(project.board_path).stories])
    ended: dict[str, str] = {}
    results: list[StoryResult] = []
    spent = _spent_before(engine, options, keys)
    limit = config.budgets.run
    same = _SameFailure(config.stop_after_same_failure)
    for key in keys:
        problem = over_limit(spent, limit.tokens, limit.cost_usd)
        if problem and config.budgets.mode == "enforce":
            results.append(StoryResult(key, "", "stopped", f"the loop's budget is spent: {problem}", Usage()))
            log.write("story-ended", key=key, run_id="", outcome="stopped", summary=results[-1].summary)
            break
        if halted := same.halt(key, log):
            results.append(halted)
            break
        if key not in to_resume and (held := _held_back(needs[key].after, ended,
                                                        read_board(project.board_path).statuses())):
            log.write("story-waiting", key=key, reason=held[0])
            continue
        log.write("story-started", key=key, run_id=to_resume.get(key))
        story_engine = _story_engine(engine, key, StoryLink(MergeQueue([]), reconcile=key in to_resume), log)
        if key in to_resume:
            run = await story_engine.resume(to_resume[key])
        else:
            options.taken.append(key)
            save_loop(project.root, options)
            run = await story_engine.start(_workflow(key, config), _variables(project, config, key, options, spent))
        result = _story_ended(run, spent, limit, log, report)
        spent = spent + result.usage
        ended[key] = result.outcome
        results.append(result)
        same.ended(result)
        if result.outcome in ("blocked", "failed"):
            break  # the checkout holds this story's work: the next story waits for it (resume)
    return results


async def _parallel_stories(engine: Engine, project: SprintProject, config: SprintConfig, options: LoopOptions,
                            width: int, keys: list[str], to_resume: dict[str, str], log: _LoopLog,
                            report: Any) -> list[StoryResult]:
    """Up to ``width`` stories at once, each in its own worktree, admitted in sprint order: the interrupted ones
    first, then each whose dependencies are committed and whose files no running story declares or has touched
    (see :mod:`stepline.sprint._parallel`); their merges one at a time, in sprint order among the stories in flight
    (:class:`~stepline.sprint._parallel.MergeQueue`). The loop's budget is what they spend together, the running
    ones' calls included (:class:`~stepline.sprint._link.LoopLedger`)."""
    budgets = config.budgets
    ledger = LoopLedger(_spent_before(engine, options, keys), budget_prices(
        engine.config.prices.table(), budgets.input_per_mtok, budgets.output_per_mtok, budgets.cache_read_per_mtok))
    return await _admit_stories(engine, project, config, options, width, keys, to_resume, log, report, ledger,
                                MergeQueue(keys))


async def _admit_stories(engine: Engine, project: SprintProject, config: SprintConfig, options: LoopOptions,
                         width: int, keys: list[str], to_resume: dict[str, str], log: _LoopLog, report: Any,
                         ledger: LoopLedger, queue: MergeQueue) -> list[StoryResult]:
    import asyncio

    from stepline.sprint._parallel import story_needs, touched_files

    board = read_board(project.board_path)
    needs = story_needs(project, keys, [s.key for s in board.stories])
    results: list[StoryResult] = []
    limit = config.budgets.run
    waiting = list(keys)
    running: dict[asyncio.Task[Run], str] = {}
    ended: dict[str, str] = {}
    worktrees = project.root / ".stepline" / "sprint" / "worktrees"

    async def start(key: str) -> Run:
        story_engine = _story_engine(engine, key, StoryLink(queue, ledger, reconcile=key in to_resume), log)
        if key in to_resume:
            return await story_engine.resume(to_resume[key])
        return await story_engine.start(_workflow(key, config), {**_variables(project, config, key, options,
                                                                              ledger.spent()),
                                                                 "sprint_parallel": True})

    async def may_start(key: str) -> str | None:
        """Why ``key``, whose dependencies are done, cannot start now (None: it may)."""
        if needs[key].files:
            integration = await git_head(project.root)
            for other in running.values():
                theirs = needs[other].files | await touched_files(worktrees / other, integration)
                if shared := needs[key].files & theirs:
                    return f"{other} is changing {', '.join(sorted(shared)[:3])}"
        return None

    told: dict[str, str] = {}
    same = _SameFailure(config.stop_after_same_failure)
    while waiting or running:
        for key in list(waiting):
            if len(running) >= width:
                break
            if key not in to_resume:
                if halted := same.halt(key, log):
                    results.append(halted)
                    waiting = [k for k in waiting if k in to_resume]
                    break
                problem = over_limit(ledger.spent(), limit.tokens, limit.cost_usd) or ledger.crossed
                if problem and config.budgets.mode == "enforce":
                    results.append(StoryResult(key, "", "stopped", f"the loop's budget is spent: {problem}", Usage()))
                    log.write("story-ended", key=key, run_id="", outcome="stopped", summary=results[-1].summary)
                    waiting = [k for k in waiting if k in to_resume]
                    break
                if (held := _held_back(needs[key].after, ended, read_board(project.board_path).statuses())) \
                        and held[1]:
                    waiting.remove(key)  # a story it needs was not committed: it waits for a later loop
                    log.write("story-waiting", key=key, reason=held[0])
                    continue
                if (why := held[0] if held else await may_start(key)) is not None:
                    if told.get(key) != why:
                        told[key] = why
                        log.write("story-waiting", key=key, reason=why)
                    continue
                options.taken.append(key)
                save_loop(project.root, options)
            waiting.remove(key)
            log.write("story-started", key=key, run_id=to_resume.get(key))
            queue.started(key)
            running[asyncio.ensure_future(start(key))] = key
        if not running:
            for key in waiting:  # nothing runs and nothing can start: what they wait for will not come this loop
                log.write("story-waiting", key=key, reason=told.get(key, "nothing it needs can finish now"))
            break
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            key = running.pop(task)
            await queue.left(key)
            run = task.result()
            result = _story_ended(run, ledger.spent(but_run=run.run_id), limit, log, report)
            ended[key] = result.outcome
            results.append(result)
            same.ended(result)
    return results


async def git_head(root: Path) -> str:
    """The integration branch's commit now (the main checkout's HEAD)."""
    from stepline.tools import git_ok

    return await git_ok(root, "rev-parse", "HEAD")
