"""The ``closeout`` stage (``closeout:`` in config/sprint.yaml): after the story is done, push (the integration
branch, or the story's commit to ``sprint/<story>``) to the configured remote, then the configured command
(``{story}``, ``{commit}``, ``{branch}`` filled in), each try's output and exit code journaled and kept as evidence.
A failed try is tried again ``retries`` times, then a person answers ``retry`` or ``skip``
(``ask:closeout:<story>:<n>``): never dropped without a word.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from stepline._placeholders import Kind, substitute
from stepline.sprint._stage import (
    effect,
    gate_key,
    last_lines,
    record_evidence,
    run_command,
    sprint_config,
    story_key,
    story_vars,
)
from stepline.tools import git, git_ok

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["closeout"]


async def closeout(ctx: StepContext) -> None:
    config = sprint_config(ctx).get("closeout") or {}
    root, key = ctx.project_root, story_key(ctx)
    sha = str(story_vars(ctx).get("sprint_commit") or "")
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
                filled = substitute(command, {"story": key, "commit": sha, "branch": branch}, kinds={Kind.VAR})
                steps.append(await run_command(filled, root, timeout))
            return {"steps": steps, "ok": all(s["exit"] == 0 for s in steps)}

        result = await effect(ctx, f"closeout/{number}", {"commit": sha, "branch": branch}, attempt)
        for done in result["steps"]:
            record_evidence(ctx, f"closeout {key} try {number}: `{done['command']}` exited {done['exit']}: "
                            f"{last_lines(done['output'])}", "L1" if done["exit"] == 0 else "invalid")
        if result["ok"]:
            ctx.step.choice = "closed-out"
            ctx.step.summary = "; ".join(f"`{s['command']}` exited 0" for s in result["steps"]) or "nothing to do"
            return
        failed = next(s for s in result["steps"] if s["exit"] != 0)
        why = f"`{failed['command']}` exited {failed['exit']}: {last_lines(failed['output'])}"
        if number <= int(config.get("retries", 1)):
            await asyncio.sleep(float(config.get("retry_wait_seconds") or 0) * number)
            continue
        question = (f"Story {key} is committed, but its closeout failed: {why}. Fix the cause, then answer retry; "
                    "or answer skip (the story stays done; its closeout is not done).")
        answer = await ctx.engine.human.ask(ctx, question, ["retry", "skip"], f"{gate_key(ctx, 'closeout')}:{number}")
        if not answer.strip().lower().startswith("retry"):
            ctx.step.choice, ctx.step.summary = "skipped", f"closeout skipped by a person after: {why}"
            return
