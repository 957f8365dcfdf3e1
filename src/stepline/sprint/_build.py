"""The ``build`` stage: the dev workflow found on disk, done by the executor in a fresh session (one ``work``
request), told what failed before when it is a retry.

An agent that fails for a reason outside the work (a stall, a permission or login prompt, a rate limit, an
unreachable endpoint, a lost Ray worker) spends no build attempt: the failure is journaled with its kind, the
checkout is put back to the stage's start and the agent is tried again (``retries.agent`` times), then a person is
asked (``ask:build-agent:<story>:<visit>:<n>``). An agent stopped mid-call for a budget is the budget's to settle.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from stepline.errors import AgentEnvironmentError, BudgetExceeded, ExecutorError
from stepline.executors import BUDGET_HINT
from stepline.model import EventType
from stepline.sprint._budgets import budget_spent, call_budget, note_usage, over_budget
from stepline.sprint._project import find_project
from stepline.sprint._restore import back_to_stage_start, stage_start
from stepline.sprint._stage import gate_key, record_evidence, set_var, sprint_config, story_key, story_vars, workspace

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["agent_failure", "build", "may_try_again", "outside_the_work"]


def _build_prompt(ctx: StepContext) -> str:
    key = story_key(ctx)
    checkout = workspace(ctx)
    project = find_project(checkout)
    story = project.story_file(key)
    dev = story_vars(ctx).get("sprint_dev") or {}
    lines = [f"Implement BMAD story `{key}` in {checkout}, unattended.", ""]
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
    feedback = str(story_vars(ctx).get("sprint_feedback") or "")
    if feedback:
        lines += ["", "## What failed last time (fix it)", "", feedback]
    if earlier := [line for line in story_vars(ctx).get("sprint_findings") or [] if line not in feedback]:
        lines += ["", "## Review findings of earlier rounds (fix them, and keep them fixed)", "",
                  *(f"- {line}" for line in earlier)]
    return "\n".join(lines) + "\n"


async def build(ctx: StepContext) -> None:
    if (problem := over_budget(ctx)) and await budget_spent(ctx, f"not built: {problem}"):
        return
    resumed = f"{ctx.spec.id}/sprint/stage-start" in ctx.engine.calls.recorded
    start = await stage_start(ctx)
    timeout = float(sprint_config(ctx).get("agent_timeout_seconds") or 3600)
    while True:
        if resumed and not ctx.next_invoke_replays():  # an earlier attempt's agent worked here: start clean
            await back_to_stage_start(ctx, start)
        resumed = True
        hints: dict[str, Any] = {"cli_mode": "write", "stage": "build", "story": story_key(ctx)}
        if budget := call_budget(ctx):
            hints[BUDGET_HINT] = budget
        try:
            outcome = await asyncio.wait_for(
                ctx.invoke("work", title=f"build story {story_key(ctx)}", content=_build_prompt(ctx),
                           context={"project_root": str(workspace(ctx))}, hints=hints),
                timeout=timeout)
        except BudgetExceeded as exc:  # the agent was stopped mid-call: journaled as stopped, with what it used
            note_usage(ctx)
            record_evidence(ctx, f"{ctx.spec.id}: {exc.message}", "L1")
            if not await budget_spent(ctx, f"the agent was stopped mid-build: {exc.message}"):
                # A person let the story go on: what the agent did before it was stopped is verified as any build's.
                ctx.step.choice, ctx.step.summary = "failed", f"{exc.message}; a person let the story go on"
            return
        except (ExecutorError, TimeoutError) as exc:
            note_usage(ctx)
            if isinstance(exc, ExecutorError) and outside_the_work(exc):  # no build attempt is spent on it
                if await _agent_environment(ctx, exc):
                    continue
                return
            message = str(exc) or f"the agent ran past {timeout:.0f}s"  # the agent's failure is the story's
            ctx.step.choice, ctx.step.summary = "failed", f"the agent failed: {message}"
            set_var(ctx, "sprint_feedback", ctx.step.summary)
            _note_failure(ctx, message)
            return
        break
    note_usage(ctx)
    _note_failure(ctx, None)
    ctx.step.choice = "built"
    ctx.step.summary = outcome.summary or "built"


def _note_failure(ctx: StepContext, message: str | None) -> None:
    """Keep how the story's agent failed last, said without the story's own names (``sprint_agent_failure``; None
    once a build succeeds): the loop stops when stories in a row fail the same way."""
    same = None
    if message is not None:
        same = " ".join(re.sub(r"@\d+|\brun-[\w-]+", "", message.replace(story_key(ctx), "<story>")).split())
        same = same if len(same) <= 400 else f"{same[:200]} … {same[-200:]}"  # a traceback ends with its error
    set_var(ctx, "sprint_agent_failure", same)


def outside_the_work(exc: BaseException) -> bool:
    """Whether an agent's failure is not the work's: it stalled, met a permission or login prompt, a rate limit or
    quota, an unreachable endpoint, or the Ray worker running it died (an error that replays its calls)."""
    return isinstance(exc, AgentEnvironmentError) or bool(getattr(exc, "replays_calls", False))


def agent_failure(ctx: StepContext, exc: ExecutorError, layer: str | None = None) -> int:
    """Journal an agent's failure outside the work with its kind (``worker-lost`` for a lost Ray worker) and record
    it as evidence; return its number in this stage."""
    prefix = f"{ctx.spec.id}/sprint/agent-failure/"
    number = 1 + sum(1 for k in ctx.engine.calls.recorded if k.startswith(prefix))
    kind = exc.kind if isinstance(exc, AgentEnvironmentError) else "worker-lost"
    ctx.emit(EventType.CALL_RECORDED, {"key": f"{prefix}{number}", "op": f"sprint:agent-failure/{number}",
                                       "result": {"kind": kind, "error": exc.message, "layer": layer}})
    record_evidence(ctx, f"{ctx.spec.id}: the agent failed [{kind}]: {exc.message}", "L1")
    return number


async def may_try_again(ctx: StepContext, exc: ExecutorError, number: int) -> bool:
    """Whether the ``number``-th failure of this stage's agents is tried again without asking (``retries.agent``
    times, each after ``agent_retry_wait_seconds`` times its number); a prompt only a person can pass never is."""
    retries = (sprint_config(ctx).get("retries") or {}).get("agent", 2)
    if exc.retryable and number <= retries:
        await asyncio.sleep(float(sprint_config(ctx).get("agent_retry_wait_seconds") or 0) * number)
        return True
    return False


async def _agent_environment(ctx: StepContext, exc: ExecutorError) -> bool:
    """The build's agent failed for a reason outside the work: journaled (:func:`agent_failure`), then tried again
    (:func:`may_try_again`) — or, past that or at a prompt only a person can pass, a person answers ``retry`` or
    ``defer`` (``ask:build-agent:<story>:<visit>:<n>``). True: try again; False: the story is deferred."""
    number = agent_failure(ctx, exc)
    if await may_try_again(ctx, exc, number):
        return True
    kind = exc.kind if isinstance(exc, AgentEnvironmentError) else "worker-lost"
    question = (f"Story {story_key(ctx)}: the agent failed in {ctx.spec.id}, not for the work's sake "
                f"[{kind}]: {exc.message}" + (f" ({exc.hint})" if exc.hint else "") + ". Fix the cause (log the "
                "agent in, wait for the quota, check the endpoint), then answer retry; or answer defer (set the "
                "story aside).")
    _note_failure(ctx, f"[{kind}] {exc.message}")
    answer = await ctx.engine.human.ask(ctx, question, ["retry", "defer"], f"{gate_key(ctx, 'build-agent')}:{number}")
    if answer.strip().lower().startswith("retry"):
        return True
    ctx.step.choice, ctx.step.summary = "defer", f"the agent failed [{kind}] and a person deferred it"
    set_var(ctx, "sprint_reason", f"the agent failed [{kind}]: {exc.message}; a person deferred it")
    return False
