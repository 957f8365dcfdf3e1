"""Running BMAD micro-file (and hybrid) workflows (SPEC R-F3, R-F4): the runtime walks the step files.

What the model was told to do in prose, the runtime does:

* **Initialisation** is a step of its own, ``workflow-init`` (workflow.md's "INITIALIZATION SEQUENCE"): it
  fixes ``{{date}}``, asks the tri-modal router's ``[C]/[V]/[E]`` question when no ``--mode`` was given, and
  does ``step-01b-continue``'s job: when the output document's frontmatter lists ``stepsCompleted``, the
  steps it names are skipped and the run starts at the step after the furthest one.
* **Just-in-time**: a step's file is read when that step runs, never earlier, and only it is handed to the
  executor (variables substituted). Each hand-over is journaled (path, sha256 of the file and of what was
  sent) so an audit can show that no later step leaked.
* **Menus** and **halts** are the step chain's (:mod:`stepline.stepchain`): what the step's text hands the person
  before them (its plan's points) is asked first, in its order; an authored menu is the person's, asked once.
* **State**: on continue, the runtime appends the step to the document's ``stepsCompleted`` (numbers or
  names, in the document's style), sets ``lastStep`` and adds the files the executor read to
  ``inputDocuments``. The update is journaled as an intent before the file is written and is idempotent, so
  a crash at any instant is repaired on resume and the journal and the frontmatter agree.

Revisited steps run as visits (``<step>@<n>``, :func:`stepline.stepchain._chain.visit_id`), failing with the
loop's diagnostic past ``runtime.max_step_visits``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from stepline import time
from stepline._placeholders import PROJECT_ROOT, Kind, find, substitute
from stepline.bmad._microfile import Progress, completed_step_index, load_csv_data, read_progress
from stepline.engine import CursorFlow, StepContext, register_driver, sha256_file
from stepline.errors import NotFoundError, ReaderError
from stepline.executors import STANDING_HINT, standing_text
from stepline.formats import read_frontmatter, read_text
from stepline.model import EventType, Run, StepSpec, StepStatus, WorkflowSpec
from stepline.stepchain import (
    Option,
    Point,
    Route,
    Turn,
    before_menu,
    build_menu,
    check_visits,
    choose,
    condition_fact,
    follow,
    hand_over,
    lean_step_text,
    record,
    save_state,
    settle,
    shared_sections,
    side_trip,
    skip_pending,
    visit_id,
    workflow_standing,
)
from stepline.store import atomic_write_bytes

__all__ = ["INIT_STEP", "MicrofileFlow", "run_microfile_step"]

#: Id of the step that does workflow.md's initialisation (mode, continuation) before the first step file.
INIT_STEP = "workflow-init"
_ELICITATION = "{project-root}/_bmad/core/workflows/advanced-elicitation/workflow.xml"
_PARTY_MODE = "{project-root}/_bmad/core/workflows/party-mode/workflow.md"


# ------------------------------------------------------------------------------------------------------ flow


def _ensure_init_step(workflow: WorkflowSpec) -> None:
    """Put the initialisation step first (once: a resumed run's manifest may already hold it)."""
    if any(spec.id == INIT_STEP for spec in workflow.steps):
        return
    workflow.steps.insert(0, StepSpec(
        id=INIT_STEP, name="initialise the workflow",
        description="choose the mode, fix {{date}}, continue from the output document's stepsCompleted",
        source=workflow.source, meta={"init": True, "file": workflow.meta.get("workflow_file")}))


class MicrofileFlow(CursorFlow):
    """The step order of a micro-file run: one step at a time, where the last completed step's choice led,
    starting at the initialisation step (see :class:`~stepline.engine._flow.CursorFlow`)."""

    def __init__(self, workflow: WorkflowSpec, run: Run) -> None:
        _ensure_init_step(workflow)
        if INIT_STEP not in run.steps:  # listed first, as it runs first
            run.steps = {INIT_STEP: run.step(INIT_STEP), **run.steps}
        super().__init__(run, INIT_STEP)


# ---------------------------------------------------------------------------------------------------- helpers


def _step_for_file(workflow: WorkflowSpec, file: str) -> StepSpec | None:
    return next((s for s in workflow.steps if s.meta.get("file") == file and not s.meta.get("init")), None)


def _diagnostics_for(workflow: WorkflowSpec, file: str, codes: tuple[str, ...] | None = None) -> list[str]:
    return [f"{d['path']}:{d['line'] or 1}: {d['message']}" for d in workflow.meta.get("diagnostics", [])
            if d.get("path") == file and (codes is None or d.get("code") in codes)]


def _output_path(ctx: StepContext, spec: StepSpec) -> Path | None:
    """The step's ``outputFile`` once every variable in it is known (else None: nothing to track)."""
    if not spec.outputs:
        return None
    rendered = ctx.render(spec.outputs[0])
    if find(rendered):
        return None
    path = Path(rendered)
    return path if path.is_absolute() else ctx.project_root / path


# ------------------------------------------------------------------------------------------------------ init


async def _choose_mode(ctx: StepContext) -> tuple[str | None, str]:
    """The mode and entry step: the one loaded, or the router's answer (yolo: the executor's)."""
    workflow = ctx.run.workflow
    first = workflow.meta.get("first_step")
    if first:
        return workflow.meta.get("mode"), str(first)
    router = workflow.meta.get("router")
    chosen_mode = workflow.meta.get("mode")
    if router and chosen_mode:  # --mode named a mode whose entry step is missing
        return chosen_mode, _entry(workflow, router, chosen_mode)
    if not router:
        steps = [s.id for s in workflow.steps if not s.meta.get("init")]
        if not steps:  # its entry step names no file: the reader's diagnostic says which, and where
            file = str(workflow.meta.get("workflow_file"))
            why = _diagnostics_for(workflow, file, ("broken-chain",))
            raise ReaderError("the workflow has no step to run" + (f" ({why[0]})" if why else ""), path=file, line=1,
                              hint="fix the path of its first step file")
        return None, steps[0]
    raw = router["options"]
    options = [Option(str(o["key"] or i), str(o["label"] or o["mode"]), Route("goto", o["entry"]), default=i == 1)
               for i, o in enumerate(raw, start=1)]
    chosen = await choose(ctx, options, hints=_standing_hints(ctx), name="menu")
    mode = str(raw[options.index(chosen)]["mode"])
    return mode, _entry(workflow, router, mode)


def _entry(workflow: WorkflowSpec, router: dict[str, Any], mode: str) -> str:
    option = next(o for o in router["options"] if o["mode"] == mode)
    if option["entry"] is None:
        found = [d["message"] for d in workflow.meta.get("diagnostics", [])
                 if d.get("path") == router["file"] and d.get("line") == option["line"]]
        raise ReaderError(f"mode {mode!r} has no first step file" + (f": {found[0]}" if found else ""),
                          path=router["file"], line=option["line"], hint="choose another mode or fix the router")
    return str(option["entry"])


def _mode_steps(workflow: WorkflowSpec, mode: str | None) -> list[StepSpec]:
    return [s for s in workflow.steps
            if not s.meta.get("init") and not s.meta.get("is_continuation") and (mode is None or
                                                                                  s.meta.get("mode") in (mode, None))]


def _chain_output(ctx: StepContext, entry: str) -> Path | None:
    """The document the chain from ``entry`` keeps its state in: the first ``outputFile`` along ``next``."""
    workflow = ctx.run.workflow
    seen: set[str] = set()
    spec: StepSpec | None = workflow.step(entry)
    while spec is not None and spec.id not in seen:
        seen.add(spec.id)
        path = _output_path(ctx, spec)
        if path is not None:
            return path
        following = spec.meta.get("next")
        spec = _step_for_file(workflow, following) if following else None
    return None


async def _initialise(ctx: StepContext) -> None:
    workflow = ctx.run.workflow
    if "date" not in ctx.variables:
        ctx.emit(EventType.VARIABLE_SET, {"name": "date", "value": time.now().date().isoformat()})
    mode, entry = await _choose_mode(ctx)
    document = _chain_output(ctx, entry)
    start: str | None = entry
    summary = f"starting at {entry}" + (f" (mode {mode})" if mode else "")
    progress = read_progress(document) if document is not None and document.is_file() else Progress()
    if progress.steps_completed or progress.last_step is not None:
        steps = _mode_steps(workflow, mode)
        index = completed_step_index(progress, steps)
        if index >= 0:
            done = {s.id for s in steps if completed_step_index(progress, [s]) == 0} | {steps[index].id}
            skip_pending(ctx, f"completed in {document} (stepsCompleted)", done)
            following = steps[index].meta.get("next")
            target = _step_for_file(workflow, following) if following else None
            start = target.id if target is not None else None
            summary = (f"continuing {document} at {start}" if start else
                       f"{document} is already complete (stepsCompleted {list(progress.steps_completed)})")
    ctx.emit(EventType.CURSOR_MOVED, {"next": start, "mode": mode, "document": str(document) if document else None})
    if start is None:
        skip_pending(ctx, "not on the path this run took")
    ctx.step.summary = summary
    ctx.step.choice = mode


# ------------------------------------------------------------------------------------------------------ steps


def _shared_sections(ctx: StepContext) -> tuple[str, ...]:
    """The sections the workflow's step files repeat word for word (see :func:`stepline.stepchain.shared_sections`),
    read from the files as they are now."""
    files = (Path(str(spec.meta.get("file") or "")) for spec in ctx.run.workflow.steps)
    return _shared_of(tuple(read_text(file) for file in files if file.suffix == ".md" and file.is_file()))


@functools.lru_cache(maxsize=16)
def _shared_of(texts: tuple[str, ...]) -> tuple[str, ...]:
    """The shared sections of these step files' texts: every step of a run asks again, for the same texts."""
    return shared_sections([lean_step_text(text).text for text in texts])


def _standing(ctx: StepContext, shared: tuple[str, ...]) -> str:
    """The run's standing instructions: workflow.md's goal and role and the rules its step files repeat,
    the same text for every step, which a model executor sends once in the prefix a provider caches."""
    source = ctx.run.workflow.source
    entry = Path(source.path) if source is not None else None
    readable = entry is not None and entry.suffix == ".md" and entry.is_file()
    goal = workflow_standing(read_text(entry)) if entry is not None and readable else ""
    text = ctx.render("\n\n".join(filter(None, (goal, *(s.strip("\n") for s in shared)))))
    return standing_text(text, ctx.run.workflow.variables)


def _standing_hints(ctx: StepContext) -> dict[str, Any]:
    """The hints of a request that carries the run's standing text (every request of the run shares it)."""
    shared = () if ctx.engine.config.prompts.full_step_text else _shared_sections(ctx)
    return {STANDING_HINT: _standing(ctx, shared)}


def _read_step(ctx: StepContext, path: Path) -> tuple[str, list[str]]:
    """The step file's text (read now, just in time) and its frontmatter warnings; unusable frontmatter fails."""
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: step file not found", hint="the workflow changed since the run started") from None
    fm = read_frontmatter(text, path=str(path))
    fatal = [d for d in fm.diagnostics if d.code != "yaml-syntax"]
    if fatal:
        raise ReaderError(f"the step's frontmatter is broken: {fatal[0].message}", path=str(path), line=fatal[0].line,
                          hint="fix the step file, then `stepline resume` the run")
    return text, [f"{d.path}:{d.line}: {d.message}" for d in fm.diagnostics]


def _check_target(ctx: StepContext, target: str, text: str) -> None:
    """Fail, naming file:line, when the step file a step leads to does not exist."""
    if Path(target).is_file():
        return
    meta = ctx.spec.meta
    fm = read_frontmatter(text, path=str(meta["file"]))
    raw = dict(meta["frontmatter"])
    key = next((k for k, v in raw.items() if v == target), None)
    line = fm.line_of(key) if key else None
    what = f"{key} {fm.data.get(key)!r}" if key else "the next step"
    raise ReaderError(f"{what} names a step file that does not exist ({target})", path=str(meta["file"]),
                      line=line, hint="fix the path in the step file")


def _load_data(ctx: StepContext, path: Path, text: str) -> dict[str, list[dict[str, str]]]:
    """CSV data files the step's frontmatter references, loaded now for this step only.

    A CSV shipped with the workflow (under ``_bmad/`` or the workflow folder) must exist; one elsewhere (a
    results file the workflow keeps in the project), or in a folder named by a variable the run has not set yet
    (``{build_tracking_targetLocation}/module-help.csv``, which an earlier step decides), is handed over when it
    exists and is the step's to create.
    """
    fm = read_frontmatter(text, path=str(path))
    data: dict[str, list[dict[str, str]]] = {}
    shipped = (ctx.project_root / "_bmad", Path(ctx.run.workflow.root or path.parent))
    for key, value in ctx.spec.meta["frontmatter"].items():
        if isinstance(value, str) and value.lower().endswith(".csv"):
            text = ctx.render(value)
            rendered = Path(text)
            csv_path = rendered if rendered.is_absolute() else path.parent / rendered
            if csv_path.is_file() or (not find(text)
                                      and any(csv_path.is_relative_to(root) for root in shipped)):
                data[key] = load_csv_data(csv_path, referenced_from=f"{path}:{fm.line_of(key) or 1} ({key})")
    return data


def _create_document(ctx: StepContext, document: Path) -> None:
    """Create the output document from the step's template the first time a step needs it (journaled)."""
    key = f"{ctx.spec.id}/{ctx.attempt}/document"
    templates = [Path(ctx.render(t)) for t in ctx.spec.templates]
    template = next((t for t in templates if t.is_file()), None)
    if document.exists() or template is None or key in ctx.engine.calls.recorded:
        return
    args = {"path": str(document), "template": str(template)}
    ctx.emit(EventType.CALL_STARTED, {"key": key, "op": "create_document", "args": args}, sync=True)
    document.parent.mkdir(parents=True, exist_ok=True)
    # only {{var}}: a template's other braces (``date: { system-date }``) stay as written
    filled = substitute(read_text(template), ctx.variables, kinds={Kind.RUNTIME})
    atomic_write_bytes(document, filled.encode("utf-8"))
    record(ctx, "document", "create_document", args, {"sha256": sha256_file(document)})


async def _side_trip(ctx: StepContext, option: Option, env: dict[str, Any]) -> None:
    """``[A]``/``[P]``: the advanced-elicitation or party-mode workflow the step names (else the core one)."""
    elicit = option.route.kind == "elicit"
    raw = env.get("advancedElicitationTask" if elicit else "partyModeWorkflow") or (
        _ELICITATION if elicit else _PARTY_MODE)
    path = Path(substitute(str(raw), {**env, PROJECT_ROOT: str(ctx.project_root)}, nested=True))
    text = read_text(path) if path.is_file() else ""
    await side_trip(ctx, option, path, text, text or f"{option.label}: {option.handler}",
                    context={"invoked_from": ctx.spec.meta["file"]}, hints=_standing_hints(ctx))


async def _run_step_file(ctx: StepContext) -> None:
    spec, meta = ctx.spec, ctx.spec.meta
    check_visits(ctx, why=_diagnostics_for(ctx.run.workflow, str(ctx.spec.meta["file"]), ("self-loop",)),
                 hint="fix the step's nextStepFile/menu, or raise runtime.max_step_visits")
    path = Path(str(meta["file"]))
    text, warnings = _read_step(ctx, path)
    if meta.get("next"):
        _check_target(ctx, str(meta["next"]), text)
    data = _load_data(ctx, path, text)
    output = _output_path(ctx, spec)
    document = output if output is not None and output.suffix == ".md" else None
    if document is not None:
        _create_document(ctx, document)
    env = {**ctx.variables, **meta["frontmatter"]}
    # The menu, the next-step loading and the frontmatter rules are the runtime's: not sent (unless configured);
    # the rules every step file repeats go once, with workflow.md's goal and role, in the run's standing text.
    shared = _shared_sections(ctx)
    lean = None if ctx.engine.config.prompts.full_step_text else lean_step_text(text, shared)
    content = substitute(lean.text if lean is not None else text, env, nested=True)
    visited = frozenset(str(s.meta.get("file")) for s in ctx.run.workflow.steps
                        if ctx.run.steps.get(s.id) is not None and ctx.run.steps[s.id].status != StepStatus.PENDING)
    options, authored = build_menu(meta, env, visited)
    hand_over(ctx, "step", path, text, content, warnings=warnings, data=sorted(data),
               left_out=lean.left_out if lean is not None else None)
    context = {"step_file": str(path), "data": data, "output": str(output) if output else None,
               "warnings": warnings}
    hints = {"output": output is not None, "outputs": [str(output)] if output else [],
             STANDING_HINT: _standing(ctx, shared if lean is not None else ())}
    # what the step's text hands the person before its menu, asked in its order (the menu is the chain's, below)
    points = before_menu([Point.from_json(p) for p in meta.get("points") or []], meta)

    def render(text: str) -> str:
        return substitute(text, env, nested=True)

    followed = await follow(ctx, points, Turn(
        content=content, title=spec.name or spec.id, context=context, hints=hints, render=render,
        fact=lambda condition: condition_fact(condition, render, ctx.project_root)))
    outcome = await ctx.invoke("work", content=followed.rest(content), menu=[o.as_menu_option() for o in options],
                               context=context, hints=followed.hints(hints))
    ctx.step.summary = outcome.summary
    target: str | None = meta.get("next")
    if options:
        chosen = await settle(ctx, options, executor=ctx.run.mode == "yolo" or not authored, proposal=outcome.choice,
                              hints=_standing_hints(ctx), side_trip=lambda option: _side_trip(ctx, option, env),
                              context={"step_file": meta["file"]})
        ctx.step.choice = chosen.key
        target = chosen.route.target
    following: StepSpec | None = None
    if target is not None:
        _check_target(ctx, target, text)
        following = _step_for_file(ctx.run.workflow, target)
        if following is None:
            raise ReaderError(f"{target} is not a step of this workflow", path=str(path))
    if document is not None:
        save_state(ctx, document, text)
    visit = visit_id(ctx.run, following.id) if following is not None else None
    ctx.emit(EventType.CURSOR_MOVED, {"next": visit, "from": spec.id, "choice": ctx.step.choice})
    if visit is None:
        skip_pending(ctx, "not on the path this run took")


async def run_microfile_step(ctx: StepContext) -> None:
    """Run one step of a micro-file workflow: the initialisation step, or one step file (see the module doc)."""
    if ctx.spec.meta.get("init"):
        await _initialise(ctx)
    else:
        await _run_step_file(ctx)


register_driver("bmad-microfile", run_microfile_step, MicrofileFlow)
