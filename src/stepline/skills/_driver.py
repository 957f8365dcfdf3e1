"""Running an Agent Skill (SPEC R-F8): the runtime owns the skill's structure, the executor only its judgement.

* ``activate`` is the runtime's alone: the customization (resolved at load, see :mod:`stepline.skills._load`)
  is journaled with the files it came from, ``{date}`` is fixed, and ``persistent_facts`` are read (``file:``
  globs under the project root) into the run variable ``persistent_facts``, which every later request
  carries. BMAD's ``render_skill.py`` / ``resolve_customization.py`` calls are this work: not asked of anyone.
* **Just-in-time**: a step file (or a section of SKILL.md) is read when its step runs, rendered
  (``{workflow.*}``, ``{{.config}}``, ``[[bmad-snapshot:…]]``, ``{project-root}``, run variables) and is the
  only instruction text the executor gets; each hand-over is journaled (path, sha256 of the file and of what
  was sent). ``references/`` and ``assets/`` reach the executor only through the protocol's ``read``.
* **Routes**: after a step file's work, the runtime decides where it leaves from structured facts when they
  show it — a file named by one of the step's variables (``spec_file``) whose frontmatter ``status`` a route
  line maps (```draft` → step-02-plan.md``), or a file a route line hinges on (``If `x` exists →``).
  Otherwise each other route (an EARLY EXIT, a loop back) is a ``decide`` request with the route's line as
  the condition; none holding, the step's NEXT. The decision is journaled with its reason and who made it.
  A revisited step runs as ``<step>@<n>``, at most ``runtime.max_step_visits`` times.
* **Checkpoints**: a step file's unconditional ``HALT and ask human: `[A] Approve` | `[E] Edit``` line is
  asked by the runtime after the step's work — of the person (terminal, MCP relay, else a question gate the
  run blocks on), in #yolo of the executor as the user — and the executor then does what the step says for
  the choice (``- **E**: …, then return to CHECKPOINT`` asks again). A checkpoint nested under a condition
  (``If `{workflow.review_gate}` is `on`:``, ``If spec exceeds 1600 tokens:``) is asked only when it holds:
  decided by the runtime when it can read it (a ``{workflow.<x>}``, config or run value compared to a literal or
  (non-)empty, a file that exists or is missing, a frontmatter field of a file a variable names), else by a
  ``decide`` request; journaled (``checkpoint-condition``) with the reason and who decided. Issue 21, one turn
  per step: the step's work request asks for its first stop in its ``finish`` choice (``line N: stop``; in #yolo
  ``line N: [K]``, the model answering as the user), so neither the ``decide`` nor the ``answer`` request is sent
  when the executor says; an option's handler that only moves on (``Continue to checkpoint``) is no request.
* **Resume offer**: work in progress found when the skill starts (a document whose ``status`` is not final, a
  step-file output whose ``stepsCompleted`` shows steps done) is offered: the person chooses resume or start
  over; unattended the runtime resumes (the most recent) and journals why.
* **Headless result**: an unattended run ends by writing ``result.json`` in the run folder, in the shape the
  skill's headless reference shows (:mod:`stepline.skills._headless`).
* **Intent** (a SKILL.md with intent modes): a pre-resolved intent (``--mode``, a shim, ``--var intent=…``)
  is used as given; else when the skill's output folder holds no earlier document the first mode (Create)
  is chosen by the runtime; else the executor (or the person, in normal mode) picks a mode, and documents in
  progress (frontmatter ``status`` not final) are offered to resume.
* **Subagents**: a ``{workflow.<x>}`` list of layers (tables with an ``instruction``) that launch subagents —
  bmad-build's review layers — is not handed to one conversation: the step's request is told the runtime runs
  them (and to set the values their instructions need, ``{diff_output}``), then each layer is its own request
  with only its instruction, at most ``runtime.concurrency`` at once, and a last request continues the step
  with their results in place of the layers (journaled as ``subagents``).
* Scripts the step names (``uv run {project-root}/_bmad/scripts/memlog.py …``, the skill's ``scripts/*.py``)
  are listed in the request's context; the executor runs them with the ``runScript`` tool, through the tool
  pipeline (journaled intent first, never re-run blindly after a crash).
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import os
import re
from pathlib import Path
from typing import Any

from stepline import time
from stepline._paths import escape
from stepline.engine._context import StepContext
from stepline.engine._flow import CursorFlow
from stepline.engine._runner import register_driver
from stepline.errors import ReaderError, StepFailed
from stepline.executors import STANDING_HINT, MenuOption, standing_text
from stepline.executors._human import PERSON_HINT
from stepline.formats._files import read_text
from stepline.formats._frontmatter import read_frontmatter
from stepline.formats._prose import lean_step_text, shared_sections
from stepline.model import EventType, Run, StepStatus, WorkflowSpec
from stepline.skills._headless import ResultFacts, executor_status, fill_result, pick_shape, result_shapes
from stepline.skills._load import SKILL_FORMAT, find_skill
from stepline.skills._render import CUSTOM_TOKEN, RenderEnv, render_skill_text
from stepline.skills._resume import InProgress, output_mentions, steps_in_progress
from stepline.skills._skill import Checkpoint, SkillDoc, checkpoints_in, read_doc, read_skill_files, scripts_in
from stepline.stepchain._chain import (
    ask,
    check_visits,
    choose,
    hand_over,
    record,
    recorded,
    settle,
    side_trip,
    skip_pending,
    visit_id,
)
from stepline.stepchain._menus import Option, Route, build_menu, match_answer, menu_text

__all__ = ["SkillFlow", "run_skill_step"]

_FACT_LIMIT = 65_536
_SKIPPED_DIRS = {"_bmad", "node_modules", ".git", ".stepline", ".venv", "__pycache__"}
_FINAL = {"final", "done", "complete", "completed", "approved"}
_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")
_EXISTS = re.compile(r"\b(?:if|when)\s+`([^`]+)`\s+(exists|is missing|does not exist|doesn't exist)\b", re.I)


class SkillFlow(CursorFlow):
    """One step at a time: where the last completed step's route led (the run's cursor), else the first step."""

    def __init__(self, workflow: WorkflowSpec, run: Run) -> None:
        super().__init__(run, workflow.steps[0].id)


# ---------------------------------------------------------------------------------------------------- helpers


def _skill(ctx: StepContext) -> dict[str, Any]:
    record: dict[str, Any] = ctx.run.workflow.meta["skills"][ctx.spec.meta["skill"]]
    return record


def _env(ctx: StepContext) -> RenderEnv:
    skill = _skill(ctx)
    return RenderEnv(project_root=ctx.project_root, skill_root=Path(skill["root"]), central=skill["central"],
                     customization=skill["customization"], names=dict(ctx.variables))


def _render(ctx: StepContext, text: str) -> str:
    return render_skill_text(text, _env(ctx), _skill(ctx).get("module"))


def _set_var(ctx: StepContext, name: str, value: Any) -> None:
    if ctx.variables.get(name) != value:
        ctx.emit(EventType.VARIABLE_SET, {"name": name, "value": value})


def _move(ctx: StepContext, following: str | None, **why: Any) -> None:
    """Set the run's cursor to the next visit (None: the skill is done, steps off the path are skipped)."""
    visit = visit_id(ctx.run, following) if following else None
    ctx.emit(EventType.CURSOR_MOVED, {"next": visit, "from": ctx.spec.id, **why})
    if visit is None:
        skip_pending(ctx, "not on the path this run took")
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
    skill = _skill(ctx)
    shapes = result_shapes(Path(skill["root"]))
    if not shapes:
        return
    reported = executor_status([*(s.summary for s in ctx.run.steps.values()), ctx.step.summary])
    intent = str(ctx.variables.get("intent") or "") or None
    shape = pick_shape(shapes, intent, reported.get("status") == "blocked")
    assert shape is not None  # shapes is not empty

    def exists(path: str) -> bool:
        return (Path(path) if Path(path).is_absolute() else ctx.project_root / path).exists()

    result = fill_result(shape, ResultFacts(intent=intent, render=lambda text: _render(ctx, text), exists=exists,
                                            files=_files_written(ctx), reported=reported, variables=ctx.variables))
    ctx.engine.store.open(ctx.run.run_id).write("result.json", result)
    record(ctx, "result", "result", {"shape": f"{shape.path}:{shape.line}", "file": "result.json"}, result)
    ctx.step.summary = f"{ctx.step.summary or 'done'}; result.json: {result['status']}"


def _scripts(ctx: StepContext, doc: SkillDoc) -> list[dict[str, Any]]:
    """The scripts the step names, each with where it is and whether it exists (for the runScript tool)."""
    skill_root = Path(_skill(ctx)["root"])
    found = []
    for line, raw in doc.scripts:
        rendered = raw.replace("{project-root}", str(ctx.project_root)).replace("{skill-root}", str(skill_root))
        path = Path(rendered) if Path(rendered).is_absolute() else skill_root / rendered
        found.append({"script": str(path), "line": line, "exists": path.is_file(), "tool": "runScript"})
    return found


def _base_context(ctx: StepContext) -> dict[str, Any]:
    """What every request of the skill carries besides its instructions: the skill it is of, under the names the
    run's standing configuration gives them (an executor sends only what that does not already show, a skill
    handed over to). An unattended run (#yolo, non-interactive; the standing configuration's ``headless``) is the
    skill's headless mode: its ``references/headless.md``, if any, is named (the executor reads it through
    ``read``, as the skill says to, for the whole run)."""
    skill = _skill(ctx)
    context = {"skill-name": skill["name"], "skill-root": skill["root"], "intent": ctx.variables.get("intent")}
    headless = Path(skill["root"]) / "references" / "headless.md"
    if ctx.run.mode != "normal" and headless.is_file():
        context["headless_reference"] = str(headless)
    return context


def _entry_rules(ctx: StepContext) -> str:
    """The entry document's standing rules (not its activation, not its pointer to the first step)."""
    skill = _skill(ctx)
    files = read_skill_files(Path(skill["root"]))
    if files.kind != "step-files":  # a sections skill: the sections before its activation (the rest run as steps)
        end = next((i for i, s in enumerate(files.sections) if "activation" in s.title.lower()), 0)
        return _render(ctx, "\n\n".join(s.text for s in files.sections[:end]))
    # The lead before the entry's first section (its title, goal, standing notes), without control prose.
    lead = lean_step_text(read_frontmatter(files.entry.text).body.split("\n## ", 1)[0]).text.strip()
    keep = [s.text for s in files.sections if "activation" not in s.title.lower() and "step-" not in s.text
            and s.title.lower() != "conventions"]
    return _render(ctx, "\n\n".join(filter(None, [lead, *keep])))


def _shared_sections(ctx: StepContext) -> tuple[str, ...]:
    """The sections the skill's step files repeat word for word (see :func:`formats._prose.shared_sections`): sent
    once, in the standing text, and left out of each step's own; none when the full step text is configured."""
    if ctx.engine.config.prompts.full_step_text:
        return ()
    skill = _skill(ctx)
    files = [Path(skill["root"]) / str(spec.meta["file"]) for spec in ctx.run.workflow.steps
             if spec.meta.get("role") == "step-file" and spec.meta.get("skill") == ctx.spec.meta["skill"]]
    return shared_sections([lean_step_text(read_text(file)).text for file in dict.fromkeys(files) if file.is_file()])


def _standing(ctx: StepContext, **more: Any) -> dict[str, Any]:
    """The hints of a request that sees the whole run (issue 21): the skill's standing rules, the sections its step
    files repeat and the persistent facts activation loaded, the same text for every request of the run, which the
    executor sends once in the prefix a provider caches, instead of restated in each step's context."""
    facts = [f"- {f['fact']}" if "fact" in f else f"- {f['path']}:\n{f['text']}"
             for f in ctx.variables.get("persistent_facts") or [] if isinstance(f, dict) and ("fact" in f or
                                                                                             f.get("text"))]
    repeated = _render(ctx, "\n\n".join(section.strip("\n") for section in _shared_sections(ctx)))
    text = "\n\n".join(filter(None, [_entry_rules(ctx), repeated])) + (
        "\n\n## Persistent facts\n" + "\n".join(facts) if facts else "")
    configuration = {**ctx.run.workflow.variables, "headless": ctx.run.mode != "normal"}
    return {STANDING_HINT: standing_text(text, configuration), **more}


# --------------------------------------------------------------------------------------------------- activate


def _glob(root: Path, pattern: str) -> list[Path]:
    """Files under ``root`` matching ``pattern``; ``**`` walks the tree without entering ``_bmad``, hidden
    folders, ``node_modules`` or virtual environments (a fact is the project's, and the walk stays cheap)."""
    if "**" not in pattern:
        return sorted(p for p in root.glob(pattern) if p.is_file())
    prefix, _, suffix = pattern.partition("**/")
    base = root / prefix if prefix else root
    found: list[Path] = []
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in names:
            parts = (Path(folder) / name).relative_to(base).parts
            if any(fnmatch.fnmatchcase("/".join(parts[i:]), suffix) for i in range(len(parts))):
                found.append(Path(folder) / name)
    return sorted(found)


def _load_facts(ctx: StepContext, entries: list[Any]) -> list[dict[str, Any]]:
    """``persistent_facts``: ``file:`` globs under the project root read as text, other entries as written."""
    facts: list[dict[str, Any]] = []
    root = ctx.project_root
    for entry in entries:
        text = _render(ctx, str(entry))
        if not text.startswith("file:"):
            facts.append({"fact": text})
            continue
        pattern = text[len("file:"):].strip()
        relative = pattern[len(str(root)) + 1:] if pattern.startswith(str(root) + "/") else pattern
        if escape(root, relative, follow=False) is not None:
            # The format reads facts from "paths or globs under {project-root}": a fact from elsewhere would
            # make the run depend on files the project does not hold (and carry them into every request).
            raise StepFailed(f"persistent_facts entry {str(entry)!r} names a file outside the project root",
                             hint="file: entries are paths or globs under {project-root}; copy the file into the "
                                  "project, or give the fact as text")
        matches = _glob(root, relative)
        for path in matches:
            if escape(root, path) is not None:  # a symlink to a file elsewhere: as a path naming one
                raise StepFailed(f"persistent_facts entry {str(entry)!r}: {path.relative_to(root)} is a symlink to "
                                 f"a file outside the project root", hint="copy the file into the project, or give "
                                                                          "the fact as text")
            content = read_text(path)
            digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
            facts.append({"source": str(entry), "path": str(path), "sha256": digest, "text": content[:_FACT_LIMIT]})
        if not matches:
            facts.append({"source": str(entry), "path": None, "note": f"no file matches {pattern}"})
    return facts


async def _activate(ctx: StepContext) -> None:
    skill = _skill(ctx)
    block = skill.get("block") or "workflow"
    values = skill["customization"].get(block) or {}
    record(ctx, "customization", "customization", {"skill": skill["name"], "layers": skill["layers"]},
            {"block": block, "values": values})
    record(ctx, "config", "config", {"files": skill["config_files"]}, {"central": skill["central"]})
    if "date" not in ctx.variables:
        _set_var(ctx, "date", time.now().date().isoformat())
    facts = _load_facts(ctx, list(values.get("persistent_facts") or []) if isinstance(values, dict) else [])
    _set_var(ctx, "persistent_facts", facts)
    files = sum(1 for f in facts if f.get("path"))
    ctx.step.summary = (f"customization from {len(skill['layers'])} file(s), config from "
                        f"{len(skill['config_files'])} file(s), {files} persistent fact file(s)")
    _move(ctx, ctx.spec.meta.get("next"))


#: An activation item the runtime has done (``activate``): resolving the customization, running the prepend and
#: append steps (each a step of its own), loading the persistent facts and the config, the closing check of them.
_RUNTIME_ACTIVATION = re.compile(
    r"(?i)resolve_customization|resolve\s+(the\s+)?\w+\s+block|activation_steps_(prepend|append)|"
    r"execute\s+(prepend|append)\s+steps|persistent[_ ]facts|load\s+config|config(\.user)?\.yaml|"
    r"activation\s+is\s+complete")


def _activation_left(text: str) -> tuple[str, list[str]]:
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


async def _on_activation(ctx: StepContext) -> None:
    skill = _skill(ctx)
    files = read_skill_files(Path(skill["root"]))
    section = next((s for s in files.sections if "activation" in s.title.lower()), None)
    raw = section.text if section else ""
    left, runtime = (raw, []) if ctx.engine.config.prompts.full_step_text else _activation_left(raw)
    if not left.strip():  # nothing but what the runtime did: no request (issue 21)
        hand_over(ctx, "activation", files.entry.path, raw, "", left_out={"runtime": runtime}, requested=False)
        ctx.step.summary = "activation done by the runtime: " + ("; ".join(runtime) or "nothing to do")
        _move(ctx, ctx.spec.meta.get("next"))
        return
    done = ("The runtime has already resolved the customization, loaded the config and the persistent facts "
            "(above), and runs each activation_steps_prepend/append entry as a step of its own. Do only what is "
            "left of the activation below; do not start the main workflow.")
    content = f"{done}\n\n{_render(ctx, left)}"
    hand_over(ctx, "activation", files.entry.path, raw, content, left_out={"runtime": runtime})
    # the activation's judgement (a persona, a greeting) is a model's: nothing for a person at the terminal
    outcome = await ctx.invoke("work", content=content, context=_base_context(ctx),
                               hints=_standing(ctx, **{PERSON_HINT: ""}))
    ctx.step.summary = outcome.summary
    _move(ctx, ctx.spec.meta.get("next"))


async def _instruction(ctx: StepContext) -> None:
    text = _render(ctx, str(ctx.spec.meta["text"]))
    outcome = await ctx.invoke("work", content=text, context=_base_context(ctx), hints=_standing(ctx))
    ctx.step.summary = outcome.summary
    _move(ctx, ctx.spec.meta.get("next"))


async def _shim(ctx: StepContext) -> None:
    skill = _skill(ctx)
    files = read_skill_files(Path(skill["root"]))
    target = ctx.run.workflow.meta.get("forwarded_to")
    raw = files.skill.text
    content = (f"This skill forwards to {target}; the runtime runs {target} next with intent "
               f"{ctx.variables.get('intent') or '(its own detection)'} and this skill's customization fields. "
               f"Do only what this skill asks before forwarding (its notice).\n\n{_render(ctx, raw)}")
    hand_over(ctx, "shim", files.skill.path, raw, content)
    outcome = await ctx.invoke("work", content=content, context={**_base_context(ctx), "forwards_to": target},
                               hints=_standing(ctx))
    ctx.step.summary = outcome.summary
    _move(ctx, ctx.spec.meta.get("next"))


async def _agent_menu(ctx: StepContext) -> None:
    """An agent's menu (its customization's ``agent.menu``): the person picks an item (in #yolo the executor, as
    the user; journaled with who chose). An item's ``prompt`` is one request; an item's ``skill`` is another run,
    which the runtime does not start inside this one: the run ends naming the command that runs it."""
    items: list[dict[str, str]] = ctx.spec.meta["items"]
    options = [Option(i["code"], i["description"], Route("goto", None)) for i in items]
    picked = await choose(ctx, options, hints=_standing(ctx), name="agent-menu", note="The agent's menu:")
    item = items[options.index(picked)]
    by = "executor" if ctx.run.mode == "yolo" else "person"
    ctx.step.choice = picked.key
    chosen = f"[{picked.key}] {picked.label}"
    command = None
    if "skill" in item:
        found = find_skill(item["skill"], Path(_skill(ctx)["root"]), ctx.project_root)
        where = os.path.relpath(found, ctx.project_root) if found and found.is_relative_to(ctx.project_root) \
            else found
        command = f"stepline run {where}" if where is not None else None
    dispatched = {"skill": item["skill"], "command": command} if "skill" in item else {"prompt": item.get("prompt")}
    record(ctx, "agent-menu", "agent-menu", {"items": [f"[{o.key}] {o.label}" for o in options]},
           {"choice": picked.key, **dispatched, "by": by})
    if "skill" not in item:
        outcome = await ctx.invoke("work", title=chosen, content=_render(ctx, item.get("prompt", "")),
                                   context=_base_context(ctx), hints=_standing(ctx))
        ctx.step.summary = f"{chosen}: {outcome.summary or 'done'}"
    else:  # the command leads: a progress line is cut short, and the command is what the person needs from it
        ctx.step.summary = (f"next: `{command}` ({chosen})" if command else
                            f"skill {item['skill']} is not installed (install its module) ({chosen})")
    _move(ctx, ctx.spec.meta.get("next"), reason=f"{chosen} chosen at the agent's menu", by=by)


# ------------------------------------------------------------------------------------------------- step files


def _status_of(ctx: StepContext, value: Any) -> tuple[Path, str] | None:
    if not isinstance(value, str) or not value.strip().endswith(".md"):
        return None
    path = Path(value)
    path = path if path.is_absolute() else ctx.project_root / path
    if not path.is_file():
        return None
    status = read_frontmatter(read_text(path), path=str(path)).data.get("status")
    return (path, str(status)) if status not in (None, "") else None


def _existence_fact(ctx: StepContext, line: str) -> tuple[bool, Path] | None:
    """``(holds, path)`` for a route line that hinges on a file (``If `{x}/STOP.md` exists``, ``is missing``,
    ``does not exist``), once the path renders completely; None for any other line."""
    match = _EXISTS.search(line)
    if match is None:
        return None
    rendered = _render(ctx, match[1])
    if "{" in rendered or "<" in rendered:
        return None
    path = Path(rendered) if Path(rendered).is_absolute() else ctx.project_root / rendered
    exists = path.exists()
    return (exists if match[2].lower() == "exists" else not exists), path


def _offered_routes(ctx: StepContext) -> dict[str, list[dict[str, Any]]]:
    """The routes the executor may choose at the end of the step's work, by target: each other route (an EARLY
    EXIT, a loop back) whose line does not hinge on a file on disk (the runtime settles those)."""
    offered: dict[str, list[dict[str, Any]]] = {}
    for route in ctx.spec.meta.get("routes", []):
        if _EXISTS.search(route["text"]) is None:
            offered.setdefault(route["target"], []).append(route)
    return offered


def _routes_text(ctx: StepContext, offered: dict[str, list[dict[str, Any]]]) -> str:
    """The part of the step's last request that asks where the step leaves (issue 21: in the same turn as the
    work, by the model that did it, instead of a request per route)."""
    default = ctx.spec.meta.get("next")
    following = next((s.meta.get("file") for s in ctx.run.workflow.steps if s.id == default), default)
    # The routes' own lines are in the step's text above: each is named by its file, not restated.
    lines = [f"- `{routes[0]['file']}`{' (a loop back)' if routes[0]['loop'] else ''}" for routes in offered.values()]
    return ("\n\n## Where this step leaves\nThe runtime follows the step's routes: do not read or follow another "
            f"step file. When you finish, set `choice` to `next` to go on to {following or 'the end of the skill'}, "
            "or to the step file below if the text above sends the work there now (an EARLY EXIT, a loop "
            "back):\n" + "\n".join(lines))


async def _route(ctx: StepContext, doc: SkillDoc, proposal: str | None = None,
                 offered: dict[str, list[dict[str, Any]]] | None = None) -> tuple[str | None, str, str]:
    """Where the step leaves: ``(step id, reason, decided by)``; see the module doc. ``proposal``: the choice the
    executor made among the ``offered`` routes at the end of the step's work."""
    meta = ctx.spec.meta
    default = meta.get("next")
    status_routes = {value: (target, line) for value, target, line in meta.get("status_routes", [])}
    if status_routes:
        for name in [*meta.get("frontmatter", {}), *ctx.variables]:
            fact = _status_of(ctx, ctx.variables.get(name))
            if fact is None:
                continue
            path, status = fact
            if status in status_routes:
                target, line = status_routes[status]
                return target, (f"{name} = {path} has status {status!r}, which {meta['file']}:{line} sends to "
                                f"{target}"), "runtime"
            break
    by_target: dict[str, list[dict[str, Any]]] = {}
    for route in meta.get("routes", []):
        on_disk = _existence_fact(ctx, route["text"])
        if on_disk is not None:  # "If `x` exists → …": the disk answers, not the executor
            holds, file = on_disk
            if holds:
                return route["target"], f"{file} {'exists' if file.exists() else 'is missing'}, " \
                                        f"which {meta['file']}:{route['line']} sends to {route['target']}", "runtime"
            continue
        by_target.setdefault(route["target"], []).append(route)
    picked = (proposal or "").strip().strip("`").strip()
    if offered and picked.lower() == "next":
        return default, "the executor chose the step's NEXT at the end of its work", "executor"
    for target, routes in (offered or {}).items():
        if picked in (target, routes[0]["file"]):
            return target, f"the executor chose {routes[0]['file']} at the end of its work", "executor"
    for target, routes in by_target.items():
        condition = " / ".join(f"{meta['file']}:{r['line']}: {r['text']}" for r in routes)[:1500]
        outcome = await ctx.invoke(
            "decide", title=f"route from {meta['file']} to {routes[0]['file']}", condition=condition,
            content=(f"You performed step {meta['file']}. Instead of going on to its next step "
                     f"({default or 'the end'}), it may leave for {routes[0]['file']}"
                     f"{' (a loop back)' if routes[0]['loop'] else ''}. Does the condition below hold now?"),
            hints=_standing(ctx, default=False), context=_base_context(ctx))
        if outcome.decision:
            return target, outcome.reason or "the executor decided the condition holds", "executor"
    return default, ("the step's NEXT" if default else "the step names no next step: the skill ends"), "runtime"


def _subagent_layers(ctx: StepContext, text: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The ``{workflow.<x>}`` tokens of ``text`` whose value is a list of layers (tables with an ``instruction``)
    that launch subagents, each with its active layers (an empty instruction disables one)."""
    skill = _skill(ctx)
    found = []
    for match in {m[0]: m for m in CUSTOM_TOKEN.finditer(text)}.values():  # a token named twice is one set of layers
        value = (skill["customization"].get(match[1]) or {}).get(match[2])
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            continue
        active = [v for v in value if str(v.get("instruction", "")).strip()]
        if any("subagent" in str(v["instruction"]).lower() for v in active):
            found.append((match[0], active))
    return found


async def _run_subagents(ctx: StepContext, layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each layer as its own ``work`` request (a fresh context: only its instruction), at most
    ``runtime.concurrency`` at a time; the results in the layers' order."""
    limit = asyncio.Semaphore(ctx.engine.config.runtime.concurrency)

    async def one(layer: dict[str, Any]) -> dict[str, Any]:
        async with limit:  # FIFO: the requests are numbered in the layers' order, the same on a resume
            name = str(layer.get("name") or layer.get("id"))
            # The run's standing text stays in the request (the prefix a provider caches for the whole run); the
            # executor tells the subagent that a fresh context works from its own instruction only.
            outcome = await ctx.invoke("work", title=f"subagent: {name}", content=_render(ctx, layer["instruction"]),
                                       hints=_standing(ctx),
                                       context={**_base_context(ctx), "subagent": layer.get("id"),
                                                "fresh_context": True})
        return {"id": layer.get("id"), "name": name, "result": outcome.summary or ""}

    return list(await asyncio.gather(*(one(layer) for layer in layers)))


#: A sentence of a checkpoint option's handler that only moves on (``Continue to checkpoint with full spec``,
#: ``→ Step 3``, ``then return to CHECKPOINT 1``): the runtime does it; the rest of a handler is the model's work.
_MOVE_ON = re.compile(r"^(?:(?:then|and)\s+)?(?:→|->|(?:continue|proceed|return|go(?: back)?|move on|loop back|skip)\b"
                      r"(?:.*\b(?:checkpoint|step|next|menu)\b.*)?$)", re.I)


def _handler_has_work(handler: str) -> bool:
    """Whether a checkpoint option's handler asks for work beyond moving on (issue 21: no request for a handler
    that only continues, returns to the checkpoint or names the next step)."""
    body = re.sub(r"^\s*[-*]\s*(?:\*\*)?\[?\w\]?(?:\*\*)?\s*:\s*", "", handler.strip())
    sentences = [p.strip(" .*_`") for p in re.split(r"(?<=[.;!])\s+|,\s*then\s+|\n+", body)]
    return any(p and not _MOVE_ON.match(p) for p in sentences)


def _stops_offered(ctx: StepContext, checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints the step's work request asks about in its ``finish`` (issue 21: one turn per step): each
    conditional one the runtime cannot read now, up to the first unconditional one; in #yolo, where the model
    answers as the user, that unconditional one too (its option is the answer)."""
    offered = []
    for checkpoint in checkpoints:
        if checkpoint.condition is None:
            if ctx.run.mode == "yolo":
                offered.append(checkpoint)
            break
        if _condition_fact(ctx, checkpoint.condition) is None:
            offered.append(checkpoint)
    return offered


def _stop_choices(ctx: StepContext, offered: list[Checkpoint]) -> list[str]:
    """The ``finish`` choices that name the step's first stop: ``line N: [K]`` (#yolo: the checkpoint stops and,
    as the user, you choose K) or ``line N: stop`` (the person is asked); the unconditional checkpoint's first."""
    ordered = sorted(offered, key=lambda c: c.condition is not None)
    if ctx.run.mode == "yolo":
        return [f"line {c.line}: [{key}]" for c in ordered for key, _ in c.options]
    return [f"line {c.line}: stop" for c in ordered]


def _stops_text(ctx: StepContext, offered: list[Checkpoint], plain: str) -> str:
    """The part of the step's work request that asks for its first stop in the ``finish`` (``plain``: the choice
    that says no checkpoint stops, or None when one always does)."""
    lines = []
    for c in offered:
        options = " | ".join(f"[{k}] {label}" for k, label in c.options)
        lines.append(f"- line {c.line} ({options})" + (f" stops only if: {c.condition}" if c.condition else
                                                          " always stops"))
    answer = ("This run is unattended: answer as the user would, in the same finish — choose "
              "`line <line>: [<key>]`, the checkpoint that stops first and the option you choose there (the runtime "
              "then has its handler done)." if ctx.run.mode == "yolo" else
              "Choose `line <line>: stop` for the first one whose condition holds (the runtime then asks the person).")
    return ("\n\n## Checkpoints (say in your finish)\n" + "\n".join(lines) + "\n" + answer +
            (f" If none stops, choose {plain}." if plain else ""))


def _said_stops(choice: str | None, offered: list[Checkpoint]) -> dict[int, tuple[bool, str | None, str]]:
    """What the work request's ``finish`` choice says of each offered checkpoint: ``line -> (stops, option key,
    why)``. A named checkpoint stops (the conditional ones before it do not); any other choice (a route, the
    plain one) says none stops; no choice says nothing."""
    if not choice or not offered:
        return {}
    match = re.fullmatch(r"line (\d+): (?:\[(\w+)\]|stop)", choice.strip())
    said: dict[int, tuple[bool, str | None, str]] = {}
    for c in offered:
        if match is None:
            if c.condition is not None:
                said[c.line] = False, None, f"the executor's finish of the step's work chose {choice!r}, no stop"
            continue
        if c.line == int(match[1]):
            said[c.line] = True, match[2], f"the executor's finish of the step's work chose {choice!r}"
            break
        if c.condition is not None:
            said[c.line] = False, None, f"the executor's finish named a later stop ({choice!r})"
    return said


_TOKEN = r"`?(\{\{?[^{}`\s]+\}?\})`?"
_COMPARE = re.compile(_TOKEN + r"\s+(?P<op>==|=|!=|is not|is)\s+`?[\"']?(?P<value>[\w.-]+)[\"']?`?", re.I)
_EMPTINESS = re.compile(_TOKEN + r"\s+is\s+(?P<value>non-empty|not empty|empty|set|unset)\b", re.I)
_FIELD = re.compile(_TOKEN + r"\s+(?:exists\s+)?(?:with|has)\s+`(?P<field>\w+):\s*(?P<value>[\w-]+)`", re.I)
_EMPTY = {"", "[]", "{}", "none", "null"}


def _condition_fact(ctx: StepContext, condition: str) -> tuple[bool, str] | None:
    """``(holds, why)`` for a condition the runtime can read — a file that exists or is missing, a variable or
    ``{workflow.<x>}`` / config value compared to a literal or (non-)empty, a frontmatter field of the file a
    variable names — or None when it is prose only the executor can judge."""
    negate = condition.strip().lower().startswith("unless")
    fact: tuple[bool, str] | None = None
    on_disk = _existence_fact(ctx, condition)
    if on_disk is not None:
        holds, path = on_disk
        fact = holds, f"{path} {'exists' if path.exists() else 'is missing'}"
    elif (match := _FIELD.search(condition)) is not None:
        path = Path(_render(ctx, match[1]))
        if "{" not in str(path):
            path = path if path.is_absolute() else ctx.project_root / path
            value = read_frontmatter(read_text(path), path=str(path)).data.get(match["field"]) \
                if path.is_file() else None
            fact = str(value) == match["value"], f"{path} has {match['field']}: {value}"
    elif (match := _EMPTINESS.search(condition)) is not None:
        value = _render(ctx, match[1])
        if match[1] not in value:
            empty = value.strip().lower() in _EMPTY
            fact = (empty if match["value"].lower() in ("empty", "unset") else not empty), f"{match[1]} = {value!r}"
    elif (match := _COMPARE.search(condition)) is not None:
        value = _render(ctx, match[1])
        if match[1] not in value:
            equal = value.strip().lower() == match["value"].lower()
            fact = (not equal if match["op"].lower() in ("!=", "is not") else equal), f"{match[1]} = {value!r}"
    if fact is None:
        return None
    return (not fact[0], f"{fact[1]} (unless)") if negate else fact


async def _checkpoint_applies(ctx: StepContext, checkpoint: Checkpoint,
                              said: tuple[bool, str | None, str] | None = None) -> bool:
    """Whether a conditional checkpoint stops for the person: the runtime decides a condition it can read, else
    what the executor ``said`` in the finish of the step's work, else the executor's ``decide``; journaled with
    the reason and who decided."""
    name = str(ctx.spec.meta["file"])
    assert checkpoint.condition is not None
    earlier = recorded(ctx, f"checkpoint/{checkpoint.line}/condition")
    if isinstance(earlier, dict):  # decided before the run was interrupted: the same decision
        return bool(earlier["holds"])
    fact = _condition_fact(ctx, checkpoint.condition)
    if fact is not None:
        holds, reason = fact[0], f"{fact[1]}: {'holds' if fact[0] else 'does not hold'}"
        by = "runtime"
    elif said is not None:
        holds, reason, by = said[0], said[2], "executor"
    else:
        outcome = await ctx.invoke(
            "decide", title=f"checkpoint at {name}:{checkpoint.line}?", condition=checkpoint.condition,
            content=(f"You performed step {name}. Its checkpoint at line {checkpoint.line} (" +
                     " | ".join(f"[{k}] {label}" for k, label in checkpoint.options) +
                     ") stops for the person only if the condition below holds. Does it hold now?"),
            hints=_standing(ctx, default=False), context=_base_context(ctx))
        holds, reason, by = bool(outcome.decision), outcome.reason or "the executor's decision", "executor"
    record(ctx, f"checkpoint/{checkpoint.line}/condition", "checkpoint-condition",
            {"line": checkpoint.line, "condition": checkpoint.condition}, {"holds": holds, "reason": reason, "by": by})
    return holds


async def _checkpoint(ctx: StepContext, checkpoint: Checkpoint, proposal: str | None,
                      offered: dict[str, list[dict[str, Any]]] | None = None, said: str | None = None) -> str | None:
    """Present a step's checkpoint to the person (in #yolo the executor answers as the user) and have the
    executor do what the step says for the choice; an option that returns to the checkpoint asks again."""
    name = str(ctx.spec.meta["file"])
    options = [Option(key, label, Route("goto", None), default=i == 0)
               for i, (key, label) in enumerate(checkpoint.options)]
    where = f"{name}:{checkpoint.line}:"
    note = where
    for round_no in range(ctx.engine.config.runtime.max_step_visits):
        if round_no == 0 and said is not None and ctx.run.mode == "yolo" and \
                match_answer(said, options) is not None:  # answered as the user in the step's own finish
            key = f"{ctx.spec.id}/{ctx.attempt}/checkpoint/{checkpoint.line}/{round_no}"
            ctx.engine.human.record(ctx, key, said, by=ctx.engine.executor.name or "executor")
            answer: str | None = said
        else:  # the person's own choice, when their executor brought it with the step's work, is not asked again
            mine = proposal if round_no == 0 and ctx.run.mode != "yolo" and \
                match_answer(proposal, options) is not None else None
            answer = await ask(ctx, options, executor=False, round_no=round_no, hints=_standing(ctx), note=note,
                               proposal=mine, name=f"checkpoint/{checkpoint.line}")
        picked = match_answer(answer, options)
        if picked is None:
            note = f"{where} {answer!r} is not one of the options."
            continue
        chosen = (picked.key, picked.label)
        handler = checkpoint.handlers.get(chosen[0], "")
        record(ctx, f"checkpoint/{checkpoint.line}/{round_no}", "checkpoint", {"line": checkpoint.line},
                {"choice": chosen[0], "by": "executor" if ctx.run.mode == "yolo" else "person",
                 **({"asked": "in the finish of the step's work"} if answer is said else {}),
                 **({"handler": "moves on only: no request"} if handler and not _handler_has_work(handler) else {})})
        ctx.step.choice = chosen[0]
        route: str | None = None
        # the step's last word so far: it names where the step leaves, when routes are offered
        if handler and _handler_has_work(handler):
            outcome = await ctx.invoke(
                "work", title=f"[{chosen[0]}] {chosen[1]} at {name}:{checkpoint.line}",
                content=f"At {name}:{checkpoint.line} the person chose [{chosen[0]}] {chosen[1]}. Do what the step "
                        f"says for it:\n\n{_render(ctx, handler)}" + (_routes_text(ctx, offered) if offered else ""),
                context=_base_context(ctx), hints=_standing(ctx),
                choices=["next", *(r[0]["file"] for r in offered.values())] if offered else None)
            route = outcome.choice
        if "return to checkpoint" not in handler.lower():
            return route
        note = where
    raise StepFailed(f"{name}:{checkpoint.line}: the checkpoint was not passed in "
                     f"{ctx.engine.config.runtime.max_step_visits} rounds", retryable=False,
                     hint="choose an option that moves on, or raise runtime.max_step_visits")


def _first_step_file(ctx: StepContext) -> str | None:
    return next((s.id for s in ctx.run.workflow.steps if s.meta.get("role") == "step-file"
                 and s.meta.get("skill") == ctx.spec.meta.get("skill")), None)


async def _resumed_step_files(ctx: StepContext) -> bool:
    """At the first step file: an output the step files name whose ``stepsCompleted`` shows the work half done
    is offered to resume (see :func:`_offer_resume`); resumed, the run goes on at its first step not done."""
    skill = _skill(ctx)
    root = Path(skill["root"])
    steps = [s for s in ctx.run.workflow.steps if s.meta.get("role") == "step-file"
             and s.meta.get("skill") == skill["name"]]
    texts = [read_text(root / str(s.meta["file"])) for s in steps if (root / str(s.meta["file"])).is_file()]
    paths = []
    for raw in output_mentions(texts):
        rendered = _render(ctx, raw)
        if "{" not in rendered:
            paths.append(Path(rendered) if Path(rendered).is_absolute() else ctx.project_root / rendered)
    found = steps_in_progress(paths, [s.id for s in steps], root)
    if not found:
        return False
    resumed = await _offer_resume(ctx, found)
    if resumed is None:
        return False
    document, reason, by = resumed
    _set_var(ctx, "resume_from", str(document.path))
    ctx.step.summary = f"not run: {document.path} shows it done ({document.detail}); resumed at {document.resume_at}"
    _move(ctx, document.resume_at, reason=reason, by=by)
    return True


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
    folder = find_skill(wanted, Path(_skill(ctx)["root"]), ctx.project_root)
    path = folder / "SKILL.md" if folder is not None else Path(wanted)
    text = read_text(path) if path.is_file() else ""
    await side_trip(ctx, option, path, text, _render(ctx, text) if text else f"{option.label}: {option.handler}",
                    context={**_base_context(ctx), "invoked_from": ctx.spec.meta["file"]}, hints=_standing(ctx))


async def _step_file(ctx: StepContext) -> None:
    check_visits(ctx, hint="answer the loop's decide differently, or raise runtime.max_step_visits")
    skill = _skill(ctx)
    root = Path(skill["root"])
    name = str(ctx.spec.meta["file"])
    path = root / name
    if not path.is_file():
        # the skill was checked when the run was loaded: the file went away since (an update, a deletion)
        raise ReaderError("this step file is gone (the skill changed after the run started)", path=str(path),
                          hint="restore it, then resume the run; or start a new run of the skill")
    if ctx.spec.id == _first_step_file(ctx) and await _resumed_step_files(ctx):
        return
    doc = read_doc(root, path)
    context = {**_base_context(ctx), "step_file": str(path), "scripts": _scripts(ctx, doc)}
    layers = _subagent_layers(ctx, doc.text)
    # The link to the next step file and the rules the runtime keeps are not sent (unless configured).
    lean = None if ctx.engine.config.prompts.full_step_text else lean_step_text(doc.text, _shared_sections(ctx))
    raw = lean.text if lean is not None else doc.text
    for token, active in layers:  # the runtime launches them: the step is told so, and what they need from it
        needs = sorted({n for layer in active for n in _PLACEHOLDER.findall(_render(ctx, layer["instruction"]))})
        names = ", ".join(str(layer.get("name") or layer.get("id")) for layer in active)
        ask = "".join(f" Before you finish, set it with set_var('{n}', …) — the layers need it." for n in needs)
        raw = raw.replace(token, f"(The runtime runs these {len(active)} layers as parallel subagents once you "
                                 f"finish this request: {names}.{ask} Do everything before them now.)")
    checkpoints = checkpoints_in(doc.text)
    content = person = _render(ctx, raw)  # the step as a person reads it; the runtime's notes to a model follow
    options = _step_menu(ctx, checkpoints)
    if options:  # the runtime presents it: the executor must not present it too
        content = (f"The runtime presents this step's menu to the person after this request ({menu_text(options)})"
                   " and hands you their choice: do the step's work up to the menu, do not present it yourself."
                   f"\n\n{content}")
    stops = _stops_offered(ctx, checkpoints)
    said_here = {c.line for c in stops}
    if checkpoints:  # the runtime asks them: the executor must not ask them too
        content = ("The runtime presents this step's checkpoint(s) to the person after this request ("
                   + "; ".join(f"line {c.line}" + (f" (only if: {c.condition} — the runtime settles it)"
                                                    if c.condition and c.line not in said_here else "")
                               for c in checkpoints)
                   + ") and hands you their choice: do the step's work up to each checkpoint, do not ask it "
                   "yourself" + ("; say in your finish which stops first (see Checkpoints below)" if stops else "")
                   + ".\n\n" + content)
    # Where the step leaves is asked in its last work request: after its subagents, if any, else in its work
    # request and again in a conditional checkpoint's handler, if one runs. A step with an unconditional
    # checkpoint acts on the person's choice after its work request: its routes stay decide requests.
    offered = _offered_routes(ctx) if not options and (layers or all(c.condition for c in checkpoints)) else {}
    choices = ["next", *(routes[0]["file"] for routes in offered.values())] if offered else None
    hand_over(ctx, "step", path, doc.text, content, left_out=lean.left_out if lean is not None else None)
    menu = [o.as_menu_option() for o in options] or [
        MenuOption(k, label) for c in [c for c in checkpoints if c.condition is None][:1] for k, label in c.options]
    last = not layers and bool(offered)
    # Its checkpoints are asked in the same finish too (issue 21: one turn): whether a condition the runtime cannot
    # read holds, and in #yolo the option the model chooses as the user; a decide or an answer request is the
    # fallback for an executor whose finish does not say.
    always = any(c.condition is None for c in stops)
    plain = (choices if last else None) or ([] if always or not stops else ["continue"])
    work_choices = [*plain, *_stop_choices(ctx, stops)] or None
    text = content + (_routes_text(ctx, offered) if last else "")
    if stops:
        text += _stops_text(ctx, stops, " or ".join(f"`{c}`" for c in plain))
        menu = []  # the unconditional checkpoint's options are among the choices (#yolo) or the person's alone
    outcome = await ctx.invoke("work", content=text, context=context, menu=menu,
                               hints=_standing(ctx, **{PERSON_HINT: person}), choices=work_choices)
    ctx.step.summary = outcome.summary
    proposal = outcome.choice
    said = _said_stops(outcome.choice, stops)
    route = outcome.choice if last and outcome.choice in (choices or []) else None
    for checkpoint in checkpoints:
        told = said.get(checkpoint.line)
        if checkpoint.condition is None or await _checkpoint_applies(ctx, checkpoint, told):
            # the finish's choice answers the menu (a person's executor) only when the request offered the menu
            chosen = await _checkpoint(ctx, checkpoint, outcome.choice if menu else None, offered if last else None,
                                       said=told[1] if told else None)
            route = chosen if last and chosen is not None else route
    if layers:
        results = [result for _, active in layers for result in await _run_subagents(ctx, active)]
        record(ctx, "subagents", "subagents", {"layers": [r["id"] for r in results]}, results)
        # The continuation repeats the step's request word for word and adds the layers' results after it: a
        # provider serves the repeated part from its cache (issue 21) instead of a restated step text.
        found = "\n\n".join(f"#### {r['name']} (`{r['id']}`) — its subagent returned:\n\n{r['result']}"
                              for r in results)
        continuation = (f"{content}\n\n## After the subagents\nThis request continues the step: the layers ran as "
                        "parallel subagents, their results are below. Do the rest of the step, after the layers "
                        f"(do not redo what came before them).\n\n{found}")
        if offered:
            continuation += _routes_text(ctx, offered)
        outcome = await ctx.invoke("work", content=continuation, context=context, hints=_standing(ctx),
                                   choices=choices)
        ctx.step.summary = outcome.summary
        route = outcome.choice
    if options:
        picked = await settle(ctx, options, executor=ctx.run.mode == "yolo", proposal=proposal, hints=_standing(ctx),
                              side_trip=lambda option: _side_trip(ctx, option), context=context)
        ctx.step.choice = picked.key
        if picked.route.target != ctx.spec.meta.get("next"):  # an option that leaves elsewhere, or ends the skill
            reason, by = f"[{picked.key}] {picked.label} chosen at the step's menu", "person"
            record(ctx, "route", "route", {"from": name}, {"next": picked.route.target, "reason": reason, "by": by})
            _move(ctx, picked.route.target, reason=reason, by=by)
            return
    target, reason, by = await _route(ctx, doc, route, offered)
    record(ctx, "route", "route", {"from": name}, {"next": target, "reason": reason, "by": by})
    _move(ctx, target, reason=reason, by=by)


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
        picked = await choose(ctx, options, hints=_standing(ctx), name="mode")
        chosen = modes[options.index(picked)]
        reason, by = f"[{picked.key}] {picked.label} chosen", "executor" if ctx.run.mode == "yolo" else "person"
    _set_var(ctx, "intent", chosen["mode"])
    record(ctx, "mode", "mode", {"modes": [m["mode"] for m in modes]},
           {"mode": chosen["mode"], "reason": reason, "by": by})
    ctx.step.summary, ctx.step.choice = f"mode {chosen['mode']} ({reason})", chosen["key"]
    _move(ctx, chosen["entry"], reason=reason, by=by)


# --------------------------------------------------------------------------------------------------- sections


def _outputs_exist(ctx: StepContext) -> tuple[bool, list[str]]:
    """Whether the skill's output folders hold earlier documents, and the ones still in progress."""
    skill = _skill(ctx)
    block = skill["customization"].get(skill.get("block") or "workflow") or {}
    folders = [Path(_render(ctx, str(v))) for k, v in block.items()
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


async def _intent(ctx: StepContext) -> None:
    modes: list[dict[str, Any]] = ctx.spec.meta["modes"]
    names = [m["name"] for m in modes]
    given = str(ctx.variables.get("intent") or "").strip().lower()
    chosen: dict[str, Any] | None = None
    reason, by = "", "runtime"
    if given:
        chosen = next((m for m in modes if m["name"].lower() == given), None)
        if chosen is None:
            raise StepFailed(f"intent {given!r} is not one of this skill's modes ({', '.join(names)})",
                             retryable=False, hint=f"use --mode {names[0].lower()}")
        reason = f"intent {given!r} given (pre-resolved)"
        if chosen is _resuming_mode(modes):  # Create given (--mode, a shim): its offer to resume still stands
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
    _set_var(ctx, "intent", chosen["name"].lower())
    record(ctx, "intent", "intent", {"modes": names}, {"intent": chosen["name"], "reason": reason, "by": by})
    ctx.step.summary = f"intent {chosen['name']} ({reason})"
    # The mode's own paragraph is work too ("Bind {doc_workspace} …, seed the memlog"), done before its sections;
    # a mode naming no section ("Load `references/validate.md`") is only that.
    text = chosen["text"]
    context = {**_base_context(ctx), "intent": chosen["name"].lower(),
               "scripts": _scripts(ctx, SkillDoc(path=Path(ctx.spec.source.path if ctx.spec.source else "."),
                                                 text=text, frontmatter={}, body_line=1, scripts=scripts_in(text))),
               "then": [s.removeprefix("section-") for s in chosen["sections"]]}
    if ctx.variables.get("resume_from"):
        context["resume"] = (f"Resume the document in progress {ctx.variables['resume_from']} (its workspace "
                             f"{ctx.variables.get('doc_workspace')}) rather than starting over: bind no new "
                             "workspace, do not seed a new memlog; continue from what it and its memlog hold.")
    outcome = await ctx.invoke("work", title=f"intent {chosen['name']}", content=_render(ctx, text), context=context,
                               hints=_standing(ctx))
    ctx.step.summary += f"; {outcome.summary or 'done'}"
    _move(ctx, chosen["sections"][0] if chosen["sections"] else None, reason=reason, by=by)


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
    _set_var(ctx, "resume_candidates", in_progress)
    resumed = await _offer_resume(ctx, [InProgress(Path(p), _status_detail(Path(p))) for p in in_progress])
    if resumed is None:
        return None
    document, reason, by = resumed
    _set_var(ctx, "resume_from", str(document.path))
    _set_var(ctx, "doc_workspace", str(document.path.parent))
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
        chosen = await choose(ctx, options, hints=_standing(ctx), name="resume",
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
    picked = await choose(ctx, options, hints=_standing(ctx), name="intent",
                          note="Which intent? " + " ".join(m["text"][:200] for m in modes))
    return modes[options.index(picked)], f"[{picked.key}] {picked.label}"


def _next_section(ctx: StepContext) -> str | None:
    intent = next((s for s in ctx.run.workflow.steps if s.meta.get("role") == "intent"
                   and s.meta.get("skill") == ctx.spec.meta.get("skill")), None)
    if intent is None:
        following: str | None = ctx.spec.meta.get("next")
        return following
    current = str(ctx.variables.get("intent") or "").lower()
    mode = next((m for m in intent.meta["modes"] if m["name"].lower() == current), None)
    order: list[str] = mode["sections"] if mode else []
    base = ctx.spec.id.split("@", 1)[0]
    return order[order.index(base) + 1] if base in order and order.index(base) + 1 < len(order) else None


async def _section(ctx: StepContext) -> None:
    skill = _skill(ctx)
    files = read_skill_files(Path(skill["root"]))
    role = ctx.spec.meta["role"]
    if role == "body":
        raw = read_frontmatter(files.skill.text).body
    else:
        section = next((s for s in files.sections if s.title == ctx.spec.meta["title"]), None)
        if section is None:
            raise ReaderError(f"section {ctx.spec.meta['title']!r} is no longer in the skill",
                              path=str(files.entry.path))
        refs = list(ctx.spec.meta.get("references", []))
        raw = section.text + "".join("\n\n" + s.text for s in files.sections if s.title in refs)
    content = person = _render(ctx, raw)
    options = _step_menu(ctx, [])  # a section's menu or halt, as a step file's (the section's own text only)
    if options:
        content = (f"The runtime presents this section's menu to the person after this request "
                   f"({menu_text(options)}) and hands you their choice: do the section's work up to the menu, do not "
                   f"present it yourself.\n\n{content}")
    hand_over(ctx, "section", files.entry.path, raw, content)
    doc = SkillDoc(path=files.entry.path, text=raw, frontmatter={}, body_line=1, scripts=scripts_in(raw))
    context = {**_base_context(ctx), "section": ctx.spec.meta.get("title"), "scripts": _scripts(ctx, doc)}
    outcome = await ctx.invoke("work", content=content, context=context, menu=[o.as_menu_option() for o in options],
                               hints=_standing(ctx, **{PERSON_HINT: person}))
    ctx.step.summary = outcome.summary
    if options:
        picked = await settle(ctx, options, executor=ctx.run.mode == "yolo", proposal=outcome.choice,
                              hints=_standing(ctx), side_trip=lambda option: _side_trip(ctx, option), context=context)
        ctx.step.choice = picked.key
    _move(ctx, _next_section(ctx))


# ------------------------------------------------------------------------------------------------------ entry

_ROLES = {"activate": _activate, "on-activation": _on_activation, "instruction": _instruction, "shim": _shim,
          "step-file": _step_file, "mode": _router,
          "agent-menu": _agent_menu, "intent": _intent, "section": _section, "body": _section}


async def run_skill_step(ctx: StepContext) -> None:
    """Run one step of an Agent Skill (see the module doc)."""
    await _ROLES[str(ctx.spec.meta["role"])](ctx)


register_driver(SKILL_FORMAT, run_skill_step, SkillFlow)
