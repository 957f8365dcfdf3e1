"""The ``review`` stage: the review layers, in parallel, each a separate executor call in analysis mode that sees
the story and the diff only. Findings are triaged ``patch`` (back to build), ``defer`` (into deferred-work.md) or
``escalate`` (a question a person answers with ``stepline answer``); each finding is recorded as evidence.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline._placeholders import PROJECT_ROOT, Kind, find, substitute
from stepline.errors import BudgetExceeded, ExecutorError
from stepline.executors import BUDGET_HINT
from stepline.sprint._budgets import budget_spent, call_budget, note_usage, over_budget
from stepline.sprint._build import agent_failure, may_try_again, outside_the_work
from stepline.sprint._defer import append_deferred
from stepline.sprint._project import ReviewLayer, find_project
from stepline.sprint._stage import (
    excluded,
    gate_key,
    once,
    record_evidence,
    set_var,
    sprint_config,
    story_key,
    story_vars,
    workspace,
)
from stepline.tools import git

if TYPE_CHECKING:
    from stepline.engine import StepContext

__all__ = ["parse_findings", "review"]

_DEFAULT_LAYER = ReviewLayer(
    id="adversarial", name="Adversarial Reviewer",
    instruction="Review this change against its story as a skeptical senior engineer. Look for what is wrong "
                "and what is missing: acceptance criteria not met, untested paths, edge cases, broken behaviour."
                "\n\nStory:\n{verbatim_intent}\n\nDiff:\n{diff_output}\n")
_FINDING = re.compile(r"^\s*(?:[-*]\s*)?\[?(patch|defer|escalate|intent_gap|bad_spec)\]?\s*[:\-–]\s*(.+)$",
                      re.IGNORECASE)


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
    checkout, base = workspace(ctx), str(story_vars(ctx)["sprint_baseline"])
    _, text = await git(checkout, "diff", base, "--", ".", *excluded(ctx))
    _, untracked = await git(checkout, "ls-files", "--others", "--exclude-standard", "--", ".", *excluded(ctx))
    for name in untracked.splitlines()[:50]:
        path = checkout / name
        if path.is_file():
            body = path.read_text(encoding="utf-8", errors="replace")[:8000]
            text += f"\n--- /dev/null\n+++ b/{name}\n" + "".join(f"+{line}\n" for line in body.splitlines())
    return text[:60000]


async def review(ctx: StepContext) -> None:
    review_cfg = sprint_config(ctx).get("review") or {}
    if not review_cfg.get("enabled", True):
        ctx.step.choice, ctx.step.summary = "skipped", "review disabled in config/sprint.yaml"
        return
    if (problem := over_budget(ctx)) and await budget_spent(ctx, f"not reviewed: {problem}"):
        return
    key = story_key(ctx)
    checkout = workspace(ctx)
    story = find_project(checkout).story_file(key)
    intent = story.path.read_text(encoding="utf-8", errors="replace") if story else f"(no story file for {key})"
    diff = await _diff_text(ctx)
    layers = [ReviewLayer(**raw) for raw in story_vars(ctx).get("sprint_layers") or []] or [_DEFAULT_LAYER]
    skill_root = str(Path(str((story_vars(ctx).get("sprint_dev") or {}).get("path") or checkout)).parent)

    def content(layer: ReviewLayer) -> str:
        body = substitute(layer.instruction, {"diff_output": diff, "verbatim_intent": intent, "skill-root": skill_root,
                                              PROJECT_ROOT: str(checkout)}, kinds={Kind.VAR})
        if not any(p.name == "diff_output" for p in find(layer.instruction, {Kind.VAR})):
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
                    if budget := call_budget(ctx):  # what is left when this layer starts (the running share it)
                        hints[BUDGET_HINT] = budget
                    outcome = await ctx.invoke("work", title=f"review {key}: {layer.name}", content=content(layer),
                                               context={"project_root": str(checkout)}, hints=hints)
            except BudgetExceeded as exc:
                stopped.append(f"{layer.id}: {exc.message}")
                return layer, ""
            except ExecutorError as exc:  # a reviewer stalled or refused is asked again, as a build's agent is
                if outside_the_work(exc) and await may_try_again(ctx, exc, agent_failure(ctx, exc, layer.id)):
                    continue
                return layer, f"escalate: the {layer.name} reviewer failed: {exc}"
            return layer, outcome.summary or ""

    async def round_() -> dict[str, Any]:
        done = await asyncio.gather(*(one(layer) for layer in layers))  # invocations numbered in layer order
        return {"reports": [[layer.id, report] for layer, report in done], "stopped": stopped}

    # The round's reports, journaled once: a resumed round whose escalation waits for a person asks no reviewer
    # again (a reviewer that crashed would answer differently, and the story would go on unanswered).
    reviewed = await once(ctx, "reports", round_)
    by_id = {layer.id: layer for layer in layers}
    results = [(by_id[layer_id], report) for layer_id, report in reviewed["reports"]]
    stopped[:] = reviewed["stopped"]
    note_usage(ctx)
    if stopped:  # a reviewer stopped mid-call: the round is not whole; the budget decides what comes next
        for line in stopped:
            record_evidence(ctx, f"{ctx.spec.id}: {line}", "L1")
        if await budget_spent(ctx, "a reviewer was stopped mid-review: " + "; ".join(sorted(stopped))):
            return
    findings = [{**f, "layer": layer.id} for layer, report in results for f in parse_findings(report)]
    for finding in findings:
        record_evidence(ctx, f"{finding['layer']} [{finding['triage']}] {finding['text']}", "L0")
    deferred = [f for f in findings if f["triage"] == "defer"]
    if deferred:
        await append_deferred(ctx, "review", [f"[{f['layer']}] {f['text']}" for f in deferred])
    patches = [f for f in findings if f["triage"] == "patch"]
    escalations = [f for f in findings if f["triage"] == "escalate"]
    choice = "patch" if patches else "clean"
    if escalations:
        question = (f"Story {key}: the review escalates: " + "; ".join(f["text"] for f in escalations)
                    + ". Answer fix (send it back to the builder), accept (go on) or defer (set the story aside).")
        answer = (await ctx.engine.human.ask(ctx, question, ["fix", "accept", "defer"],
                                             gate_key(ctx, "review-escalation"))).strip().lower()
        if answer.startswith("defer"):
            choice = "defer"
            set_var(ctx, "sprint_reason", "a person deferred it at the review's escalation: "
                    + "; ".join(f["text"] for f in escalations))
        elif answer.startswith("fix"):
            choice = "patch"
            patches += escalations
    if choice == "patch":
        said = [f"[{f['layer']}] {f['text']}" for f in patches]
        set_var(ctx, "sprint_feedback", "\n".join(f"- {line}" for line in said))
        # Every build after this one is told them (a merge rebuild's feedback is the conflict's, say).
        earlier: list[str] = list(story_vars(ctx).get("sprint_findings") or [])
        set_var(ctx, "sprint_findings", earlier + [line for line in said if line not in earlier])
        set_var(ctx, "sprint_reason", "review findings not fixed within the budget: "
                + "; ".join(f["text"] for f in patches))
    ctx.step.choice = choice
    ctx.step.summary = (f"{len(layers)} layer(s): {len(patches)} to fix, {len(deferred)} deferred, "
                        f"{len(escalations)} escalated")
