"""The skill's side of a step: its record (customization, config, root), rendering its text, the hints and context of
its requests, moving the run on, and where its routes and hand-overs lead (the step chain's runtime,
:mod:`stepline.stepchain`, does the rest).

At the end of a headless run (unattended: #yolo, non-interactive) the JSON result the skill's headless reference
describes (:mod:`stepline.skills._headless`) is the run folder's ``result.json``, journaled.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from stepline._placeholders import PROJECT_ROOT, Kind, substitute
from stepline.engine import StepContext
from stepline.executors import STANDING_HINT, standing_text
from stepline.formats import read_frontmatter, read_text
from stepline.model import EventType
from stepline.skills._headless import ResultFacts, executor_status, fill_result, pick_shape, result_shapes
from stepline.skills._render import RenderEnv, render_skill_text
from stepline.skills._skill import SkillDoc, SkillFiles, checkpoints_in, read_skill_files, route_step_id, routed_file
from stepline.stepchain import (
    Followed,
    Host,
    Point,
    PointKind,
    Turn,
    base_id,
    before_menu,
    follow_or_leave,
    lean_step_text,
    move,
    record,
)
from stepline.stepchain import shared_sections as _shared

__all__ = ["activation_left", "base_context", "follow_here", "host", "leads_to", "move_on", "render", "scripts_of",
           "set_var", "shared_sections", "skill_of", "standing", "step_points", "turn_of"]

#: the activation items the runtime does itself when the skill has intent modes (its own intent step)
_INTENT_ITEM = re.compile(r"(?i)\bdetect (?:the )?intent\b")


def skill_of(ctx: StepContext) -> dict[str, Any]:
    record: dict[str, Any] = ctx.run.workflow.meta["skills"][ctx.spec.meta["skill"]]
    return record


def _env(ctx: StepContext) -> RenderEnv:
    skill = skill_of(ctx)
    return RenderEnv(project_root=ctx.project_root, skill_root=Path(skill["root"]), central=skill["central"],
                     customization=skill["customization"], names=dict(ctx.variables))


def render(ctx: StepContext, text: str) -> str:
    return render_skill_text(text, _env(ctx), skill_of(ctx).get("module"))


def set_var(ctx: StepContext, name: str, value: Any) -> None:
    if ctx.variables.get(name) != value:
        ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})


def move_on(ctx: StepContext, following: str | None, **why: Any) -> None:
    """Set the run's cursor to the next visit (None: the skill is done — back where a route or hand-over that led
    here returns, else the run's end: steps off the path are skipped)."""
    if move(ctx, following, **why) is None:
        _write_result(ctx)


def _files_written(ctx: StepContext) -> list[str]:
    """The files this run wrote: every step's outputs, and the memlogs its scripts changed."""
    files = [*(o for s in ctx.run.steps.values() for o in s.outputs), *ctx.written]
    for started in ctx.engine.calls.started.values():
        before = (started.get("args") or {}).get("effect_before")
        if isinstance(before, dict) and before.get("memlog") and Path(before["memlog"]).exists():
            files.append(os.path.relpath(before["memlog"], ctx.project_root))
    return list(dict.fromkeys(files))


def _write_result(ctx: StepContext) -> None:
    """At the end of a headless run (unattended: #yolo, non-interactive), the JSON result the skill's headless
    reference describes (see :mod:`stepline.skills._headless`) is the run folder's ``result.json``, journaled."""
    if ctx.run.mode == "normal":
        return
    skill = skill_of(ctx)
    shapes = result_shapes(Path(skill["root"]))
    if not shapes:
        return
    reported = executor_status([*(s.summary for s in ctx.run.steps.values()), ctx.step.summary])
    intent = str(ctx.variables.get("intent") or "") or None
    shape = pick_shape(shapes, intent, reported.get("status") == "blocked")
    assert shape is not None  # shapes is not empty

    def exists(path: str) -> bool:
        return (Path(path) if Path(path).is_absolute() else ctx.project_root / path).exists()

    result = fill_result(shape, ResultFacts(intent=intent, render=lambda text: render(ctx, text), exists=exists,
                                            files=_files_written(ctx), reported=reported, variables=ctx.variables))
    ctx.engine.store.open(ctx.run.run_id).write("result.json", result)
    record(ctx, "result", "result", {"shape": f"{shape.path}:{shape.line}", "file": "result.json"}, result)
    ctx.step.summary = f"{ctx.step.summary or 'done'}; result.json: {result['status']}"


def scripts_of(ctx: StepContext, doc: SkillDoc) -> list[dict[str, Any]]:
    """The scripts the step names, each with where it is and whether it exists (for the runScript tool)."""
    skill_root = Path(skill_of(ctx)["root"])
    found = []
    for line, raw in doc.scripts:
        rendered = substitute(raw, {PROJECT_ROOT: str(ctx.project_root), "skill-root": str(skill_root)},
                              kinds={Kind.VAR})
        path = Path(rendered) if Path(rendered).is_absolute() else skill_root / rendered
        found.append({"script": str(path), "line": line, "exists": path.is_file(), "tool": "runScript"})
    return found


def base_context(ctx: StepContext) -> dict[str, Any]:
    """What every request of the skill carries besides its instructions: the skill it is of, under the names the
    run's standing configuration gives them (an executor sends only what that does not already show, a skill
    handed over to). An unattended run (#yolo, non-interactive; the standing configuration's ``headless``) is the
    skill's headless mode: its ``references/headless.md``, if any, is named (the executor reads it through
    ``read``, as the skill says to, for the whole run)."""
    skill = skill_of(ctx)
    context = {"skill-name": skill["name"], "skill-root": skill["root"], "intent": ctx.variables.get("intent")}
    headless = Path(skill["root"]) / "references" / "headless.md"
    if ctx.run.mode != "normal" and headless.is_file():
        context["headless_reference"] = str(headless)
    return context


def _entry_rules(ctx: StepContext) -> str:
    """The entry document's standing rules (not its activation, not its pointer to the first step)."""
    skill = skill_of(ctx)
    files = read_skill_files(Path(skill["root"]))
    if files.kind != "step-files":  # a sections skill: the sections before its activation (the rest run as steps)
        end = next((i for i, s in enumerate(files.sections) if "activation" in s.title.lower()), 0)
        return render(ctx, "\n\n".join(s.text for s in files.sections[:end]))
    # The lead before the entry's first section (its title, goal, standing notes), without control prose.
    lead = lean_step_text(read_frontmatter(files.entry.text).body.split("\n## ", 1)[0]).text.strip()
    keep = [s.text for s in files.sections if "activation" not in s.title.lower() and "step-" not in s.text
            and s.title.lower() != "conventions"]
    return render(ctx, "\n\n".join(filter(None, [lead, *keep])))


def shared_sections(ctx: StepContext) -> tuple[str, ...]:
    """The sections the skill's step files repeat word for word (see :func:`stepline.stepchain.shared_sections`): sent
    once, in the standing text, and left out of each step's own; none when the full step text is configured."""
    if ctx.engine.config.prompts.full_step_text:
        return ()
    skill = skill_of(ctx)
    files = [Path(skill["root"]) / str(spec.meta["file"]) for spec in ctx.run.workflow.steps
             if spec.meta.get("role") == "step-file" and spec.meta.get("skill") == ctx.spec.meta["skill"]]
    return _shared([lean_step_text(read_text(file)).text for file in dict.fromkeys(files) if file.is_file()])


def standing(ctx: StepContext, **more: Any) -> dict[str, Any]:
    """The hints of a request that sees the whole run: the skill's standing rules, the sections its step
    files repeat and the persistent facts activation loaded, the same text for every request of the run, which the
    executor sends once in the prefix a provider caches, instead of restated in each step's context."""
    facts = [f"- {f['fact']}" if "fact" in f else f"- {f['path']}:\n{f['text']}"
             for f in ctx.variables.get("persistent_facts") or [] if isinstance(f, dict) and ("fact" in f or
                                                                                             f.get("text"))]
    repeated = render(ctx, "\n\n".join(section.strip("\n") for section in shared_sections(ctx)))
    text = "\n\n".join(filter(None, [_entry_rules(ctx), repeated])) + (
        "\n\n## Persistent facts\n" + "\n".join(facts) if facts else "")
    configuration = {**ctx.run.workflow.variables, "headless": ctx.run.mode != "normal"}
    return {STANDING_HINT: standing_text(text, configuration), **more}


def _prefix(ctx: StepContext) -> str:
    """What the ids of this step's skill start with: ``bmad-prd:`` for a skill handed over to, else nothing."""
    base = base_id(ctx.spec.id)
    return base[:base.rfind(":") + 1]


def step_points(ctx: StepContext, mode: str | None = None) -> list[Point]:
    """The points of this step the runtime follows (its ``meta["points"]``, read at load), without what the runtime
    does another way: a step file's checkpoints, an activation's items the runtime did (and the intent its intent
    step detects), a shim's forwarding to the skill it runs next; an intent step's, those of the ``mode`` chosen;
    an agent's menu and a router's modes are steps' own choices."""
    meta = ctx.spec.meta
    role = meta.get("role")
    points = [Point.from_json(p) for p in meta.get("points") or []]
    files = read_skill_files(Path(skill_of(ctx)["root"]))
    if role in ("agent-menu", "mode"):
        return []
    if role == "step-file":
        checkpoints = {c.line for c in checkpoints_in(files.docs[str(meta["file"])].text)}
        return [p for p in before_menu(points, meta) if p.line not in checkpoints]
    if role == "on-activation":
        menu = any(s.meta.get("role") == "agent-menu" and s.meta.get("skill") == meta.get("skill")
                   for s in ctx.run.workflow.steps)
        return _activation_points(files, points, agent_menu=menu)
    if role == "intent":
        modes = meta.get("modes") or []
        lines = sorted(int(m.get("line") or 0) for m in modes)
        chosen = next((m for m in modes if m["name"].lower() == str(mode).lower()), None)
        if chosen is None:
            return []
        start = int(chosen.get("line") or 0)
        end = next((line for line in lines if line > start), 10**9)
        titles = {s.title for s in files.sections if s.slug in {sid.split(":")[-1] for sid in chosen["sections"]}}
        return [p for p in points if start <= p.line < end and p.section not in titles]
    if role == "shim":
        return [p for p in points if not (p.kind is PointKind.HANDOVER and p.target == files.forward_to)]
    return points


def _activation_points(files: SkillFiles, points: list[Point], *, agent_menu: bool) -> list[Point]:
    """The points of the activation items left to the executor: on a line of a kept item (not the runtime's, nor
    the intent detection the runtime's intent step does, nor — ``agent_menu``: the agent's menu is a step of its
    own — the subsection that presents the agent's menu and dispatches its items)."""
    section = next((s for s in files.sections if "activation" in s.title.lower()), None)
    if section is None:
        return []
    left, _ = activation_left(section.text)
    lines = section.text.splitlines()
    kept = []
    for point in points:
        offset = point.line - section.line
        line = lines[offset].strip() if 0 <= offset < len(lines) else ""
        if not line or line not in left:
            continue
        if files.modes and _INTENT_ITEM.search(_item_of(section.text, point, section.line)):
            continue
        if agent_menu and "{agent.menu}" in _subsection_of(lines, offset):
            continue
        kept.append(point)
    return kept


def _subsection_of(lines: list[str], offset: int) -> str:
    """The lines of the ``###`` subsection (or the section) ``lines[offset]`` is in, up to it."""
    start = next((i for i in range(offset, -1, -1) if lines[i].startswith("#")), 0)
    return "\n".join(lines[start:offset + 1])


def _item_of(text: str, point: Point, first_line: int) -> str:
    """The numbered item (or paragraph) of ``text`` the point's line is in."""
    lines = text.splitlines()
    index = max(0, min(len(lines) - 1, point.line - first_line))
    start = index
    while start > 0 and not re.match(r"^\s*(?:\d+\.|#)", lines[start]) and lines[start - 1].strip():
        start -= 1
    return "\n".join(lines[start:index + 1])


#: An activation item the runtime has done (``activate``): resolving the customization, running the prepend and
#: append steps (each a step of its own), loading the persistent facts and the config, the closing check of them.
_RUNTIME_ACTIVATION = re.compile(
    r"(?i)resolve_customization|resolve\s+(the\s+)?\w+\s+block|activation_steps_(prepend|append)|"
    r"execute\s+(prepend|append)\s+steps|persistent[_ ]facts|load\s+config|config(\.user)?\.yaml|"
    r"activation\s+is\s+complete")


def activation_left(text: str) -> tuple[str, list[str]]:
    """The activation section without the items the runtime has done, and the first line of each left out.

    An item is a subsection (``### Step 2: Load Persistent Facts``), else a top-level numbered item or paragraph
    (``3. Treat every entry in {workflow.persistent_facts} …``); one that speaks of those mechanisms is the
    runtime's. What is left (a persona, a greeting, a menu to present) is judgement, for the executor."""
    lines = text.splitlines()
    body = "\n".join(lines[1:] if lines and lines[0].startswith("#") else lines)  # the section's own heading
    subsections = re.split(r"(?m)^(?=#{3,6}\s)", body)
    items = subsections if len(subsections) > 1 else re.split(r"(?m)^(?=\d+\.\s|\S)", body)
    kept: list[str] = []
    dropped: list[str] = []
    for item in filter(str.strip, items):
        first = item.strip().splitlines()[0]
        (dropped if _RUNTIME_ACTIVATION.search(first if first.startswith("#") else item) else kept).append(item)
    return "".join(kept).strip(), [item.strip().splitlines()[0][:80] for item in dropped]


def leads_to(ctx: StepContext, point: Point) -> str | None:
    """The step a route or hand-over point goes to: the step of the file it loads, of the section it jumps to, the
    first step of the skill it hands over to; None when the run has none (the executor reads of it)."""
    steps = {s.id for s in ctx.run.workflow.steps}
    files = read_skill_files(Path(skill_of(ctx)["root"]))
    if point.kind is PointKind.HANDOVER:
        first = (ctx.run.workflow.meta.get("handovers") or {}).get(point.target)
        return str(first) if first in steps else None
    if point.section is not None:
        section = next((s for s in files.sections if s.title == point.section), None)
        found = _prefix(ctx) + section.slug if section is not None else None
    else:
        path = routed_file(files, point)
        found = _prefix(ctx) + route_step_id(files.root, path) if path is not None else None
    return found if found in steps and found != base_id(ctx.spec.id) else None


def turn_of(ctx: StepContext, content: str, context: dict[str, Any], hints: dict[str, Any]) -> Turn:
    return Turn(content=content, title=ctx.spec.name or ctx.spec.id, context=context, hints=hints,
                render=lambda text: render(ctx, text), fact=lambda condition: host(ctx).fact(ctx, condition))


async def follow_here(ctx: StepContext, points: list[Point], turn: Turn, *, then: str | None, text: str,
                      first_line: int) -> Followed | None:
    """Follow the step's points, leaving for the route or hand-over taken (see
    :func:`~stepline.stepchain._follow.follow_or_leave`); None when the step left."""
    return await follow_or_leave(ctx, points, turn, leads_to=lambda point: leads_to(ctx, point), then=then,
                                 text=text, first_line=first_line)


def host(ctx: StepContext, **more: Any) -> Host:
    """The skill's side lent to the step chain's runtime (checkpoints, routes): its rendering, hints and context."""
    return Host(render=lambda text: render(ctx, text), hints=lambda **extra: standing(ctx, **more, **extra),
                context=base_context(ctx))
