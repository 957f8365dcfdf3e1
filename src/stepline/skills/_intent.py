"""A sections skill's intent (Create, Update, Validate) and the offers to resume work in progress.

* **Intent**: a pre-resolved intent (``--mode``, a shim, ``--var intent=…``) is used as given; else when the skill's
  output folder holds no earlier document the first mode (Create) is chosen by the runtime; else the executor (or
  the person, in normal mode) picks a mode, and documents in progress (frontmatter ``status`` not final) are offered
  to resume. An intent another skill of the run detected (one that handed over to this one) is not this one's.
* **Resume offer**: work in progress found when the skill starts (a document whose ``status`` is not final, a
  step-file output whose ``stepsCompleted`` shows steps done) is offered: the person chooses resume or start over;
  unattended the runtime resumes (the most recent) and journals why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepline.engine import StepContext
from stepline.errors import ReaderError, StepFailed
from stepline.formats import read_frontmatter, read_text
from stepline.skills._host import (
    base_context,
    follow_here,
    move_on,
    render,
    scripts_of,
    set_var,
    skill_of,
    standing,
    step_points,
    turn_of,
)
from stepline.skills._resume import InProgress, output_mentions, steps_in_progress
from stepline.skills._skill import SkillDoc, scripts_in
from stepline.stepchain import Option, Route, choose, record, recorded

__all__ = ["first_step_file", "intent_step", "next_section", "resumed_step_files"]

_FINAL = {"final", "done", "complete", "completed", "approved"}


def _outputs_exist(ctx: StepContext) -> tuple[bool, list[str]]:
    """Whether the skill's output folders hold earlier documents, and the ones still in progress."""
    skill = skill_of(ctx)
    block = skill["customization"].get(skill.get("block") or "workflow") or {}
    folders = [Path(render(ctx, str(v))) for k, v in block.items()
               if isinstance(v, str) and ("output_path" in k or k.endswith(("output_folder", "output_dir")))]
    found, in_progress = False, []
    for folder in folders:
        folder = folder if folder.is_absolute() else ctx.project_root / folder
        for document in sorted(folder.rglob("*.md")) if folder.is_dir() else []:
            found = True
            try:
                status = read_frontmatter(read_text(document), path=str(document)).data.get("status")
            except ReaderError:  # a document this reader cannot read is not offered to resume
                status = None
            if status is not None and str(status).lower() not in _FINAL:
                in_progress.append(str(document))
    return found or not folders, in_progress


async def intent_step(ctx: StepContext) -> None:
    modes: list[dict[str, Any]] = ctx.spec.meta["modes"]
    names = [m["name"] for m in modes]
    skill = str(ctx.spec.meta["skill"])
    mine = (ctx.variables.get("skill_intents") or {}).get(skill)
    # an intent another skill of the run detected is not this one's (a skill handed over to detects its own)
    given = str(mine or ("" if ctx.variables.get("intent_skill") not in (None, skill) else
                         ctx.variables.get("intent") or "")).strip().lower()
    chosen: dict[str, Any] | None = None
    reason, by = "", "runtime"
    if given:
        chosen = next((m for m in modes if m["name"].lower() == given), None)
        if chosen is None:
            raise StepFailed(f"intent {given!r} is not one of this skill's modes ({', '.join(names)})",
                             retryable=False, hint=f"use --mode {names[0].lower()}")
        reason = f"intent {given!r} given (pre-resolved)"
        if chosen is _resuming_mode(modes) and not mine:  # Create given (--mode, a shim): its resume offer stands
            resumed = await _resume_document(ctx)
            if resumed is not None:
                reason, by = f"{reason}; {resumed[0]}", resumed[1]
    else:
        earlier, in_progress = _outputs_exist(ctx)
        if not earlier:
            chosen = modes[0]
            reason = f"no earlier document in the skill's output folder: {modes[0]['name']}"
        else:
            resumed = await _resume_document(ctx, in_progress)
            if resumed is not None:
                reason, by = resumed
                chosen = _resuming_mode(modes)
            else:
                chosen, answer = await _ask_intent(ctx, modes)
                reason = f"chosen: {answer!r}"
                by = "executor" if ctx.run.mode == "yolo" else "person"
    set_var(ctx, "intent", chosen["name"].lower())
    set_var(ctx, "intent_skill", skill)
    set_var(ctx, "skill_intents", {**(ctx.variables.get("skill_intents") or {}), skill: chosen["name"].lower()})
    record(ctx, "intent", "intent", {"modes": names}, {"intent": chosen["name"], "reason": reason, "by": by})
    ctx.step.summary = f"intent {chosen['name']} ({reason})"
    # The mode's own paragraph is work too ("Bind {doc_workspace} …, seed the memlog"), done before its sections;
    # a mode naming no section ("Load `references/validate.md`") is only that.
    text = chosen["text"]
    context = {**base_context(ctx), "intent": chosen["name"].lower(),
               "scripts": scripts_of(ctx, SkillDoc(path=Path(ctx.spec.source.path if ctx.spec.source else "."),
                                                 text=text, frontmatter={}, body_line=1, scripts=scripts_in(text))),
               "then": [s.split(":")[-1].removeprefix("section-") for s in chosen["sections"]]}
    if ctx.variables.get("resume_from"):
        context["resume"] = (f"Resume the document in progress {ctx.variables['resume_from']} (its workspace "
                             f"{ctx.variables.get('doc_workspace')}) rather than starting over: bind no new "
                             "workspace, do not seed a new memlog; continue from what it and its memlog hold.")
    following = chosen["sections"][0] if chosen["sections"] else None
    turn = turn_of(ctx, render(ctx, text), context, standing(ctx))
    followed = await follow_here(ctx, step_points(ctx, chosen["name"]), turn, then=following, text=text,
                             first_line=int(chosen.get("line") or 1))
    if followed is None:
        return
    outcome = await ctx.invoke("work", title=f"intent {chosen['name']}", content=followed.rest(turn.content),
                               context=context, hints=standing(ctx))
    ctx.step.summary += f"; {outcome.summary or 'done'}"
    move_on(ctx, following, reason=reason, by=by)


def _resuming_mode(modes: list[dict[str, Any]]) -> dict[str, Any]:
    """The mode that resumes work in progress: the one whose text speaks of resuming, else the first (Create)."""
    return next((m for m in modes if "resume" in m["text"].lower()), modes[0])


async def _resume_document(ctx: StepContext, in_progress: list[str] | None = None) -> tuple[str, str] | None:
    """Offer the skill's documents in progress (status not final) to resume; resumed, the run is bound to the
    document (``resume_from``, ``doc_workspace``) and ``(why, who decided)`` is returned."""
    if in_progress is None:
        in_progress = _outputs_exist(ctx)[1]
    if not in_progress:
        return None
    set_var(ctx, "resume_candidates", in_progress)
    resumed = await _offer_resume(ctx, [InProgress(Path(p), _status_detail(Path(p))) for p in in_progress])
    if resumed is None:
        return None
    document, reason, by = resumed
    set_var(ctx, "resume_from", str(document.path))
    set_var(ctx, "doc_workspace", str(document.path.parent))
    return reason, by


def _status_detail(path: Path) -> str:
    status = read_frontmatter(read_text(path), path=str(path)).data.get("status")
    return f"status: {status}"


async def _offer_resume(ctx: StepContext, found: list[InProgress]) -> tuple[InProgress, str, str] | None:
    """Offer to resume work in progress rather than start over: ``(the document, why, who decided)``, or None
    to start over. A person is asked (in normal mode); unattended, the runtime resumes the most recently changed
    document, as the skill would offer. The decision is journaled with its reason."""
    earlier = recorded(ctx, "resume")
    if isinstance(earlier, dict):  # decided before the run was interrupted: the same decision
        again = next((d for d in found if str(d.path) == earlier.get("document")), None)
        return (again, str(earlier["reason"]), str(earlier["by"])) if again is not None else None
    described = [f"{d.path} ({d.detail}" + (f"; resume at {d.resume_at}" if d.resume_at else "") + ")"
                 for d in found]
    picked: InProgress | None = None
    if ctx.run.mode != "normal":
        picked = max(found, key=lambda d: d.path.stat().st_mtime)
        reason = (f"unattended ({ctx.run.mode}): the skill offers to resume work in progress rather than start over;"
                  f" the runtime resumes the most recently changed: {described[found.index(picked)]}")
        by = "runtime"
    else:  # the first document is [R] Resume, the others [2]..[n]
        stay = Route("goto", None)
        options = [Option("R" if i == 0 else str(i + 1), "Resume" if i == 0 else f"Resume {d.path}", stay,
                          default=i == 0) for i, d in enumerate(found)] + [Option("S", "Start over", stay)]
        chosen = await choose(ctx, options, hints=standing(ctx), name="resume",
                              note="Work in progress found: " + "; ".join(described) + ". Resume it or start over?")
        picked = found[options.index(chosen)] if chosen.key != "S" else None
        reason = f"the person chose [{chosen.key}] {chosen.label}"
        by = "person"
    record(ctx, "resume", "resume", {"candidates": described},
            {"choice": "resume" if picked else "start over", "document": str(picked.path) if picked else None,
             "resume_at": picked.resume_at if picked else None, "reason": reason, "by": by})
    return (picked, reason, by) if picked is not None else None


async def _ask_intent(ctx: StepContext, modes: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """Ask which mode (stepchain's :func:`~stepline.stepchain._chain.choose`: the person, or in #yolo the executor
    as the user): each mode an option keyed by its initial (its number when initials clash), its text the note."""
    initials = [m["name"][:1].upper() for m in modes]
    unique = len(set(initials)) == len(initials)
    options = [Option(initials[i] if unique else str(i + 1), m["name"], Route("goto", None), default=i == 0)
               for i, m in enumerate(modes)]
    picked = await choose(ctx, options, hints=standing(ctx), name="intent",
                          note="Which intent? " + " ".join(m["text"][:200] for m in modes))
    return modes[options.index(picked)], f"[{picked.key}] {picked.label}"


def next_section(ctx: StepContext) -> str | None:
    intent = next((s for s in ctx.run.workflow.steps if s.meta.get("role") == "intent"
                   and s.meta.get("skill") == ctx.spec.meta.get("skill")), None)
    if intent is None:
        following: str | None = ctx.spec.meta.get("next")
        return following
    skill = str(ctx.spec.meta.get("skill"))
    current = str((ctx.variables.get("skill_intents") or {}).get(skill) or ctx.variables.get("intent") or "").lower()
    mode = next((m for m in intent.meta["modes"] if m["name"].lower() == current), None)
    order: list[str] = mode["sections"] if mode else []
    base = ctx.spec.id.split("@", 1)[0]
    return order[order.index(base) + 1] if base in order and order.index(base) + 1 < len(order) else None


def first_step_file(ctx: StepContext) -> str | None:
    return next((s.id for s in ctx.run.workflow.steps if s.meta.get("role") == "step-file"
                 and s.meta.get("skill") == ctx.spec.meta.get("skill")), None)


async def resumed_step_files(ctx: StepContext) -> bool:
    """At the first step file: an output the step files name whose ``stepsCompleted`` shows the work half done
    is offered to resume (see :func:`_offer_resume`); resumed, the run goes on at its first step not done."""
    skill = skill_of(ctx)
    root = Path(skill["root"])
    steps = [s for s in ctx.run.workflow.steps if s.meta.get("role") == "step-file"
             and s.meta.get("skill") == skill["name"]]
    texts = [read_text(root / str(s.meta["file"])) for s in steps if (root / str(s.meta["file"])).is_file()]
    paths = []
    for raw in output_mentions(texts):
        rendered = render(ctx, raw)
        if "{" not in rendered:
            paths.append(Path(rendered) if Path(rendered).is_absolute() else ctx.project_root / rendered)
    found = steps_in_progress(paths, [s.id for s in steps], root)
    if not found:
        return False
    resumed = await _offer_resume(ctx, found)
    if resumed is None:
        return False
    document, reason, by = resumed
    set_var(ctx, "resume_from", str(document.path))
    ctx.step.summary = f"not run: {document.path} shows it done ({document.detail}); resumed at {document.resume_at}"
    move_on(ctx, document.resume_at, reason=reason, by=by)
    return True
