"""The stages of one story's run (format ``sprint``): each a step of the journal, each done exactly once.

* ``baseline``: the runtime (not the agent) records the commit the story starts from, and in a worktree run
  makes the story's worktree and branch; a non-isolated run needs a clean working tree.
* ``build``: the dev workflow found on disk, done by the executor in a fresh session (one ``work`` request),
  told what failed before when it is a retry.
* ``verify`` / ``verify-final``: trust nothing — the story's file says review/done, the change is not empty
  (the story file and the board do not count), the history descends from the baseline, the board is
  consistent, and every ``verify.commands`` exits 0 (each result journaled with its output, once).
* ``review``: the review layers, in parallel, each a separate executor call that sees the story and the diff
  only; findings triaged ``patch`` (back to build), ``defer`` (into deferred-work.md), ``escalate`` (a question
  gate a person answers with ``stepline answer``); each finding recorded as evidence.
* ``commit``: the story's change as one commit on the baseline (the agent's commits squashed into it), its
  message from the story's title, with trailers that find it again after a crash; ``merge`` (worktree runs)
  brings the branch into the main checkout; ``advance`` moves the board to ``done``.
* ``defer``: a story out of budget is written to deferred-work.md with the reason; its attempt is kept (the
  worktree branch, or a patch file), and a non-isolated checkout is put back to the baseline.

Effects that leave the process (git, the board, deferred-work.md) journal their intent (fsynced) first and
their result after; an intent without a result is redone idempotently or looked up (a commit by trailers).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from stepline import time
from stepline.engine._runner import register_driver
from stepline.errors import AgentEnvironmentError, BudgetExceeded, ExecutorError, StepFailed
from stepline.executors._budget import BUDGET_HINT, CallBudget, Prices
from stepline.model import EventType, Run, WorkflowSpec
from stepline.sprint._board import read_board, set_status, status_rank
from stepline.sprint._flow import CHECKPOINTS, STAGES, Budget, SprintFlow
from stepline.sprint._parallel import loop_spend
from stepline.sprint._project import ReviewLayer, find_project
from stepline.sprint._usage import Usage, over_limit, usage_of_calls
from stepline.tools._git import find_commit, git, git_ok, is_ancestor, with_trailers

if TYPE_CHECKING:
    from stepline.engine._context import StepContext

__all__ = ["FORMAT", "parse_findings", "reconcile_first", "run_sprint_stage", "story_workflow"]

FORMAT: Literal["sprint"] = "sprint"
_DONE_STATES = ("review", "in-review", "done", "ready for review")
_DEFAULT_LAYER = ReviewLayer(
    id="adversarial", name="Adversarial Reviewer",
    instruction="Review this change against its story as a skeptical senior engineer. Look for what is wrong "
                "and what is missing: acceptance criteria not met, untested paths, edge cases, broken behaviour."
                "\n\nStory:\n{verbatim_intent}\n\nDiff:\n{diff_output}\n")
#: Whose budget a reason names when it is the loop's (a call's budget says so, see :func:`_call_budget`).
_LOOP_BUDGET = "the loop's budget"
_FINDING = re.compile(r"^\s*(?:[-*]\s*)?\[?(patch|defer|escalate|intent_gap|bad_spec)\]?\s*[:\-–]\s*(.+)$",
                      re.IGNORECASE)


def story_workflow(key: str, *, builds: int, reviews: int, merge: bool, plan_gate: bool = False,
                   commit_gate: bool = False, closeout: bool = False) -> WorkflowSpec:
    """The workflow of one story's run: its stages (visits beyond the first are added as they happen)."""
    from stepline.model import StepSpec

    wanted = {"merge": merge, "checkpoint-plan": plan_gate, "checkpoint-commit": commit_gate, "closeout": closeout}
    steps = [StepSpec(id=stage, name=f"{stage} {key}", human_gate="required" if stage in CHECKPOINTS else None,
                      on_reject="skip" if stage in CHECKPOINTS else "fail")
             for stage in STAGES if wanted.get(stage, True)]
    budget = {"builds": builds, "reviews": reviews, "merge": merge, "plan_gate": plan_gate,
              "commit_gate": commit_gate, "closeout": closeout}
    return WorkflowSpec(id=f"sprint-story:{key}", name=f"sprint story {key}", format=FORMAT, steps=steps,
                        meta={"story": key, "budget": budget})


def _flow(workflow: WorkflowSpec, run: Run) -> SprintFlow:
    raw = workflow.meta.get("budget") or {}
    return SprintFlow(run, Budget(builds=int(raw.get("builds", 3)), reviews=int(raw.get("reviews", 2)),
                                  merge=bool(raw.get("merge")), plan_gate=bool(raw.get("plan_gate")),
                                  commit_gate=bool(raw.get("commit_gate")), closeout=bool(raw.get("closeout"))))


# -- journaled helpers ------------------------------------------------------------------------------------------
def _set(ctx: StepContext, name: str, value: Any) -> None:
    """A run variable later stages read (journaled; set again identically when a stage is redone)."""
    if ctx.run.variables.get(name) != value:
        ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})


async def _once(ctx: StepContext, name: str, compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """The journaled result of ``name`` in this attempt of this stage, or ``compute``'s, journaled (a check, a
    command): a resumed attempt replays it, a new attempt (after a failure) checks again."""
    key = f"{ctx.spec.id}/{ctx.attempt}/sprint/{name}"
    recorded = ctx.engine.calls.recorded.get(key)
    if recorded is not None:
        cached: dict[str, Any] = recorded["result"]
        return cached
    result = await compute()
    ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": f"sprint:{name}", "result": result})
    return result


async def _effect(ctx: StepContext, name: str, args: dict[str, Any], do: Callable[[bool], Awaitable[dict[str, Any]]]
                  ) -> dict[str, Any]:
    """An effect outside the process, once: intent fsynced, then ``do(redo)``, then its result. ``redo`` is
    True when an earlier attempt journaled the intent and no result (the effect may have happened)."""
    key = f"{ctx.spec.id}/sprint/{name}"
    calls = ctx.engine.calls
    recorded = calls.recorded.get(key)
    if recorded is not None:
        cached: dict[str, Any] = recorded["result"]
        return cached
    redo = key in calls.started
    if not redo:
        ctx.emit(EventType.CALL_STARTED, {"key": key, "op": f"sprint:{name}", "args": args}, sync=True)
    result = await do(redo)
    ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": f"sprint:{name}", "args": args, "result": result})
    return result


def _vars(ctx: StepContext) -> dict[str, Any]:
    return ctx.run.variables


def _workspace(ctx: StepContext) -> Path:
    return Path(str(_vars(ctx).get("sprint_workspace") or ctx.project_root))


def _excluded(ctx: StepContext) -> list[str]:
    """Pathspecs the story's change never includes: the loop's ledgers (the board, deferred-work.md beside
    it) and stepline's own folder."""
    board = Path(str(_vars(ctx)["sprint_board"]))
    try:
        rel = board.relative_to(ctx.project_root)
    except ValueError:
        rel = Path(board.name)
    return [f":(exclude){rel.as_posix()}", f":(exclude){(rel.parent / 'deferred-work.md').as_posix()}",
            ":(exclude).stepline"]


def _own_paths(ctx: StepContext) -> list[str]:
    """The board and stepline's folder, as paths (what :func:`_excluded` excludes)."""
    return [spec.removeprefix(":(exclude)") for spec in _excluded(ctx)]


def _local_board(ctx: StepContext, workspace: Path) -> Path:
    """The board in the story's checkout: the main one, or a worktree's copy (which the agent edits there)."""
    board = Path(str(_vars(ctx)["sprint_board"]))
    if board.is_relative_to(ctx.project_root) and (local := workspace / board.relative_to(ctx.project_root)).is_file():
        return local
    return board


def _config(ctx: StepContext) -> dict[str, Any]:
    config: dict[str, Any] = _vars(ctx).get("sprint_config") or {}
    return config


def _prices(ctx: StepContext) -> Prices:
    budgets = _config(ctx).get("budgets") or {}
    default = Prices()  # a key missing from the run's config: the same defaults config/sprint.yaml has
    return Prices(input=float(budgets.get("input_per_mtok", default.input)),
                  output=float(budgets.get("output_per_mtok", default.output)),
                  cache_read=float(budgets.get("cache_read_per_mtok", default.cache_read)))


def _usage(ctx: StepContext) -> Usage:
    """What the story's earlier stages used (this stage's own usage left out: a stage run again after a crash
    decides as it did the first time)."""
    total = Usage()
    for name, value in _vars(ctx).items():
        if name.startswith("sprint_usage:") and name != f"sprint_usage:{ctx.spec.id}" and isinstance(value, dict):
            total = total + Usage.from_dict(value)
    return total


def _stage_usage(ctx: StepContext) -> Usage:
    """What this stage's calls used, as journaled."""
    prefix = ctx.spec.id + "/"
    return usage_of_calls([r for k, r in ctx.engine.calls.recorded.items() if k.startswith(prefix)], _prices(ctx))


def _note_usage(ctx: StepContext) -> None:
    _set(ctx, f"sprint_usage:{ctx.spec.id}", _stage_usage(ctx).to_dict())


def _enforced(ctx: StepContext) -> bool:
    """Whether the budgets stop the story (``enforce``, unless a person let this story go on past them)."""
    return (_config(ctx).get("budgets") or {}).get("mode") == "enforce" and not _vars(ctx).get("sprint_budget_waived")


def _over_budget(ctx: StepContext) -> str | None:
    """Why the story may not make another call (its ``enforce`` limit is spent); None when it may."""
    budgets = _config(ctx).get("budgets") or {}
    story = budgets.get("story") or {}
    used = _usage(ctx)
    run_limit = budgets.get("run") or {}
    problem = over_limit(used, story.get("tokens"), story.get("cost_usd"))
    if problem is None:
        problem = over_limit(used + _spent_by_others(ctx), run_limit.get("tokens"), run_limit.get("cost_usd"))
        problem = f"{_LOOP_BUDGET}: {problem}" if problem else None
    else:
        problem = f"the story's budget: {problem}"
    if problem and _enforced(ctx):
        return problem
    if problem:
        ctx.emit(EventType.VALIDATION_FAILED, {"check": "budget", "warning": problem})
    return None


def _spent_by_others(ctx: StepContext) -> Usage:
    """What the loop's other stories have spent: in a parallel loop, the stories that ended and what each running
    one's journal holds now; else what the loop had spent when this story started."""
    key = str(_vars(ctx)["sprint_story"])
    if (spend := loop_spend(ctx.project_root)) is not None and key in spend.running:
        return spend.spent(but=key)
    return Usage.from_dict(_vars(ctx).get("sprint_spent_before") or {})


def _call_budget(ctx: StepContext) -> dict[str, Any] | None:
    """The budget hint of an agent call of this stage, None when nothing is enforced: what the story's limit leaves
    (the stage's calls that run at once share it), within what the loop's limit leaves (shared by every live call
    of the loop's stories, each one's usage counted as it streams in) — a CLI agent past either is stopped
    mid-call, and once the loop's is crossed, every running story's agent is."""
    if not _enforced(ctx):
        return None
    budgets = _config(ctx).get("budgets") or {}
    story_used = _usage(ctx) + _stage_usage(ctx)

    def left(limits: dict[str, Any], used: Usage, what: str, pool: str, within: CallBudget | None = None
             ) -> CallBudget:
        tokens, cost = limits.get("tokens"), limits.get("cost_usd")
        return CallBudget(tokens=None if tokens is None else float(tokens) - used.tokens,
                          cost_usd=None if cost is None else float(cost) - used.cost_usd,
                          prices=_prices(ctx), what=what, pool=pool, within=within)

    run_limits = budgets.get("run") or {}
    loop = (left(run_limits, story_used + _spent_by_others(ctx), _LOOP_BUDGET, f"sprint-loop:{ctx.project_root}")
            if run_limits.get("tokens") is not None or run_limits.get("cost_usd") is not None else None)
    story = left(budgets.get("story") or {}, story_used, "the story's budget",
                 f"{ctx.run.run_id}/{ctx.spec.id}/{ctx.attempt}", loop)
    if loop is None and story.tokens is None and story.cost_usd is None:
        return None
    return story.to_hint()


def _gate_key(ctx: StepContext, question: str) -> str:
    """The key of a question a person answers for this story at this stage's visit (``review-escalation:1-2-sub:2``
    is the second review round's): one answer settles that question only, never another story's or round's."""
    visit = ctx.spec.id.split("@", 1)
    return f"{question}:{_vars(ctx)['sprint_story']}:{visit[1] if len(visit) > 1 else 1}"


async def _budget_spent(ctx: StepContext, why: str) -> bool:
    """The story's enforced budget is spent (``why``): defer it, or — with ``budgets.on_exceeded: escalate`` —
    ask a person (``stepline answer RUN defer|continue``). True when the stage must stop (the story is deferred);
    False when the person let the story go on (its budgets then only warn)."""
    key = str(_vars(ctx)["sprint_story"])
    if f"{_LOOP_BUDGET}: " in why and (spend := loop_spend(ctx.project_root)) is not None:
        # The parallel loop admits no story after this: the other running stories' calls, stopped with this one,
        # may not be journaled yet.
        spend.crossed = spend.crossed or why.split(f"{_LOOP_BUDGET}: ", 1)[1]
    if (_config(ctx).get("budgets") or {}).get("on_exceeded") == "escalate":
        question = (f"Story {key} went past its budget ({why}). Answer defer (set the story aside) or continue "
                    "(let it go on; its budgets then only warn).")
        answer = await ctx.engine.human.ask(ctx, question, ["defer", "continue"],
                                            _gate_key(ctx, ctx.spec.id.split("@", 1)[0] + "-budget"))
        if answer.strip().lower().startswith("continue"):
            _set(ctx, "sprint_budget_waived", True)
            return False
    ctx.step.choice, ctx.step.summary = "over-budget", why
    _set(ctx, "sprint_reason", why)
    return True


# -- a stage's starting point, and putting the workspace back to it ----------------------------------------------
async def _snapshot(ctx: StepContext, workspace: Path, message: str) -> str:
    """A commit of the workspace as it is now (tracked and untracked files, the loop's ledgers left out), its HEAD
    the parent, made through a scratch index: HEAD, the index and the files are not touched."""
    index = ctx.project_root / ".stepline" / "sprint" / "scratch" / f"{ctx.run.run_id}.index"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        await git_ok(workspace, "read-tree", "HEAD", env=env)
        await git_ok(workspace, "add", "-A", "--", ".", env=env)
        await git(workspace, "reset", "-q", "HEAD", "--", *_own_paths(ctx), env=env)  # as the story's commit does
        tree = await git_ok(workspace, "write-tree", env=env)
    finally:
        index.unlink(missing_ok=True)
    return await git_ok(workspace, "-c", "user.name=stepline", "-c", "user.email=stepline@localhost",
                        "commit-tree", tree, "-p", "HEAD", "-m", message)


async def _put_back(ctx: StepContext, workspace: Path, head: str, files: str, saved: Path) -> None:
    """The workspace back to the files of commit ``files`` with HEAD at ``head`` (later commits, the agent's, leave
    the branch) — the loop's ledgers as they are now: a board status never goes back. Done again from the start
    after a crash halfway (``saved`` keeps the ledgers across it)."""
    from stepline.store import atomic_write_bytes, atomic_write_json, read_json

    ledgers: dict[str, str] | None = read_json(saved, None)
    if ledgers is None:
        found = [workspace / rel for rel in _own_paths(ctx)]
        ledgers = {str(path): path.read_text(encoding="utf-8") for path in found if path.is_file()}
        saved.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(saved, ledgers)
    await git_ok(workspace, "reset", "-q", "--hard", files)
    await git(workspace, "clean", "-q", "-fd", "--", ".", *_excluded(ctx))
    if files != head:  # HEAD back to ``head``, the files kept, the index as HEAD (new files untracked again)
        await git_ok(workspace, "reset", "-q", head)
    for name, text in ledgers.items():
        atomic_write_bytes(Path(name), text.encode("utf-8"))
    saved.unlink()


async def _stage_start(ctx: StepContext) -> dict[str, Any]:
    """How this stage found the workspace (journaled once per stage): its HEAD, and a snapshot commit of its files
    kept under ``refs/stepline/baseline/<story>/<stage>`` (git's gc keeps it) — what an interrupted attempt is
    put back to before the stage's agent works again."""
    key, workspace = str(_vars(ctx)["sprint_story"]), _workspace(ctx)

    async def record(redo: bool) -> dict[str, Any]:
        head = await git_ok(workspace, "rev-parse", "HEAD")
        files = await _snapshot(ctx, workspace, f"stepline: story {key} before {ctx.spec.id}")
        await git_ok(workspace, "update-ref", f"refs/stepline/baseline/{key}/{ctx.spec.id}", files)
        return {"head": head, "files": files}

    return await _effect(ctx, "stage-start", {}, record)


async def _back_to_stage_start(ctx: StepContext, start: dict[str, Any]) -> None:
    """Before the stage's agent works again (the run was killed while it worked, or it failed for a reason that
    was not the work's): what the workspace holds now is kept on ``refs/stepline/preserve/<story>/<stage>/<n>``,
    and the workspace is put back to how the stage found it — the story's commit then holds each change once."""
    key, workspace = str(_vars(ctx)["sprint_story"]), _workspace(ctx)
    prefix = f"{ctx.spec.id}/sprint/put-back/"
    number = 1 + sum(1 for k in ctx.engine.calls.recorded if k.startswith(prefix))
    ref = f"refs/stepline/preserve/{key}/{ctx.spec.id}/{number}"

    async def put_back(redo: bool) -> dict[str, Any]:
        code, kept = await git(workspace, "rev-parse", "--verify", "-q", ref)
        if not redo or code != 0:  # a redo after a crash halfway keeps what it preserved the first time
            kept = await _snapshot(ctx, workspace, f"stepline: story {key} {ctx.spec.id}, interrupted attempt")
            head = await git_ok(workspace, "rev-parse", "HEAD")
            if head == start["head"] and await _same_files(workspace, kept, start["files"]):
                return {"preserved": None}
            await git_ok(workspace, "update-ref", ref, kept)
        await _put_back(ctx, workspace, start["head"], start["files"],
                        ctx.project_root / ".stepline" / "sprint" / "scratch" / f"{ctx.run.run_id}.ledgers.json")
        return {"preserved": ref}

    await _effect(ctx, f"put-back/{number}", {"head": start["head"], "files": start["files"]}, put_back)


async def _same_files(workspace: Path, one: str, other: str) -> bool:
    return await git_ok(workspace, "rev-parse", f"{one}^{{tree}}") == await git_ok(
        workspace, "rev-parse", f"{other}^{{tree}}")


# -- stages ---------------------------------------------------------------------------------------------------------
async def _baseline(ctx: StepContext) -> None:
    root, key = ctx.project_root, str(_vars(ctx)["sprint_story"])
    isolated = _vars(ctx).get("sprint_isolation") == "worktree"

    if not isolated:  # a shared checkout must be clean: the story's change is what differs from the baseline
        async def status() -> dict[str, Any]:
            code, out = await git(root, "status", "--porcelain", "--untracked-files=all", "--", ".", *_excluded(ctx))
            if code != 0:
                return {"error": out.splitlines()[0] if out else f"git exited {code}"}
            # "XY path" lines; the first came stripped (" M a" as "M a"): the path is what follows the status
            return {"dirty": [line[2:].strip() for line in out.splitlines() if line.strip()]}

        found = await _once(ctx, "clean", status)
        if found.get("error"):
            raise StepFailed(f"{root}: git status failed: {found['error']}", retryable=False)
        if found["dirty"]:
            raise StepFailed(f"the working tree has uncommitted changes ({', '.join(found['dirty'][:5])}); commit or "
                             "stash them, or run with isolation: worktree", retryable=False)

    if await _committed_before(ctx):
        return

    async def record() -> dict[str, Any]:
        return {"head": await git_ok(root, "rev-parse", "HEAD")}

    base = await _once(ctx, "baseline", record)
    workspace = root
    if isolated:
        branch = f"sprint/{key}"
        folder = root / ".stepline" / "sprint" / "worktrees" / key

        async def make(redo: bool) -> dict[str, Any]:
            if not (folder / ".git").exists():
                code, out = await git(root, "worktree", "add", "-B", branch, str(folder), base["head"])
                if code != 0:
                    first = out.splitlines()[0] if out else code
                    raise StepFailed(f"cannot make the story's worktree {folder}: {first}", retryable=False)
            return {"path": str(folder), "branch": branch}

        made = await _effect(ctx, "worktree", {"path": str(folder), "branch": branch}, make)
        workspace = Path(made["path"])
        _set(ctx, "sprint_branch", made["branch"])

    async def board() -> dict[str, Any]:  # the board as the story's checkout has it (a worktree: as committed)
        return {"statuses": read_board(_local_board(ctx, workspace)).statuses()}

    _set(ctx, "sprint_baseline", base["head"])
    _set(ctx, "sprint_board_at_baseline", (await _once(ctx, "board", board))["statuses"])
    _set(ctx, "sprint_workspace", str(workspace))
    ctx.step.choice = "recorded"
    ctx.step.summary = f"baseline {base['head'][:12]} in {workspace}"


async def _committed_before(ctx: StepContext) -> bool:
    """A story this loop has no run of, whose commit (its ``Stepline-Story`` trailer) is in the history already:
    committed work is never redone without a person saying so (``ask:reconcile:<story>:1``: ``done`` moves the
    board to done and builds nothing; ``redo`` builds it again). True when the story is done."""
    key = str(_vars(ctx)["sprint_story"])

    async def look() -> dict[str, Any]:
        sha = await find_commit(ctx.project_root, {"Stepline-Story": key})
        return {"sha": sha, "subject": await git_ok(ctx.project_root, "log", "-1", "--format=%s", sha) if sha else ""}

    found = await _once(ctx, "committed-before", look)
    if not found["sha"]:
        return False
    status = read_board(Path(str(_vars(ctx)["sprint_board"]))).statuses().get(key)
    question = (f"Story {key} is already committed ({found['sha'][:12]} {found['subject']}), but the board says "
                f"{status} and the loop has no run of it. Answer done (the board moves to done; nothing is built) or "
                "redo (build it again on top).")
    answer = await ctx.engine.human.ask(ctx, question, ["done", "redo"], _gate_key(ctx, "reconcile"))
    if not answer.strip().lower().startswith("done"):
        return False
    ctx.step.choice, ctx.step.summary = "committed-before", f"already committed as {found['sha'][:12]}"
    _set(ctx, "sprint_commit", found["sha"])
    return True


#: The story runs the loop is resuming now: the first stage each runs reconciles first (see :func:`_reconcile`).
_RESUMING: set[str] = set()


def reconcile_first(run_id: str) -> None:
    """Have the next stage of ``run_id`` compare git, the board and the journal before it does anything (the loop
    calls it right before it resumes the story's run)."""
    _RESUMING.add(run_id)


async def _reconcile(ctx: StepContext) -> bool:
    """Before a resumed story goes on (the first stage the loop's resume runs): git (the branch, the worktree, the
    story's commit found by its trailers), the board and the journal compared. What can be settled is (a worktree
    gone while its branch is kept is made again); a disagreement that cannot is a question
    (``ask:reconcile:<story>:<visit>``): ``continue`` (a person put it right, or the loop takes it as it is) or
    ``defer`` (nothing committed is reset). Journaled as ``reconcile``. False when the story is to be deferred."""
    if ctx.run.run_id not in _RESUMING:
        return True
    _RESUMING.discard(ctx.run.run_id)
    if "sprint_baseline" not in _vars(ctx):
        return True
    key, base = str(_vars(ctx)["sprint_story"]), str(_vars(ctx)["sprint_baseline"])
    root, workspace = ctx.project_root, _workspace(ctx)
    done = {sid for sid, step in ctx.run.steps.items() if step.status.value == "completed"}
    settled: list[str] = []
    problems: list[str] = []
    if _vars(ctx).get("sprint_isolation") == "worktree" and "merge" not in done and not (workspace / ".git").exists():
        branch = str(_vars(ctx).get("sprint_branch"))
        code, _ = await git(root, "rev-parse", "--verify", "-q", f"refs/heads/{branch}")
        if code == 0:
            await git(root, "worktree", "prune")
            made, out = await git(root, "worktree", "add", str(workspace), branch)
            (settled if made == 0 else problems).append(
                f"its worktree {workspace} was gone: made again from branch {branch}" if made == 0 else
                f"its worktree {workspace} is gone and cannot be made again from {branch}: {out.splitlines()[:1]}")
        else:
            problems.append(f"its worktree {workspace} and its branch {branch} are gone")
    where = workspace if (workspace / ".git").exists() else root
    head = await git_ok(where, "rev-parse", "HEAD")
    if not await is_ancestor(where, base, head):
        problems.append(f"HEAD {head[:12]} does not descend from the story's baseline {base[:12]} (the history was "
                        "rewritten while the loop was stopped)")
    found = await find_commit(where, {"Stepline-Story": key})
    if "commit" in done and found is None and "merge" not in done:
        problems.append(f"its commit {str(_vars(ctx).get('sprint_commit'))[:12]} is no longer in the history")
    if "commit" not in done and found is not None and "commit/sprint/commit" not in ctx.engine.calls.started:
        problems.append(f"the history holds a commit of it ({found[:12]}) the loop's journal does not know")
    status = read_board(Path(str(_vars(ctx)["sprint_board"]))).statuses().get(key)
    if status == "done" and "commit" not in done and found is None:
        problems.append("the board says done, but the loop has no commit of it")
    ctx.emit(EventType.CALL_RECORDED, {"key": f"{ctx.spec.id}/sprint/reconcile", "op": "sprint:reconcile",
                                       "result": {"settled": settled, "disagreements": problems}})
    if not problems:
        return True
    question = (f"Story {key}, resumed: git and the board disagree with the loop's journal: {'; '.join(problems)}. "
                "Answer continue (you put it right, or the loop takes it as it is) or defer (set the story aside; "
                "nothing committed is reset).")
    answer = await ctx.engine.human.ask(ctx, question, ["continue", "defer"], _gate_key(ctx, "reconcile"))
    if answer.strip().lower().startswith("defer"):
        ctx.step.choice, ctx.step.summary = "defer", "a person deferred it at the resume: " + "; ".join(problems)
        _set(ctx, "sprint_reason", ctx.step.summary)
        return False
    return True


def _feedback(ctx: StepContext) -> str:
    notes = _vars(ctx).get("sprint_feedback")
    return str(notes) if notes else ""


def _build_prompt(ctx: StepContext) -> str:
    key = str(_vars(ctx)["sprint_story"])
    workspace = _workspace(ctx)
    project = find_project(workspace)
    story = project.story_file(key)
    dev = _vars(ctx).get("sprint_dev") or {}
    lines = [f"Implement BMAD story `{key}` in {workspace}, unattended.", ""]
    if dev.get("era") == "skill":
        lines += [f"Use the BMAD dev skill `{dev.get('name')}` ({dev.get('path')}): follow its SKILL.md as written "
                  f"for the story `{key}`."]
    elif dev:
        lines += [f"Follow the BMAD dev-story workflow {dev.get('path')} for the story `{key}`."]
    if story is not None:
        text = story.path.read_text(encoding="utf-8", errors="replace")[:20000]
        lines += ["", f"## The story ({story.path})", "", text]
    lines += ["", "## Rules", "",
              "- Implement the story with its tests; run the project's checks before you finish.",
              "- When done, set the story file's status to `review` (its `Status:` line or front matter `status:`).",
              "- Commit your work or leave it in the working tree; stepline verifies, reviews and commits it.",
              "- Report back with finish(summary=...) on the stepline MCP server."]
    if feedback := _feedback(ctx):
        lines += ["", "## What failed last time (fix it)", "", feedback]
    return "\n".join(lines) + "\n"


async def _build(ctx: StepContext) -> None:
    if (problem := _over_budget(ctx)) and await _budget_spent(ctx, f"not built: {problem}"):
        return
    resumed = f"{ctx.spec.id}/sprint/stage-start" in ctx.engine.calls.recorded
    start = await _stage_start(ctx)
    timeout = float(_config(ctx).get("agent_timeout_seconds") or 3600)
    while True:
        if resumed and not ctx.next_invoke_replays():  # an earlier attempt's agent worked here: start clean
            await _back_to_stage_start(ctx, start)
        resumed = True
        hints: dict[str, Any] = {"cli_mode": "write", "stage": "build", "story": _vars(ctx)["sprint_story"]}
        if budget := _call_budget(ctx):
            hints[BUDGET_HINT] = budget
        try:
            outcome = await asyncio.wait_for(
                ctx.invoke("work", title=f"build story {_vars(ctx)['sprint_story']}", content=_build_prompt(ctx),
                           context={"project_root": str(_workspace(ctx))}, hints=hints),
                timeout=timeout)
        except BudgetExceeded as exc:  # the agent was stopped mid-call: journaled as stopped, with what it used
            _note_usage(ctx)
            _record_evidence(ctx, f"{ctx.spec.id}: {exc.message}", "L1")
            if not await _budget_spent(ctx, f"the agent was stopped mid-build: {exc.message}"):
                # A person let the story go on: what the agent did before it was stopped is verified as any build's.
                ctx.step.choice, ctx.step.summary = "failed", f"{exc.message}; a person let the story go on"
            return
        except (ExecutorError, TimeoutError) as exc:
            _note_usage(ctx)
            if isinstance(exc, ExecutorError) and _outside_the_work(exc):  # no build attempt is spent on it
                if await _agent_environment(ctx, exc):
                    continue
                return
            message = str(exc) or f"the agent ran past {timeout:.0f}s"  # the agent's failure is the story's
            ctx.step.choice, ctx.step.summary = "failed", f"the agent failed: {message}"
            _set(ctx, "sprint_feedback", ctx.step.summary)
            return
        break
    _note_usage(ctx)
    ctx.step.choice = "built"
    ctx.step.summary = outcome.summary or "built"


def _outside_the_work(exc: BaseException) -> bool:
    """Whether an agent's failure is not the work's: it stalled, met a permission or login prompt, a rate limit or
    quota, an unreachable endpoint, or the Ray worker running it died (an error that replays its calls)."""
    return isinstance(exc, AgentEnvironmentError) or bool(getattr(exc, "replays_calls", False))


def _agent_failure(ctx: StepContext, exc: ExecutorError, layer: str | None = None) -> int:
    """Journal an agent's failure outside the work with its kind (``worker-lost`` for a lost Ray worker) and record
    it as evidence; return its number in this stage."""
    prefix = f"{ctx.spec.id}/sprint/agent-failure/"
    number = 1 + sum(1 for k in ctx.engine.calls.recorded if k.startswith(prefix))
    kind = exc.kind if isinstance(exc, AgentEnvironmentError) else "worker-lost"
    ctx.emit(EventType.CALL_RECORDED, {"key": f"{prefix}{number}", "op": f"sprint:agent-failure/{number}",
                                       "result": {"kind": kind, "error": exc.message, "layer": layer}})
    _record_evidence(ctx, f"{ctx.spec.id}: the agent failed [{kind}]: {exc.message}", "L1")
    return number


async def _may_try_again(ctx: StepContext, exc: ExecutorError, number: int) -> bool:
    """Whether the ``number``-th failure of this stage's agents is tried again without asking (``retries.agent``
    times, each after ``agent_retry_wait_seconds`` times its number); a prompt only a person can pass never is."""
    retries = (_config(ctx).get("retries") or {}).get("agent", 2)
    if exc.retryable and number <= retries:
        await asyncio.sleep(float(_config(ctx).get("agent_retry_wait_seconds") or 0) * number)
        return True
    return False


async def _agent_environment(ctx: StepContext, exc: ExecutorError) -> bool:
    """The build's agent failed for a reason outside the work: journaled (:func:`_agent_failure`), then tried again
    (:func:`_may_try_again`) — or, past that or at a prompt only a person can pass, a person answers ``retry`` or
    ``defer`` (``ask:build-agent:<story>:<visit>:<n>``). True: try again; False: the story is deferred."""
    number = _agent_failure(ctx, exc)
    if await _may_try_again(ctx, exc, number):
        return True
    kind = exc.kind if isinstance(exc, AgentEnvironmentError) else "worker-lost"
    question = (f"Story {_vars(ctx)['sprint_story']}: the agent failed in {ctx.spec.id}, not for the work's sake "
                f"[{kind}]: {exc.message}" + (f" ({exc.hint})" if exc.hint else "") + ". Fix the cause (log the "
                "agent in, wait for the quota, check the endpoint), then answer retry; or answer defer (set the "
                "story aside).")
    answer = await ctx.engine.human.ask(ctx, question, ["retry", "defer"],
                                        f"{_gate_key(ctx, 'build-agent')}:{number}")
    if answer.strip().lower().startswith("retry"):
        return True
    ctx.step.choice, ctx.step.summary = "defer", f"the agent failed [{kind}] and a person deferred it"
    _set(ctx, "sprint_reason", f"the agent failed [{kind}]: {exc.message}; a person deferred it")
    return False


async def _changed_files(ctx: StepContext, base: str) -> list[str]:
    """Files the story changed since ``base`` (commits and working tree, untracked included), minus the board,
    stepline's folder and the story's own file."""
    workspace = _workspace(ctx)
    _, committed = await git(workspace, "diff", "--name-only", base, "--", ".", *_excluded(ctx))
    _, untracked = await git(workspace, "ls-files", "--others", "--exclude-standard", "--", ".", *_excluded(ctx))
    files = {f for f in (committed + "\n" + untracked).splitlines() if f.strip()}
    story = find_project(workspace).story_file(str(_vars(ctx)["sprint_story"]))
    if story is not None:
        files.discard(story.path.resolve().relative_to(workspace.resolve()).as_posix())
    return sorted(files)


async def _run_command(command: str, cwd: Path, timeout: float) -> dict[str, Any]:
    """Run one of the project's checks (no shell: a list of words); its exit status and output."""
    try:
        process = await asyncio.create_subprocess_exec(*shlex.split(command), cwd=cwd, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except (OSError, ValueError) as exc:  # not found, not executable, unbalanced quotes
        return {"command": command, "exit": None, "output": f"cannot run it: {exc}"}
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout=timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # the check and everything it started
        await process.wait()
        return {"command": command, "exit": None, "output": f"timed out after {timeout:.0f}s"}
    text = out.decode("utf-8", "replace")
    return {"command": command, "exit": process.returncode, "output": text[-20000:]}


async def _verify(ctx: StepContext) -> None:
    key = str(_vars(ctx)["sprint_story"])
    base = str(_vars(ctx)["sprint_baseline"])
    workspace = _workspace(ctx)
    failures: list[str] = []

    async def story_status() -> dict[str, Any]:
        story = find_project(workspace).story_file(key)
        if story is None:
            return {"ok": False, "detail": f"no story or spec file for {key}"}
        ok = (story.status or "") in _DONE_STATES
        return {"ok": ok, "detail": f"{story.path.name} says status {story.status!r}"
                + ("" if ok else " (expected review or done)")}

    async def diff() -> dict[str, Any]:
        files = await _changed_files(ctx, base)
        return {"ok": bool(files), "detail": f"{len(files)} file(s) changed: {', '.join(files[:10])}" if files
                else "no change besides the story file and the board (the agent claimed work it did not do)"}

    async def history() -> dict[str, Any]:
        head = await git_ok(workspace, "rev-parse", "HEAD")
        if not await is_ancestor(workspace, base, head):
            return {"ok": False, "detail": f"HEAD {head[:12]} does not descend from the baseline {base[:12]} "
                                           "(history was rewritten)"}
        return {"ok": True, "detail": f"HEAD {head[:12]} descends from {base[:12]}"
                + (" (working-tree change only)" if head == base else "")}

    async def board() -> dict[str, Any]:
        try:
            now = read_board(_local_board(ctx, workspace))
        except Exception as exc:  # a board the agent broke is the story's failure, said in one line
            return {"ok": False, "detail": f"the board cannot be read: {exc}"}
        before: dict[str, str] = _vars(ctx).get("sprint_board_at_baseline") or {}
        problems = []
        for entry in now.entries:
            old = before.get(entry.key)
            if old is None:
                continue
            if status_rank(entry.kind, entry.status) < status_rank(entry.kind, old):
                problems.append(f"{entry.key} went back from {old} to {entry.status}")
            elif entry.kind == "story" and entry.key != key and entry.status != old:
                problems.append(f"another story {entry.key} moved {old} -> {entry.status}")
        if now.entry(key) is None:
            problems.append(f"{key} is no longer on the board")
        return {"ok": not problems, "detail": "; ".join(problems) or "consistent"}

    checks: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
        ("story-status", story_status), ("diff", diff), ("history", history), ("board", board)]
    verify_cfg = _config(ctx).get("verify") or {}
    for index, command in enumerate(verify_cfg.get("commands") or []):
        async def run(command: str = command) -> dict[str, Any]:
            result = await _run_command(command, workspace, float(verify_cfg.get("timeout_seconds") or 600))
            how = f"exited {result['exit']}" if result["exit"] is not None else "did not run to its end"
            return {**result, "ok": result["exit"] == 0,
                    "detail": f"`{command}` {how}" + ("" if result["exit"] == 0 else
                                                      ": " + _last_lines(result["output"]))}
        checks.append((f"command-{index + 1}", run))
    for name, check in checks:
        result = await _once(ctx, f"check/{name}", check)
        if not result["ok"]:
            failures.append(f"{name}: {result['detail']}")
    ctx.step.choice = "fail" if failures else "pass"
    ctx.step.summary = "; ".join(failures) if failures else f"{len(checks)} checks passed"
    if failures:
        _set(ctx, "sprint_feedback", "\n".join(f"- {f}" for f in failures))
        _set(ctx, "sprint_reason", f"verification failed: {ctx.step.summary}")
    _record_evidence(ctx, f"{ctx.spec.id}: {ctx.step.summary}", "L1" if not failures else "invalid")


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])[:400]


def _record_evidence(ctx: StepContext, claim: str, level: str) -> None:
    import hashlib

    digest = hashlib.sha256(claim.encode("utf-8")).hexdigest()[:12]
    ctx.engine.record_evidence(ctx, {
        "id": f"sprint-{ctx.spec.id}-{digest}", "claim": claim[:500], "level": level, "source": "stepline sprint",
        "date": time.now_iso(), "valid_until": None, "congruence": "CL3", "wlnk": None,
        "carrier_ref": f"run {ctx.run.run_id} step {ctx.spec.id}", "reliability": 0.9 if level == "L1" else 0.5})


def parse_findings(text: str) -> list[dict[str, str]]:
    """The findings of a reviewer's report: lines ``patch: …``, ``defer: …``, ``escalate: …`` (a BMAD
    ``intent_gap`` or ``bad_spec`` escalates); other lines are not findings."""
    findings = []
    for line in text.splitlines():
        match = _FINDING.match(line)
        if match:
            kind = match.group(1).lower()
            kind = "escalate" if kind in ("intent_gap", "bad_spec") else kind
            findings.append({"triage": kind, "text": match.group(2).strip()})
    return findings


async def _diff_text(ctx: StepContext) -> str:
    workspace, base = _workspace(ctx), str(_vars(ctx)["sprint_baseline"])
    _, text = await git(workspace, "diff", base, "--", ".", *_excluded(ctx))
    _, untracked = await git(workspace, "ls-files", "--others", "--exclude-standard", "--", ".", *_excluded(ctx))
    for name in untracked.splitlines()[:50]:
        path = workspace / name
        if path.is_file():
            body = path.read_text(encoding="utf-8", errors="replace")[:8000]
            text += f"\n--- /dev/null\n+++ b/{name}\n" + "".join(f"+{line}\n" for line in body.splitlines())
    return text[:60000]


async def _review(ctx: StepContext) -> None:
    review_cfg = _config(ctx).get("review") or {}
    if not review_cfg.get("enabled", True):
        ctx.step.choice, ctx.step.summary = "skipped", "review disabled in config/sprint.yaml"
        return
    if (problem := _over_budget(ctx)) and await _budget_spent(ctx, f"not reviewed: {problem}"):
        return
    key = str(_vars(ctx)["sprint_story"])
    workspace = _workspace(ctx)
    story = find_project(workspace).story_file(key)
    intent = story.path.read_text(encoding="utf-8", errors="replace") if story else f"(no story file for {key})"
    diff = await _diff_text(ctx)
    layers = [ReviewLayer(**raw) for raw in _vars(ctx).get("sprint_layers") or []] or [_DEFAULT_LAYER]
    skill_root = str(Path(str((_vars(ctx).get("sprint_dev") or {}).get("path") or workspace)).parent)

    def content(layer: ReviewLayer) -> str:
        body = (layer.instruction.replace("{diff_output}", diff).replace("{verbatim_intent}", intent)
                .replace("{skill-root}", skill_root).replace("{project-root}", str(workspace)))
        if "{diff_output}" not in layer.instruction:
            body += f"\n\nDiff:\n{diff}\n"
        return (f"You are the review layer '{layer.name}' for story {key}. You see the story and the diff only; "
                "do not change any file.\n\n" + body +
                "\n\nReport with finish(summary=...): one finding per line, each starting with its triage — "
                "`patch: <what to fix>` (the builder must fix it), `defer: <real but not this story's>` or "
                "`escalate: <needs a person's decision>` — or `none` when you find nothing.\n")

    at_once = asyncio.Semaphore(ctx.engine.concurrency)  # --concurrency (on Ray: the cluster's CPUs by default)

    stopped: list[str] = []

    async def one(layer: ReviewLayer) -> tuple[ReviewLayer, str]:
        hints: dict[str, Any] = {"cli_mode": "analysis", "stage": "review", "layer": layer.id, "story": key}
        while True:
            try:
                async with at_once:  # waiters go in the order they came: invocations stay numbered in layer order
                    if budget := _call_budget(ctx):  # what is left when this layer starts (the running share it)
                        hints[BUDGET_HINT] = budget
                    outcome = await ctx.invoke("work", title=f"review {key}: {layer.name}", content=content(layer),
                                               context={"project_root": str(workspace)}, hints=hints)
            except BudgetExceeded as exc:
                stopped.append(f"{layer.id}: {exc.message}")
                return layer, ""
            except ExecutorError as exc:  # a reviewer stalled or refused is asked again, as a build's agent is
                if _outside_the_work(exc) and await _may_try_again(ctx, exc, _agent_failure(ctx, exc, layer.id)):
                    continue
                return layer, f"escalate: the {layer.name} reviewer failed: {exc}"
            return layer, outcome.summary or ""

    results = await asyncio.gather(*(one(layer) for layer in layers))  # invocations numbered in layer order
    _note_usage(ctx)
    if stopped:  # a reviewer stopped mid-call: the round is not whole; the budget decides what comes next
        for line in stopped:
            _record_evidence(ctx, f"{ctx.spec.id}: {line}", "L1")
        if await _budget_spent(ctx, "a reviewer was stopped mid-review: " + "; ".join(sorted(stopped))):
            return
    findings = [{**f, "layer": layer.id} for layer, report in results for f in parse_findings(report)]
    for finding in findings:
        _record_evidence(ctx, f"{finding['layer']} [{finding['triage']}] {finding['text']}", "L0")
    deferred = [f for f in findings if f["triage"] == "defer"]
    if deferred:
        await _append_deferred(ctx, "review", [f"[{f['layer']}] {f['text']}" for f in deferred])
    patches = [f for f in findings if f["triage"] == "patch"]
    escalations = [f for f in findings if f["triage"] == "escalate"]
    choice = "patch" if patches else "clean"
    if escalations:
        question = (f"Story {key}: the review escalates: " + "; ".join(f["text"] for f in escalations)
                    + ". Answer fix (send it back to the builder), accept (go on) or defer (set the story aside).")
        answer = (await ctx.engine.human.ask(ctx, question, ["fix", "accept", "defer"],
                                             _gate_key(ctx, "review-escalation"))).strip().lower()
        if answer.startswith("defer"):
            choice = "defer"
            _set(ctx, "sprint_reason", "a person deferred it at the review's escalation: "
                 + "; ".join(f["text"] for f in escalations))
        elif answer.startswith("fix"):
            choice = "patch"
            patches += escalations
    if choice == "patch":
        _set(ctx, "sprint_feedback", "\n".join(f"- [{f['layer']}] {f['text']}" for f in patches))
        _set(ctx, "sprint_reason", "review findings not fixed within the budget: "
             + "; ".join(f["text"] for f in patches))
    ctx.step.choice = choice
    ctx.step.summary = (f"{len(layers)} layer(s): {len(patches)} to fix, {len(deferred)} deferred, "
                        f"{len(escalations)} escalated")


def _story_title(path: Path | None, key: str) -> str:
    if path is None or not path.is_file():
        return key
    text = path.read_text(encoding="utf-8", errors="replace")
    match = re.search(r"^title:\s*['\"]?(.+?)['\"]?\s*$", text, re.MULTILINE) if text.startswith("---") else None
    heading = match or re.search(r"^#\s+(.+?)\s*$", text, re.MULTILINE)
    return heading.group(1) if heading else key


def _mark_story_done(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if text.startswith("---") and re.search(r"^status:.*$", text, re.MULTILINE):
        new = re.sub(r"^status:.*$", "status: done", text, count=1, flags=re.MULTILINE)
    else:
        new = re.sub(r"^(\s*\**Status\**\s*:\s*).*$", r"\1done", text, count=1, flags=re.MULTILINE)
    if new != text:
        path.write_text(new, encoding="utf-8")


async def _commit(ctx: StepContext) -> None:
    key, base = str(_vars(ctx)["sprint_story"]), str(_vars(ctx)["sprint_baseline"])
    workspace = _workspace(ctx)
    story = find_project(workspace).story_file(key)
    message = f"story {key}: {_story_title(story.path if story else None, key)}"
    trailers = {"Stepline-Run": ctx.run.run_id, "Stepline-Story": key}

    async def commit(redo: bool) -> dict[str, Any]:
        if redo and (sha := await find_commit(workspace, trailers)):
            return {"sha": sha, "redo": "found in the history"}
        if story is not None:
            _mark_story_done(story.path)
        # One commit per story on the baseline: the agent's commits are squashed into it (still in the reflog).
        await git_ok(workspace, "reset", "-q", "--soft", base)
        await git_ok(workspace, "add", "-A", "--", ".")
        await git(workspace, "reset", "-q", base, "--", *_own_paths(ctx))  # the board and .stepline stay out
        await git_ok(workspace, "commit", "-q", "--no-verify", "-m", with_trailers(message, trailers))
        return {"sha": await git_ok(workspace, "rev-parse", "HEAD"), "message": message}

    result = await _effect(ctx, "commit", {"baseline": base, "message": message}, commit)
    _set(ctx, "sprint_commit", result["sha"])
    ctx.step.choice = "committed"
    ctx.step.summary = f"{result['sha'][:12]} {message}"


async def _merge(ctx: StepContext) -> None:
    if _vars(ctx).get("sprint_parallel"):
        await _merge_in_turn(ctx)
        return
    root, branch = ctx.project_root, str(_vars(ctx)["sprint_branch"])
    sha = str(_vars(ctx)["sprint_commit"])

    async def merge(redo: bool) -> dict[str, Any]:
        if not await is_ancestor(root, sha, "HEAD"):
            code, out = await git(root, "merge", "--no-edit", "-q", branch)
            if code != 0:
                await git(root, "merge", "--abort")
                raise StepFailed(f"cannot merge {branch} into the main checkout: {out.splitlines()[0] if out else code}"
                                 f"; the branch is kept, merge it by hand", retryable=False)
        head = await git_ok(root, "rev-parse", "HEAD")
        await git(root, "worktree", "remove", "--force", str(_workspace(ctx)))
        await git(root, "branch", "-d", branch)  # merged: only a branch git knows is merged is deleted
        return {"head": head}

    result = await _effect(ctx, "merge", {"branch": branch, "commit": sha}, merge)
    ctx.step.choice = "merged"
    ctx.step.summary = f"{branch} merged, HEAD {result['head'][:12]}"


async def _merge_in_turn(ctx: StepContext) -> None:
    """A parallel loop's merge: in its turn (one at a time, in sprint order among the stories in flight), the story's
    commit is rebased onto the integration branch as it is now, the verify commands run again on that result, and
    only then does the branch move (fast-forward). A conflict or a failing check lands nothing: the story is built
    again on the new base (``rebuild``), the reason in its record, a conflicting attempt kept on
    ``refs/stepline/preserve/…``; it keeps its place in the merge order."""
    from stepline.sprint._parallel import merge_queue

    root, workspace = ctx.project_root, _workspace(ctx)
    key, branch = str(_vars(ctx)["sprint_story"]), str(_vars(ctx)["sprint_branch"])
    base = str(_vars(ctx)["sprint_baseline"])
    trailers = {"Stepline-Run": ctx.run.run_id, "Stepline-Story": key}

    async def land() -> dict[str, Any]:
        await git(root, "worktree", "remove", "--force", str(workspace))
        await git(root, "branch", "-d", branch)
        return {"head": await git_ok(root, "rev-parse", "HEAD")}

    async def merge(redo: bool) -> dict[str, Any]:
        if redo and (landed := await find_commit(root, trailers)):  # it landed before the crash
            return {**await land(), "redo": f"found in the history as {landed[:12]}"}
        await git(workspace, "rebase", "--abort")  # a rebase the crash cut short (none: git says so, harmless)
        onto = await git_ok(root, "rev-parse", "HEAD")
        code, out = await git(workspace, "-c", "user.name=stepline", "-c", "user.email=stepline@localhost",
                              "rebase", "-q", "--autostash", onto)
        if code != 0:
            await git(workspace, "rebase", "--abort")
            kept = f"refs/stepline/preserve/{key}/{ctx.spec.id}/1"
            await git_ok(workspace, "update-ref", kept, "HEAD")
            await git_ok(workspace, "reset", "-q", "--hard", onto)
            await git(workspace, "clean", "-q", "-fd", "--", ".", *_excluded(ctx))
            first = next((line for line in out.splitlines() if "CONFLICT" in line), out.splitlines()[0] if out else "")
            return {"rebuild": f"the change conflicts with the integration branch at {onto[:12]} ({first.strip()}); "
                               f"the attempt is kept on {kept}", "onto": onto}
        checks: list[dict[str, Any]] = []
        if onto != base:  # the branch moved: the merged result is verified again (else verify-final did)
            verify_cfg = _config(ctx).get("verify") or {}
            for command in verify_cfg.get("commands") or []:
                checks.append(await _run_command(command, workspace, float(verify_cfg.get("timeout_seconds") or 600)))
        failed = [c for c in checks if c["exit"] != 0]
        if failed:
            return {"rebuild": "on the integration branch at " + onto[:12] + ", " + "; ".join(
                f"`{c['command']}` exited {c['exit']}: {_last_lines(c['output'])}" for c in failed), "onto": onto,
                "checks": checks}
        code, out = await git(root, "merge", "--ff-only", "-q", branch)
        if code != 0:
            raise StepFailed(f"cannot move the integration branch to {branch}: {out.splitlines()[0] if out else code}"
                             "; the branch is kept, merge it by hand", retryable=False)
        return {**await land(), "onto": onto, "checks": checks}

    queue = merge_queue(root)
    async with queue.turn(key):
        result = await _effect(ctx, "merge", {"branch": branch, "commit": str(_vars(ctx)["sprint_commit"])}, merge)
        if "rebuild" not in result:
            await queue.left(key)  # landed: the later stories' merges need not wait for its closeout
    if "rebuild" in result:
        ctx.step.choice, ctx.step.summary = "rebuild", result["rebuild"]
        _set(ctx, "sprint_baseline", result["onto"])
        _set(ctx, "sprint_feedback", f"- the merge onto the integration branch failed: {result['rebuild']}")
        _set(ctx, "sprint_reason", f"not merged: {result['rebuild']}")
        _record_evidence(ctx, f"{ctx.spec.id}: {result['rebuild']}", "invalid")
        return
    ctx.step.choice = "merged"
    ctx.step.summary = (f"{branch}: {result['redo']}" if "redo" in result else f"{branch} rebased onto "
                        f"{result['onto'][:12]}, {len(result['checks'])} check(s) passed again") + \
        f", HEAD {result['head'][:12]}"


async def _advance(ctx: StepContext) -> None:
    key = str(_vars(ctx)["sprint_story"])
    board_path = Path(str(_vars(ctx)["sprint_board"]))
    lock = ctx.project_root / ".stepline" / "sprint" / "board.lock"

    async def advance(redo: bool) -> dict[str, Any]:
        changed = set_status(board_path, key, "done", lock_path=lock)
        board = read_board(board_path)
        entry = board.entry(key)
        epic = f"epic-{entry.epic}" if entry is not None and entry.epic is not None else None
        if epic and board.entry(epic) is not None:
            mine = [s for s in board.stories if s.epic == entry.epic]  # type: ignore[union-attr]
            set_status(board_path, epic, "done" if all(s.status == "done" for s in mine) else "in-progress",
                       lock_path=lock)
        return {"changed": changed}

    await _effect(ctx, "advance", {"key": key, "status": "done"}, advance)
    ctx.step.choice = "done"
    ctx.step.summary = f"{key}: done on the board"


async def _closeout(ctx: StepContext) -> None:
    """After the story is done: push (the integration branch, or the story's commit to ``sprint/<story>``) to the
    configured remote, then the configured command (``{story}``, ``{commit}``, ``{branch}`` filled in), each try's
    output and exit code journaled and kept as evidence; a failed try is tried again ``retries`` times, then a
    person answers ``retry`` or ``skip`` (``ask:closeout:<story>:<n>``): never dropped without a word."""
    config = _config(ctx).get("closeout") or {}
    root, key = ctx.project_root, str(_vars(ctx)["sprint_story"])
    sha = str(_vars(ctx).get("sprint_commit") or "")
    branch = await git_ok(root, "rev-parse", "--abbrev-ref", "HEAD")
    timeout = float(config.get("timeout_seconds") or 600)
    number = 0
    while True:
        number += 1

        async def attempt(redo: bool) -> dict[str, Any]:
            steps: list[dict[str, Any]] = []
            if remote := config.get("remote"):
                target = f"{sha}:refs/heads/sprint/{key}" if config.get("push") == "story" else f"HEAD:{branch}"
                code, out = await git(root, "push", "-q", str(remote), target)
                steps.append({"command": f"git push {remote} {target}", "exit": code, "output": out[-20000:]})
            if (command := config.get("command")) and all(s["exit"] == 0 for s in steps):
                filled = command.replace("{story}", key).replace("{commit}", sha).replace("{branch}", branch)
                steps.append(await _run_command(filled, root, timeout))
            return {"steps": steps, "ok": all(s["exit"] == 0 for s in steps)}

        result = await _effect(ctx, f"closeout/{number}", {"commit": sha, "branch": branch}, attempt)
        for done in result["steps"]:
            _record_evidence(ctx, f"closeout {key} try {number}: `{done['command']}` exited {done['exit']}: "
                             f"{_last_lines(done['output'])}", "L1" if done["exit"] == 0 else "invalid")
        if result["ok"]:
            ctx.step.choice = "closed-out"
            ctx.step.summary = "; ".join(f"`{s['command']}` exited 0" for s in result["steps"]) or "nothing to do"
            return
        failed = next(s for s in result["steps"] if s["exit"] != 0)
        why = f"`{failed['command']}` exited {failed['exit']}: {_last_lines(failed['output'])}"
        if number <= int(config.get("retries", 1)):
            await asyncio.sleep(float(config.get("retry_wait_seconds") or 0) * number)
            continue
        question = (f"Story {key} is committed, but its closeout failed: {why}. Fix the cause, then answer retry; "
                    "or answer skip (the story stays done; its closeout is not done).")
        answer = await ctx.engine.human.ask(ctx, question, ["retry", "skip"], f"{_gate_key(ctx, 'closeout')}:{number}")
        if not answer.strip().lower().startswith("retry"):
            ctx.step.choice, ctx.step.summary = "skipped", f"closeout skipped by a person after: {why}"
            return


async def _append_deferred(ctx: StepContext, name: str, lines: list[str]) -> None:
    key = str(_vars(ctx)["sprint_story"])
    target = Path(str(_vars(ctx)["sprint_board"])).parent / "deferred-work.md"
    marker = f"<!-- stepline {ctx.run.run_id} {ctx.spec.id} {name} -->"
    block = (f"\n## {key} ({time.now_iso()[:10]}, {name})\n{marker}\n\n" + "\n".join(f"- {line}" for line in lines)
             + "\n")

    async def append(redo: bool) -> dict[str, Any]:
        text = target.read_text(encoding="utf-8") if target.is_file() else "# Deferred work\n"
        if marker not in text:  # a redo after a crash finds its block already there
            from stepline.store import atomic_write_bytes

            atomic_write_bytes(target, (text.rstrip("\n") + "\n" + block).encode("utf-8"))
        return {"path": str(target)}

    await _effect(ctx, f"deferred/{name}", {"path": str(target)}, append)


async def _defer(ctx: StepContext) -> None:
    key, base = str(_vars(ctx)["sprint_story"]), str(_vars(ctx).get("sprint_baseline") or "")
    reason = str(_vars(ctx).get("sprint_reason") or "it did not converge within its budget")
    for checkpoint in CHECKPOINTS:  # a rejected checkpoint completes without its driver, so without a choice
        step = ctx.run.steps.get(checkpoint)
        if step is not None and step.status.value == "completed" and step.choice != "approved":
            reason = f"a person rejected the {checkpoint}: {step.summary}"
    workspace = _workspace(ctx)
    kept: str
    if _vars(ctx).get("sprint_isolation") == "worktree":
        kept = f"branch {_vars(ctx).get('sprint_branch')} (worktree {workspace})"
    else:
        patch = ctx.project_root / ".stepline" / "sprint" / "deferred" / f"{key}-{ctx.run.run_id}.patch"

        async def put_back(redo: bool) -> dict[str, Any]:
            from stepline.store import atomic_write_bytes

            if not patch.is_file():
                patch.parent.mkdir(parents=True, exist_ok=True)
                await git(workspace, "add", "-A", "-N", "--", ".")
                await git(workspace, "reset", "-q", "--", *_own_paths(ctx))
                _, text = await git(workspace, "diff", base, "--", ".", *_excluded(ctx))
                atomic_write_bytes(patch, (text + "\n").encode("utf-8"))
            if not await is_ancestor(workspace, base, "HEAD"):  # the history was rewritten: nothing of it is reset
                return {"patch": str(patch), "kept": "the checkout as it is (it no longer holds the baseline)"}
            await _put_back(ctx, workspace, base, base, patch.with_suffix(".ledgers.json"))
            return {"patch": str(patch)}

        await _effect(ctx, "put-back", {"baseline": base, "patch": str(patch)}, put_back)
        kept = f"patch {patch.relative_to(ctx.project_root)}"
    await _append_deferred(ctx, "deferred", [f"deferred by the sprint loop: {reason}", f"run: {ctx.run.run_id}",
                                             f"attempt kept as {kept}"])
    ctx.step.choice = "deferred"
    ctx.step.summary = f"{key} deferred: {reason}"


async def _checkpoint(ctx: StepContext) -> None:
    """A person approved the checkpoint (the engine's gate let the stage run); a rejection never gets here."""
    ctx.step.choice = "approved"
    ctx.step.summary = f"{ctx.spec.id} approved"


_STAGE_DRIVERS: dict[str, Callable[[StepContext], Awaitable[None]]] = {
    "baseline": _baseline, "build": _build, "verify": _verify, "verify-final": _verify, "review": _review,
    "commit": _commit, "merge": _merge, "advance": _advance, "closeout": _closeout, "defer": _defer,
    "checkpoint-plan": _checkpoint, "checkpoint-commit": _checkpoint,
}


async def run_sprint_stage(ctx: StepContext) -> None:
    """Run one stage of a story (the step's id names it: ``build@2`` is the second build); the first stage of a story
    the loop resumes is reconciled first."""
    if ctx.spec.id == "defer" or await _reconcile(ctx):
        await _STAGE_DRIVERS[ctx.spec.id.split("@", 1)[0]](ctx)
    _set(ctx, "sprint_stage", ctx.spec.id)


register_driver(FORMAT, run_sprint_stage, _flow)
