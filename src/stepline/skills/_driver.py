"""Running an Agent Skill (SPEC R-F8): the runtime owns the skill's structure, the executor only its judgement.

* ``activate`` is the runtime's alone: the customization (resolved at load, :mod:`stepline.skills._load`) is
  journaled with the files it came from, ``{date}`` is fixed, ``persistent_facts`` are read
  (:mod:`stepline.skills._facts`). BMAD's ``render_skill.py`` / ``resolve_customization.py`` calls are this work.
* **Just-in-time**: a step file, a section of SKILL.md or a file a route loads is read when its step runs,
  rendered (``{workflow.*}``, ``{{.config}}``, ``[[bmad-snapshot:…]]``, ``{project-root}``, run variables) and is
  the only instruction text the executor gets; each hand-over is journaled (path, sha256 of the file and of what
  was sent).
* **The plan is followed** (:mod:`stepline.stepchain._follow`): each point where the text hands the turn to the
  person reaches the person in the text's order; a route runs its file as the next step, a hand-over runs the
  other skill (loaded with this one, under its name, with its own customization), both within the run.
* **The step chain** (:mod:`stepline.stepchain`): menus and halts, checkpoints, routes, visits are its.
* The intent of a sections skill and the offers to resume are :mod:`stepline.skills._intent`'s; review layers
  that launch subagents :mod:`stepline.skills._subagents`'; the headless ``result.json`` is written at the end.
* Scripts the step names (``uv run {project-root}/_bmad/scripts/memlog.py …``, the skill's ``scripts/*.py``)
  are listed in the request's context; the executor runs them with the ``runScript`` tool, through the tool
  pipeline (journaled intent first, never re-run blindly after a crash).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stepline import time
from stepline._placeholders import Kind, find, substitute
from stepline.engine import CursorFlow, StepContext, register_driver
from stepline.errors import ReaderError, StepFailed
from stepline.executors import PERSON_HINT, REPEATED_HINT, MenuOption, menu_text, with_notes
from stepline.formats import read_frontmatter, read_text
from stepline.model import Run, StepStatus, WorkflowSpec
from stepline.skills._facts import load_facts
from stepline.skills._host import (
    activation_left,
    base_context,
    follow_here,
    host,
    move_on,
    render,
    scripts_of,
    set_var,
    shared_sections,
    skill_of,
    standing,
    step_points,
    turn_of,
)
from stepline.skills._intent import first_step_file, intent_step, next_section, resumed_step_files
from stepline.skills._load import SKILL_FORMAT, find_skill
from stepline.skills._skill import Checkpoint, SkillDoc, checkpoints_in, read_doc, read_skill_files, scripts_in
from stepline.skills._subagents import run_subagents, subagent_layers
from stepline.stepchain import (
    Option,
    Route,
    before_menu,
    build_menu,
    check_visits,
    checkpoint_applies,
    choose,
    decide_route,
    hand_over,
    lean_step_text,
    offered_routes,
    record,
    routes_text,
    run_checkpoint,
    said_stops,
    settle,
    side_trip,
    stop_choices,
    stops_offered,
    stops_text,
)

__all__ = ["SkillFlow", "run_skill_step"]



class SkillFlow(CursorFlow):
    """One step at a time: where the last completed step's route led (the run's cursor), else the first step."""

    def __init__(self, workflow: WorkflowSpec, run: Run) -> None:
        super().__init__(run, workflow.steps[0].id)


# --------------------------------------------------------------------------------------------------- activate


async def _activate(ctx: StepContext) -> None:
    skill = skill_of(ctx)
    block = skill.get("block") or "workflow"
    values = skill["customization"].get(block) or {}
    record(ctx, "customization", "customization", {"skill": skill["name"], "layers": skill["layers"]},
            {"block": block, "values": values})
    record(ctx, "config", "config", {"files": skill["config_files"]}, {"central": skill["central"]})
    if "date" not in ctx.variables:
        set_var(ctx, "date", time.now().date().isoformat())
    facts = load_facts(ctx, list(values.get("persistent_facts") or []) if isinstance(values, dict) else [])
    set_var(ctx, "persistent_facts", facts)
    files = sum(1 for f in facts if f.get("path"))
    ctx.step.summary = (f"customization from {len(skill['layers'])} file(s), config from "
                        f"{len(skill['config_files'])} file(s), {files} persistent fact file(s)")
    move_on(ctx, ctx.spec.meta.get("next"))


async def _on_activation(ctx: StepContext) -> None:
    skill = skill_of(ctx)
    files = read_skill_files(Path(skill["root"]))
    section = next((s for s in files.sections if "activation" in s.title.lower()), None)
    raw = section.text if section else ""
    left, runtime = (raw, []) if ctx.engine.config.prompts.full_step_text else activation_left(raw)
    points = step_points(ctx)
    if not left.strip():  # nothing but what the runtime did: no request, no turn spent
        hand_over(ctx, "activation", files.entry.path, raw, "", left_out={"runtime": runtime}, requested=False)
        ctx.step.summary = "activation done by the runtime: " + ("; ".join(runtime) or "nothing to do")
        move_on(ctx, ctx.spec.meta.get("next"))
        return
    done = ("The runtime has already resolved the customization, loaded the config and the persistent facts "
            "(above), and runs each activation_steps_prepend/append entry as a step of its own. Do only what is "
            "left of the activation below; do not start the main workflow.")
    content = f"{done}\n\n{render(ctx, left)}"
    hand_over(ctx, "activation", files.entry.path, raw, content, left_out={"runtime": runtime})
    # the activation's judgement (a persona, a greeting) is a model's: nothing for a person at the terminal
    hints = standing(ctx, **{PERSON_HINT: ""})
    followed = await follow_here(ctx, points, turn_of(ctx, content, base_context(ctx), hints),
                                 then=ctx.spec.meta.get("next"), text=raw, first_line=section.line if section else 1)
    if followed is None:
        return
    outcome = await ctx.invoke("work", content=followed.rest(content), context=base_context(ctx),
                               hints=followed.hints(hints))
    ctx.step.summary = outcome.summary
    move_on(ctx, ctx.spec.meta.get("next"))


async def _instruction(ctx: StepContext) -> None:
    text = render(ctx, str(ctx.spec.meta["text"]))
    outcome = await ctx.invoke("work", content=text, context=base_context(ctx), hints=standing(ctx))
    ctx.step.summary = outcome.summary
    move_on(ctx, ctx.spec.meta.get("next"))


async def _shim(ctx: StepContext) -> None:
    skill = skill_of(ctx)
    files = read_skill_files(Path(skill["root"]))
    target = ctx.run.workflow.meta.get("forwarded_to")
    raw = files.skill.text
    content = (f"This skill forwards to {target}; the runtime runs {target} next with intent "
               f"{ctx.variables.get('intent') or '(its own detection)'} and this skill's customization fields. "
               f"Do only what this skill asks before forwarding (its notice).\n\n{render(ctx, raw)}")
    hand_over(ctx, "shim", files.skill.path, raw, content)
    context = {**base_context(ctx), "forwards_to": target}
    followed = await follow_here(ctx, step_points(ctx), turn_of(ctx, content, context, standing(ctx)),
                                 then=ctx.spec.meta.get("next"), text=raw, first_line=1)
    if followed is None:
        return
    outcome = await ctx.invoke("work", content=followed.rest(content), context=context,
                               hints=followed.hints(standing(ctx)))
    ctx.step.summary = outcome.summary
    move_on(ctx, ctx.spec.meta.get("next"))


async def _agent_menu(ctx: StepContext) -> None:
    """An agent's menu (its customization's ``agent.menu``): the person picks an item (in #yolo the executor, as
    the user; journaled with who chose). An item's ``prompt`` is one request; an item's ``skill`` runs next within
    this run, with its own customization (its steps were loaded with the agent's)."""
    items: list[dict[str, str]] = ctx.spec.meta["items"]
    options = [Option(i["code"], i["description"], Route("goto", None)) for i in items]
    picked = await choose(ctx, options, hints=standing(ctx), name="agent-menu", note="The agent's menu:")
    item = items[options.index(picked)]
    by = "executor" if ctx.run.mode == "yolo" else "person"
    ctx.step.choice = picked.key
    chosen = f"[{picked.key}] {picked.label}"
    dispatched = {"skill": item["skill"], "step": item.get("step")} if "skill" in item else \
        {"prompt": item.get("prompt")}
    record(ctx, "agent-menu", "agent-menu", {"items": [f"[{o.key}] {o.label}" for o in options]},
           {"choice": picked.key, **dispatched, "by": by})
    following = ctx.spec.meta.get("next")
    if "skill" not in item:
        outcome = await ctx.invoke("work", title=chosen, content=render(ctx, item.get("prompt", "")),
                                   context=base_context(ctx), hints=standing(ctx))
        ctx.step.summary = f"{chosen}: {outcome.summary or 'done'}"
    elif item.get("step"):
        following = item["step"]
        ctx.step.summary = f"{chosen}: runs {item['skill']}"
    else:
        raise StepFailed(f"{chosen}: skill {item['skill']!r} is not installed (or cannot run)", retryable=False,
                         hint=f"install the module holding {item['skill']}, or choose another item")
    move_on(ctx, following, reason=f"{chosen} chosen at the agent's menu", by=by)


# ------------------------------------------------------------------------------------------------- step files


def _step_menu(ctx: StepContext, checkpoints: list[Checkpoint]) -> list[Option]:
    """The menu the step presents to the person (its ``[K]`` options, else its halt's), none when a checkpoint
    that always stops already asks the person (see :mod:`stepline.stepchain._menus`)."""
    if any(c.condition is None for c in checkpoints):
        return []
    steps = {s.id for s in ctx.run.workflow.steps}
    visited = frozenset(sid for sid, step in ctx.run.steps.items() if step.status != StepStatus.PENDING)
    options, authored = build_menu(ctx.spec.meta, dict(ctx.variables), visited, exists=steps.__contains__)
    return options if authored else []


async def _side_trip(ctx: StepContext, option: Option) -> None:
    """``[A]``/``[P]``: the skill the option's handler names (``Invoke the `bmad-party-mode` skill``), else BMAD's
    advanced-elicitation or party-mode skill, handed to the executor; then the menu is presented again."""
    named = re.search(r"`(bmad-[\w-]+)`", option.handler)
    wanted = named[1] if named else "bmad-advanced-elicitation" if option.route.kind == "elicit" else "bmad-party-mode"
    folder = find_skill(wanted, Path(skill_of(ctx)["root"]), ctx.project_root)
    path = folder / "SKILL.md" if folder is not None else Path(wanted)
    text = read_text(path) if path.is_file() else ""
    await side_trip(ctx, option, path, text, render(ctx, text) if text else f"{option.label}: {option.handler}",
                    context={**base_context(ctx), "invoked_from": ctx.spec.meta["file"]}, hints=standing(ctx))


async def _step_file(ctx: StepContext) -> None:
    check_visits(ctx, hint="answer the loop's decide differently, or raise runtime.max_step_visits")
    skill = skill_of(ctx)
    root = Path(skill["root"])
    name = str(ctx.spec.meta["file"])
    path = root / name
    if not path.is_file():
        # the skill was checked when the run was loaded: the file went away since (an update, a deletion)
        raise ReaderError("this step file is gone (the skill changed after the run started)", path=str(path),
                          hint="restore it, then resume the run; or start a new run of the skill")
    if ctx.spec.id == first_step_file(ctx) and await resumed_step_files(ctx):
        return
    doc = read_doc(root, path)
    context = {**base_context(ctx), "step_file": str(path), "scripts": scripts_of(ctx, doc)}
    layers = subagent_layers(ctx, doc.text)
    # The link to the next step file and the rules the runtime keeps are not sent (unless configured).
    lean = None if ctx.engine.config.prompts.full_step_text else lean_step_text(doc.text, shared_sections(ctx))
    raw = lean.text if lean is not None else doc.text
    launched: dict[str, str] = {}  # each layers token: what the step is told in its place
    for token, active in layers:  # the runtime launches them: the step is told so, and what they need from it
        needs = sorted({p.name for layer in active for p in find(render(ctx, layer["instruction"]))})
        names = ", ".join(str(layer.get("name") or layer.get("id")) for layer in active)
        ask = "".join(f" Before you finish, set it with set_var('{n}', …) — the layers need it." for n in needs)
        launched[token] = (f"(The runtime runs these {len(active)} layers as parallel subagents once you finish "
                           f"this request: {names}.{ask} Do everything before them now.)")
    raw = substitute(raw, launched, kinds={Kind.CUSTOM})
    checkpoints = checkpoints_in(doc.text)
    # The step's text first, the same in each of its requests (a provider caches it); the runtime's notes to one
    # request after it (see executors.with_notes). The person reads the step's text alone.
    content = render(ctx, raw)
    options = _step_menu(ctx, checkpoints)
    chain = host(ctx)
    stops = stops_offered(ctx, chain, checkpoints)
    said_here = {c.line for c in stops}
    notes = []
    if options and stops:  # the runtime presents it (a request with a `## Menu` part says so by its part)
        notes.append(f"The runtime presents this step's menu to the person after this request ({menu_text(options)})"
                     " and hands you their choice: do the step's work up to the menu, do not present it yourself.")
    if checkpoints:  # the runtime asks them: the executor must not ask them too
        notes.append("The runtime presents this step's checkpoint(s) to the person after this request ("
                     + "; ".join(f"line {c.line}" + (f" (only if: {c.condition} — the runtime settles it)"
                                                     if c.condition and c.line not in said_here else "")
                                 for c in checkpoints)
                     + ") and hands you their choice: do the step's work up to each checkpoint, do not ask it "
                     "yourself" + ("; say in your finish which stops first (see Checkpoints below)" if stops else "")
                     + ".")
    if layers:
        notes.append("After this request the runtime runs the step's subagent layers, then continues the step with "
                     "their results.")
    # Where the step leaves is asked in its last work request: after its subagents, if any, else in its work
    # request and again in a conditional checkpoint's handler, if one runs. A step with an unconditional
    # checkpoint acts on the person's choice after its work request: its routes stay decide requests.
    offered = offered_routes(ctx.spec.meta) if not options and (layers or all(c.condition for c in checkpoints)) else {}
    choices = ["next", *(routes[0]["file"] for routes in offered.values())] if offered else None
    hand_over(ctx, "step", path, doc.text, with_notes(content, *notes),
              left_out=lean.left_out if lean is not None else None)
    menu = [o.as_menu_option() for o in options] or [
        MenuOption(k, label) for c in [c for c in checkpoints if c.condition is None][:1] for k, label in c.options]
    last = not layers and bool(offered)
    # Its checkpoints are asked in the same finish too (one turn per step): whether a condition the runtime cannot
    # read holds, and in #yolo the option the model chooses as the user; a decide or an answer request is the
    # fallback for an executor whose finish does not say.
    always = any(c.condition is None for c in stops)
    plain = (choices if last else None) or ([] if always or not stops else ["continue"])
    work_choices = [*plain, *stop_choices(ctx, stops)] or None
    if stops:
        menu = []  # the unconditional checkpoint's options are among the choices (#yolo) or the person's alone
    hints = standing(ctx, **{PERSON_HINT: content})
    followed = await follow_here(ctx, step_points(ctx), turn_of(ctx, content, context, hints),
                                 then=ctx.spec.meta.get("next"), text=doc.text, first_line=1)
    if followed is None:
        return
    asked = with_notes(followed.rest(content), *notes)
    text = asked + (routes_text(ctx, offered) if last else "") + (
        stops_text(ctx, stops, " or ".join(f"`{c}`" for c in plain)) if stops else "")
    repeated = followed.hints(hints) if not layers else {**hints, REPEATED_HINT: True}
    outcome = await ctx.invoke("work", content=text, context=context, menu=menu, hints=repeated, choices=work_choices)
    ctx.step.summary = outcome.summary
    proposal = outcome.choice
    said = said_stops(outcome.choice, stops)
    route = outcome.choice if last and outcome.choice in (choices or []) else None
    for checkpoint in checkpoints:
        told = said.get(checkpoint.line)
        if checkpoint.condition is None or await checkpoint_applies(ctx, chain, checkpoint, told):
            # the finish's choice answers the menu (a person's executor) only when the request offered the menu
            chosen = await run_checkpoint(ctx, chain, checkpoint, outcome.choice if menu else None,
                                          offered if last else None, said=told[1] if told else None)
            route = chosen if last and chosen is not None else route
    if layers:
        results = [result for _, active in layers for result in await run_subagents(ctx, active)]
        record(ctx, "subagents", "subagents", {"layers": [r["id"] for r in results]}, results)
        # The continuation repeats the step's request word for word and adds the layers' results after it: a
        # provider serves the repeated part from its cache instead of a restated step text.
        found = "\n\n".join(f"#### {r['name']} (`{r['id']}`) — its subagent returned:\n\n{r['result']}"
                              for r in results)
        continuation = (f"{asked}\n\n## After the subagents\nThis request continues the step: the layers ran as "
                        "parallel subagents, their results are below. Do the rest of the step, after the layers (do "
                        f"not redo what came before them).\n\n{found}")
        if offered:
            continuation += routes_text(ctx, offered)
        outcome = await ctx.invoke("work", content=continuation, context=context,
                                   hints={**standing(ctx), REPEATED_HINT: True}, choices=choices)
        ctx.step.summary = outcome.summary
        route = outcome.choice
    if options:
        picked = await settle(ctx, options, executor=ctx.run.mode == "yolo", proposal=proposal, hints=standing(ctx),
                              side_trip=lambda option: _side_trip(ctx, option), context=context)
        ctx.step.choice = picked.key
        if picked.route.target != ctx.spec.meta.get("next"):  # an option that leaves elsewhere, or ends the skill
            reason, by = f"[{picked.key}] {picked.label} chosen at the step's menu", "person"
            record(ctx, "route", "route", {"from": name}, {"next": picked.route.target, "reason": reason, "by": by})
            move_on(ctx, picked.route.target, reason=reason, by=by)
            return
    target, reason, by = await decide_route(ctx, chain, route, offered)
    record(ctx, "route", "route", {"from": name}, {"next": target, "reason": reason, "by": by})
    move_on(ctx, target, reason=reason, by=by)


async def _route_file(ctx: StepContext) -> None:
    """A file the skill's text routes to (``Load `references/validate.md```), read now and run as a step, its own
    points followed; then the run goes back where the route returns."""
    check_visits(ctx, hint="the skill's routes loop; raise runtime.max_step_visits")
    skill = skill_of(ctx)
    path = Path(skill["root"]) / str(ctx.spec.meta["file"])
    if not path.is_file():
        raise ReaderError("the file this route loads is gone (the skill changed after the run started)",
                          path=str(path), hint="restore it, then resume the run")
    raw = read_text(path)
    content = render(ctx, raw)
    hand_over(ctx, "route", path, raw, content)
    doc = SkillDoc(path=path, text=raw, frontmatter={}, body_line=1, scripts=scripts_in(raw))
    context = {**base_context(ctx), "routed_file": str(path), "scripts": scripts_of(ctx, doc)}
    hints = standing(ctx, **{PERSON_HINT: content})
    followed = await follow_here(ctx, step_points(ctx), turn_of(ctx, content, context, hints), then=None,
                                 text=raw, first_line=1)
    if followed is None:
        return
    outcome = await ctx.invoke("work", content=followed.rest(content), context=context, hints=followed.hints(hints))
    ctx.step.summary = outcome.summary
    move_on(ctx, None)


async def _router(ctx: StepContext) -> None:
    """A mode router (``steps-c/``, ``steps-v/``, ``steps-e/``): the mode given (``--mode``), else the person's
    choice among the entry document's modes (in #yolo the executor's, as the user); the run goes on at the mode's
    first step file, the other modes' steps are skipped."""
    modes: list[dict[str, Any]] = ctx.spec.meta["modes"]
    given = str(ctx.variables.get("intent") or "").strip().lower()
    chosen = next((m for m in modes if m["mode"] == given), None)
    if chosen is not None:
        reason, by = f"mode {given!r} given (--mode)", "runtime"
    else:
        options = [Option(m["key"], m["label"], Route("goto", m["entry"]), default=i == 0)
                   for i, m in enumerate(modes)]
        picked = await choose(ctx, options, hints=standing(ctx), name="mode")
        chosen = modes[options.index(picked)]
        reason, by = f"[{picked.key}] {picked.label} chosen", "executor" if ctx.run.mode == "yolo" else "person"
    set_var(ctx, "intent", chosen["mode"])
    record(ctx, "mode", "mode", {"modes": [m["mode"] for m in modes]},
           {"mode": chosen["mode"], "reason": reason, "by": by})
    ctx.step.summary, ctx.step.choice = f"mode {chosen['mode']} ({reason})", chosen["key"]
    move_on(ctx, chosen["entry"], reason=reason, by=by)


# --------------------------------------------------------------------------------------------------- sections


async def _section(ctx: StepContext) -> None:
    check_visits(ctx, hint="the skill's sections loop; raise runtime.max_step_visits")
    skill = skill_of(ctx)
    files = read_skill_files(Path(skill["root"]))
    role = ctx.spec.meta["role"]
    first_line = 1
    if role == "body":
        raw = own = read_frontmatter(files.skill.text).body
        first_line = files.skill.body_line
    else:
        section = next((s for s in files.sections if s.title == ctx.spec.meta["title"]), None)
        if section is None:
            raise ReaderError(f"section {ctx.spec.meta['title']!r} is no longer in the skill",
                              path=str(files.entry.path))
        refs = list(ctx.spec.meta.get("references", []))
        own, first_line = section.text, section.line
        raw = section.text + "".join("\n\n" + s.text for s in files.sections if s.title in refs)
    content = person = render(ctx, raw)
    # a section's menu or halt, as a step file's (the section's own text only): its last request's `## Menu`
    options = _step_menu(ctx, [])
    hand_over(ctx, "section", files.entry.path, raw, content)
    doc = SkillDoc(path=files.entry.path, text=raw, frontmatter={}, body_line=1, scripts=scripts_in(raw))
    context = {**base_context(ctx), "section": ctx.spec.meta.get("title"), "scripts": scripts_of(ctx, doc)}
    hints = standing(ctx, **{PERSON_HINT: person})
    points = before_menu(step_points(ctx), ctx.spec.meta) if options else step_points(ctx)
    followed = await follow_here(ctx, points, turn_of(ctx, content, context, hints), then=next_section(ctx),
                                 text=own, first_line=first_line)
    if followed is None:
        return
    outcome = await ctx.invoke("work", content=followed.rest(content), context=context,
                               menu=[o.as_menu_option() for o in options], hints=followed.hints(hints))
    ctx.step.summary = outcome.summary
    if options:
        picked = await settle(ctx, options, executor=ctx.run.mode == "yolo", proposal=outcome.choice,
                              hints=standing(ctx), side_trip=lambda option: _side_trip(ctx, option), context=context)
        ctx.step.choice = picked.key
    move_on(ctx, next_section(ctx))


# ------------------------------------------------------------------------------------------------------ entry

_ROLES = {"activate": _activate, "on-activation": _on_activation, "instruction": _instruction, "shim": _shim,
          "step-file": _step_file, "mode": _router, "route": _route_file,
          "agent-menu": _agent_menu, "intent": intent_step, "section": _section, "body": _section}


async def run_skill_step(ctx: StepContext) -> None:
    """Run one step of an Agent Skill (see the module doc)."""
    await _ROLES[str(ctx.spec.meta["role"])](ctx)


register_driver(SKILL_FORMAT, run_skill_step, SkillFlow)
