"""A skill as a WorkflowSpec: the runtime's activation, the customization's instructions, then the skill's steps.

The steps, in order:

* ``activate`` — done by the runtime alone: customization resolved (``customize.toml`` + ``_bmad/custom``
  overrides), config loaded, ``persistent_facts`` read, ``{date}`` fixed. Nothing is asked of the executor.
* ``prepend-<n>`` — one step per ``activation_steps_prepend`` entry.
* ``on-activation`` — what the activation prose leaves to judgement (greeting, headless detection), handed to
  the executor with the runtime's work stated as done.
* ``append-<n>`` — one step per ``activation_steps_append`` entry.
* a step-file skill: one step per step file (``step-02-plan``), in the order the links reach them, each with
  the menu and the halts it presents to the person (:mod:`stepline.stepchain._read`);
  a sections skill: ``intent`` when it has intent modes, then one step per section (``section-discovery``);
  a shim: ``shim`` (its own text, the deprecation notice) and then the whole target skill, its intent
  pre-resolved, its legacy customization fields taken from the shim.

Customization is resolved here, at load, because the ``activation_steps_*`` entries are steps; the run's
manifest keeps the resolved values, and ``activate`` journals them with the files they came from.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stepline._placeholders import PROJECT_ROOT, Kind, substitute
from stepline.errors import NotFoundError, ReaderError, UsageError
from stepline.model import SourceRef, StepSpec, WorkflowSpec
from stepline.skills._customize import (
    Customization,
    load_central_config,
    load_module_config,
    resolve_customization,
)
from stepline.skills._points import attach_points
from stepline.skills._skill import (
    Mode,
    Section,
    SkillFiles,
    find_skill,
    read_skill_files,
    referenced_sections,
    route_step_id,
    routed_file,
    skill_folder,
    step_sections,
    unrunnable,
)
from stepline.stepchain import Point, PointKind, before_menu, halts_in, parse_menu, prose_lines

__all__ = ["SKILL_FORMAT", "SkillFrame", "find_skill", "load_skill", "module_of", "skill_finder", "skill_frame",
           "step_id_of"]

#: The WorkflowSpec format of an Agent Skill (one driver runs all three kinds).
SKILL_FORMAT: Literal["bmad-skill"] = "bmad-skill"


def step_id_of(name: str) -> str:
    """The step id of a step file: its stem (``steps/step-01-init.md`` -> ``step-01-init``); a module's file
    outside the skill keeps its folders (``../shared/health-check.md`` -> ``shared-health-check``), so it is
    not taken for a step of the skill with the same name."""
    parts = [p for p in Path(name).with_suffix("").parts if p != ".."] if name.startswith("../") else [Path(name).stem]
    return re.sub(r"[^\w.-]+", "-", "-".join(parts)) or "step"


def module_of(skill_root: Path) -> str | None:
    """The module a skill belongs to: ``_bmad/<module>/…``, else the code of the nearest ``module.yaml``."""
    parts = skill_root.parts
    if "_bmad" in parts:
        index = len(parts) - 1 - parts[::-1].index("_bmad")
        if index + 1 < len(parts):
            return parts[index + 1]
    for parent in skill_root.parents:
        schema = parent / "module.yaml"
        if schema.is_file():
            found = re.search(r"^code:\s*['\"]?([\w-]+)", schema.read_text(encoding="utf-8", errors="replace"), re.M)
            return found[1] if found else parent.name
    return None


def skill_finder(near: Path, project_root: Path | None) -> Callable[[str], Path | None]:
    """The folder of a skill another skill at ``near`` hands over to, by name: in the project's ``_bmad`` tree,
    else beside the module ``near`` belongs to (a source tree: ``src/bmm-skills`` next to ``src/core-skills``);
    nothing further up is searched. The skills there are listed once, on the first look-up."""
    index: dict[str, Path] = {}
    roots: list[Path] = []
    if project_root is not None and (project_root / "_bmad").is_dir():
        roots.append(project_root / "_bmad")
    module = next((p for p in near.parents if (p / "module.yaml").is_file() or p.parent.name == "_bmad"), None)
    if module is not None and module.parent.name != "_bmad":
        roots.append(module.parent)
    elif module is None:
        roots.append(near.parent)  # a folder of skills (``.claude/skills``): its skills are each other's

    def find(name: str) -> Path | None:
        if not index:
            for root in reversed(roots):  # the project's own skills win
                try:
                    found = sorted(root.rglob("SKILL.md"))
                except OSError:
                    continue
                index.update({p.parent.name: p.parent for p in found if "render" not in p.relative_to(root).parts[:1]})
            index.setdefault("", near)
        return index.get(name)

    return find


def _flat_config(central: dict[str, Any], module: str | None, project_root: Path) -> dict[str, Any]:
    """Config values by plain name (``{user_name}``): core first, the skill's module over it, then the module's
    ``config.yaml`` + ``config.user.yaml``, which the skills' prose says to load (``{project-root}`` resolved)."""
    names: dict[str, Any] = {}
    layers = [central.get("core") or {}]
    modules = central.get("modules") or {}
    layers.extend(v for k, v in modules.items() if k != module and isinstance(v, dict))
    if module and isinstance(modules.get(module), dict):
        layers.append(modules[module])
    if module:
        layers.append(load_module_config(project_root, module))
    for layer in layers:
        for key, value in layer.items():
            if not isinstance(value, dict | list):
                names[str(key)] = substitute(value, {PROJECT_ROOT: str(project_root)}, kinds={Kind.VAR}) \
                    if isinstance(value, str) else value
    return names


def _skill_record(files: SkillFiles, project_root: Path, custom: Customization, module: str | None,
                  central: dict[str, Any], config_files: list[str]) -> dict[str, Any]:
    return {"name": files.name, "root": str(files.root), "module": module, "kind": files.kind,
            "entry": str(files.entry.path), "customization": custom.values, "defaults": custom.defaults,
            "block": custom.block(), "layers": list(custom.layers), "central": central,
            "config_files": config_files}


def _instructions(custom: Customization, key: str) -> list[str]:
    block = custom.values.get(custom.block() or "workflow") or {}
    value = block.get(key) if isinstance(block, dict) else None
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [str(v) for v in value if str(v).strip()] if isinstance(value, list) else []


def _skill_steps(files: SkillFiles, custom: Customization, root: Path) -> tuple[list[StepSpec], list[str]]:
    """The steps of one skill (see the module doc), every one naming its skill in ``meta``, then a step for each
    file its text routes to; and the skills its text hands over to."""
    steps = _activation_steps(files, custom)
    if files.kind == "step-files":
        if files.mode_entries:
            steps.append(_router_spec(files))
        steps.extend(_step_file_specs(files))
    elif files.kind == "sections":
        steps.extend(_section_specs(files))
    for before, after in itertools.pairwise(steps):
        before.meta.setdefault("next", after.id)
    if files.kind == "shim":
        steps.insert(0, StepSpec(id="shim", name=f"{files.name} (forwards to {files.forward_to})",
                                 source=SourceRef(path=str(files.skill.path), line=1),
                                 meta={"role": "shim", "skill": files.name}))
    finder = skill_finder(files.root, root)
    attach_points(steps, {files.name: files}, finder)
    routed, handovers = _routed_steps(files, steps, finder)
    return [*steps, *routed], handovers


def _routed_steps(files: SkillFiles, steps: list[StepSpec], finder: Callable[[str], Path | None]
                  ) -> tuple[list[StepSpec], list[str]]:
    """A step for each file the skill's text routes to (``Load `references/validate.md```), each once, the files
    those route to too (the runtime runs a route as the next step, then returns); and the skills the text hands
    over to, in the order it names them."""
    have = {s.id for s in steps}
    routed: list[StepSpec] = []
    handovers: list[str] = []
    pending = list(steps)
    while pending:
        spec = pending.pop(0)
        # a step's menu and its handlers are the chain's: a skill an option invokes is its side trip, not a hand-over
        for point in before_menu([Point.from_json(p) for p in spec.meta.get("points") or []], spec.meta):
            if point.kind is PointKind.HANDOVER and point.resolved is not None and point.target:
                handovers.append(point.target)
            path = routed_file(files, point)
            if path is None or route_step_id(files.root, path) in have:
                continue
            rel = path.relative_to(files.root.resolve()).as_posix()
            route = StepSpec(id=route_step_id(files.root, path), name=f"{rel} (routed to)",
                             source=SourceRef(path=str(path), line=1),
                             meta={"role": "route", "skill": files.name, "file": rel, "next": None})
            attach_points([route], {files.name: files}, finder)
            have.add(route.id)
            routed.append(route)
            pending.append(route)
    return routed, list(dict.fromkeys(handovers))


def _prefixed(steps: list[StepSpec], prefix: str) -> list[StepSpec]:
    """A handed-over skill's steps, their ids (and the ids their ``meta`` names) under ``prefix`` (``bmad-prd:``),
    apart from the steps of the skill that hands over."""
    ids = {s.id for s in steps}

    def named(sid: Any) -> Any:
        return f"{prefix}{sid}" if isinstance(sid, str) and sid in ids else sid

    renamed = []
    for spec in steps:
        meta = dict(spec.meta)
        meta["next"] = named(meta.get("next"))
        if "routes" in meta:
            meta["routes"] = [{**r, "target": named(r["target"])} for r in meta["routes"]]
        if "status_routes" in meta:
            meta["status_routes"] = [[v, named(t), line] for v, t, line in meta["status_routes"]]
        if meta.get("role") == "mode":
            meta["modes"] = [{**m, "entry": named(m["entry"])} for m in meta["modes"]]
        if meta.get("role") == "intent":
            meta["modes"] = [{**m, "sections": [named(t) for t in m["sections"]]} for m in meta["modes"]]
        renamed.append(spec.model_copy(update={"id": named(spec.id), "meta": meta}))
    return renamed


def _activation_steps(files: SkillFiles, custom: Customization) -> list[StepSpec]:
    """``activate``, a step per ``activation_steps_prepend`` entry, ``on-activation``, one per ``_append`` entry."""
    skill = files.name
    source = SourceRef(path=str(files.entry.path), line=1)
    steps = [StepSpec(id="activate", name="activate the skill", source=source,
                      description="resolve customization, load config and persistent facts (the runtime's work)",
                      meta={"role": "activate", "skill": skill})]
    for number, text in enumerate(_instructions(custom, "activation_steps_prepend"), start=1):
        steps.append(StepSpec(id=f"prepend-{number}", name=f"activation step (prepend) {number}", body=text,
                              meta={"role": "instruction", "skill": skill, "text": text}))
    steps.append(StepSpec(id="on-activation", name="on activation", source=source,
                          meta={"role": "on-activation", "skill": skill}))
    for number, text in enumerate(_instructions(custom, "activation_steps_append"), start=1):
        steps.append(StepSpec(id=f"append-{number}", name=f"activation step (append) {number}", body=text,
                              meta={"role": "instruction", "skill": skill, "text": text}))
    items = _agent_menu(custom)
    if items:  # an agent's activation ends presenting its menu and waiting for the person's choice
        steps.append(StepSpec(id="agent-menu", name="the agent's menu", source=source,
                              description="present the agent's menu, wait for a choice, dispatch it",
                              meta={"role": "agent-menu", "skill": skill, "items": items}))
    return steps


def _agent_menu(custom: Customization) -> list[dict[str, str]]:
    """The merged ``[[agent.menu]]`` items (code, description, and its ``skill`` or its ``prompt``)."""
    agent = custom.values.get("agent")
    menu = agent.get("menu") if isinstance(agent, dict) else None
    return [{k: str(item[k]) for k in ("code", "description", "skill", "prompt") if item.get(k) is not None}
            for item in menu or [] if isinstance(item, dict) and item.get("code")]


def _step_file_specs(files: SkillFiles) -> list[StepSpec]:
    specs = []
    known = set(files.steps)
    for name, step in sorted(files.steps.items(), key=lambda item: (item[0] != files.first_step, _order(item[0]))):
        routes = [{"target": step_id_of(r.target), "file": r.target, "line": r.line, "text": r.text,
                   "loop": _is_back(r.target, name)} for r in step.routes if r.target in known]
        status = [[value, step_id_of(target), line] for value, target, line in step.status_routes if target in known]
        doc = files.docs[name]
        prose = prose_lines("\n".join(doc.text.splitlines()[doc.body_line - 1:]), doc.body_line)
        specs.append(StepSpec(
            id=step_id_of(name), name=name, source=SourceRef(path=str(files.root / name), line=1),
            meta={"role": "step-file", "skill": files.name, "file": name,
                  "next": step_id_of(step.next) if step.next and step.next in known else None,
                  "routes": routes, "status_routes": status, "frontmatter": doc.frontmatter,
                  "menu": parse_menu(prose), "halts": [h.as_meta() for h in halts_in(prose)]}))
    return specs


def _router_spec(files: SkillFiles) -> StepSpec:
    """The step that chooses the mode of a router (``steps-c/``, ``steps-v/``, ``steps-e/``): each mode with the
    key and label its entry document's menu gives it (``[V] Validate``), else its initial and name, in the
    menu's order."""
    doc = files.entry
    menu = parse_menu(prose_lines("\n".join(doc.text.splitlines()[doc.body_line - 1:]), doc.body_line))
    ranked = []
    for mode, target in files.mode_entries.items():
        item = next((o for o in menu if o["label"].lower().startswith(mode) or o["key"].lower() == mode[0]), None)
        ranked.append((menu.index(item) if item else len(menu),
                       {"mode": mode, "key": item["key"] if item else mode[0].upper(),
                        "label": item["label"] if item else mode.title(), "entry": step_id_of(target)}))
    modes = [m for _, m in sorted(ranked, key=lambda pair: pair[0])]
    return StepSpec(id="mode", name="choose the mode", source=SourceRef(path=str(doc.path), line=1),
                    description="the entry document routes by mode: " + ", ".join(files.mode_entries),
                    meta={"role": "mode", "skill": files.name, "modes": modes})


def _mode_names(files: SkillFiles) -> list[str]:
    """The modes ``--mode`` may name: a sections skill's intent modes, or a router's (``create``, ``validate``)."""
    return [m.name for m in files.modes] or list(files.mode_entries)


def _order(name: str) -> tuple[int, str]:
    number = re.search(r"step-(\d+)", Path(name).name)
    return (int(number[1]) if number else 10_000, Path(name).name)


def _is_back(target: str, current: str) -> bool:
    number = re.compile(r"step-(\d+)")
    a, b = number.search(Path(target).name), number.search(Path(current).name)
    return bool(a and b and int(a[1]) <= int(b[1]))


def _section_specs(files: SkillFiles) -> list[StepSpec]:
    sections = step_sections(files)
    if not sections and files.activation:
        return []  # activation is the whole skill (an agent's persona and menu): on-activation does it
    if not sections:  # no "On Activation": the skill's whole text is one step, presenting its menu or halt
        doc = files.entry
        prose = prose_lines("\n".join(doc.text.splitlines()[doc.body_line - 1:]), doc.body_line)
        return [StepSpec(id="skill", name=files.name, source=SourceRef(path=str(files.skill.path), line=1),
                         meta={"role": "body", "skill": files.name, "menu": parse_menu(prose),
                               "halts": [h.as_meta() for h in halts_in(prose)]})]
    by_title = {s.title: s for s in sections}
    specs: list[StepSpec] = []
    if files.modes:
        modes: list[dict[str, Any]] = [
            {"name": m.name, "sections": [by_title[t].slug for t in m.sections if t in by_title], "text": m.text,
             "line": m.line} for m in files.modes]
        modes[0]["sections"] += [s.slug for s in _carried_on(sections, files.modes)]
        specs.append(StepSpec(id="intent", name="detect the intent", source=SourceRef(
            path=str(files.entry.path), line=files.modes[0].line), meta={"role": "intent", "skill": files.name,
                                                                         "modes": modes, "next": None}))
        wanted = {str(slug) for mode in modes for slug in mode["sections"]}
        sections = [s for s in sections if s.slug in wanted]
    for section in sections:
        refs = [r.title for r in referenced_sections(section.text, files.sections) if r.title != section.title]
        prose = prose_lines(section.text, section.line)
        specs.append(StepSpec(id=section.slug, name=section.title,
                              source=SourceRef(path=str(files.entry.path), line=section.line),
                              meta={"role": "section", "skill": files.name, "title": section.title,
                                    "references": refs, "menu": parse_menu(prose),
                                    "halts": [h.as_meta() for h in halts_in(prose)],
                                    **({"next": None} if files.modes else {})}))
    return specs


#: a section that states standing rules for the model, not work the run does in order
_STANDING = re.compile(r"(?i)\b(?:constraints?|discipline|rules|principles|guidelines)\b")


def _carried_on(sections: list[Section], modes: list[Mode]) -> list[Section]:
    """The sections the default mode goes on into after the last one it names: those no mode names, no section
    hands over to and that set no standing rules (product-brief's Create begins in ``## Discovery``; its
    ``## Finalize`` follows in the text, named by no mode)."""
    named = {t for m in modes for t in m.sections}
    last = max((i for i, s in enumerate(sections) if s.title in modes[0].sections), default=None)
    if last is None:
        return []
    handed = {r.title for s in sections for r in referenced_sections(s.text, sections) if r.title != s.title}
    return [s for s in sections[last + 1:]
            if s.title not in named and s.title not in handed and not _STANDING.search(s.title)]


def _hand_over_steps(steps: list[StepSpec], skills: dict[str, Any], names: list[str], loaded: set[str],
                     near: Path, root: Path) -> dict[str, str]:
    """The steps of each skill handed over to (``names``, and those the text of each hands over to), appended to
    ``steps`` under the skill's name with their own customization in ``skills``; each skill once. The first step
    of each, by name. A skill that is not installed, a shim, or one BMAD's renderer would refuse is left out:
    the step that hands over to it says so when it runs."""
    firsts: dict[str, str] = {}
    pending = list(names)
    while pending:
        name = pending.pop(0)
        if name in loaded or name in firsts:
            continue
        loaded.add(name)
        folder = find_skill(name, near, root)
        if folder is None:
            continue
        target = read_skill_files(folder)
        if target.kind == "shim" or unrunnable(target):
            continue
        module = module_of(target.root)
        central, config_files = load_central_config(root, module)
        custom = resolve_customization(target.root, root)
        skills[target.name] = _skill_record(target, root, custom, module, central, config_files)
        target_steps, more = _skill_steps(target, custom, root)
        named = _prefixed(target_steps, f"{target.name}:")
        firsts[name] = named[0].id
        steps.extend(named)
        pending.extend(more)
    return firsts


def _forwarded(shim: Customization, target: Customization) -> Customization:
    """The target's customization with the shim's own fields over it (the shim pre-resolves them)."""
    block = target.block() or "workflow"
    given = shim.values.get(shim.block() or "workflow")
    if not isinstance(given, dict):
        return target
    values = dict(target.values)
    values[block] = {**(values.get(block) or {}), **given}
    return Customization(values=values, defaults=target.defaults, layers=target.layers + shim.layers)


def _refuse_unrunnable(files: SkillFiles) -> None:
    """A skill BMAD's renderer would refuse is not run (the run would stop where a link breaks, as if done)."""
    problems = unrunnable(files)
    if problems:
        first = problems[0]
        more = f"; {len(problems) - 1} more" if len(problems) > 1 else ""
        raise ReaderError(first.message, path=first.path, line=first.line,
                          hint=f"fix it{more}: `stepline validate {files.root}` lists every problem")


def _refuse_other_project(files: SkillFiles, root: Path) -> None:
    """A skill installed in another project's ``_bmad`` would run without that project's config and
    customization (its ``{{.key}}`` values left unresolved): refused, saying which project it belongs to."""
    parts = files.root.parts
    if "_bmad" not in parts:
        return  # a source tree's skill: the project given is the one it runs for
    home = Path(*parts[:len(parts) - 1 - parts[::-1].index("_bmad")])
    if home.resolve() != root:
        raise UsageError(f"{files.root} is installed in the project {home}, not in {root}",
                         hint=f"run it from {home}, or with -C {home}")


def _check_mode(files: SkillFiles, mode: str, given_as: str) -> None:
    """``--mode`` (or ``--var intent=``) names one of the skill's intent modes (checked before a run is created)."""
    names = _mode_names(files)
    if not names:
        raise UsageError(f"{given_as}: skill {files.name!r} has no intent modes to choose from",
                         hint="run it without --mode")
    if mode.lower() not in {n.lower() for n in names}:
        raise UsageError(f"{given_as}: skill {files.name!r} has no intent mode {mode!r}",
                         hint="use --mode " + " or --mode ".join(n.lower() for n in names))


@dataclass(frozen=True, slots=True)
class SkillFrame:
    """What the runtime runs of a skill around steps another family's driver runs (an XML-step skill's
    ``<workflow>``, on the legacy interpreter): its activation steps, each naming the step after them as in a
    step-file skill, ``on-complete`` when the customization sets ``on_complete`` and the steps do not run it
    themselves, the ``meta`` the skill driver reads, and the variables the skill sets (``intent`` from
    ``--mode``)."""

    before: list[StepSpec]
    after: list[StepSpec]
    meta: dict[str, Any]
    variables: dict[str, Any]

    def around(self, steps: list[StepSpec]) -> list[StepSpec]:
        """``steps`` framed: the activation steps lead to the first of them."""
        self.before[-1].meta["next"] = steps[0].id if steps else (self.after[0].id if self.after else None)
        return [*self.before, *steps, *self.after]


def skill_frame(path: Path, *, project_root: Path, mode: str | None, instructions: str) -> SkillFrame:
    """The frame of the skill at ``path`` whose steps, written in ``instructions``, another driver runs (see
    :class:`SkillFrame`); ``--mode`` is checked as for any skill."""
    root = Path(project_root).resolve()
    files = read_skill_files(path)
    if mode:
        _check_mode(files, mode, f"--mode {mode}")
    module = module_of(files.root)
    central, config_files = load_central_config(root, module)
    custom = resolve_customization(files.root, root)
    before = _activation_steps(files, custom)
    for step, following in itertools.pairwise(before):
        step.meta["next"] = following.id
    on_complete = _instructions(custom, "on_complete")
    runs_it = "on_complete" in instructions  # v6.11: `resolve_customization.py --key workflow.on_complete`
    after = [StepSpec(id="on-complete", name="on complete (customization)", body=on_complete[0],
                      meta={"role": "instruction", "skill": files.name, "text": on_complete[0], "next": None})
             ] if on_complete and not runs_it else []
    record = _skill_record(files, root, custom, module, central, config_files)
    attach_points([*before, *after], {files.name: files}, skill_finder(files.root, root))
    variables: dict[str, Any] = {"skill-root": str(files.root), "skill-name": files.name}
    if mode:
        variables["intent"] = mode.lower()
    return SkillFrame(before=before, after=after, meta={"skills": {files.name: record}, "skill": files.name},
                      variables=variables)


def load_skill(path: Path | str, *, project_root: Path | str, variables: dict[str, Any] | None = None,
               mode: str | None = None) -> WorkflowSpec:
    """Read the skill at ``path`` (its folder or SKILL.md) into a WorkflowSpec for the ``bmad-skill`` driver.

    ``mode`` (``--mode``) pre-resolves the intent of a skill with intent modes (create, update, validate).
    """
    root = Path(project_root).resolve()
    files = read_skill_files(Path(path))
    _refuse_other_project(files, root)
    _refuse_unrunnable(files)
    module = module_of(files.root)
    central, config_files = load_central_config(root, module)
    custom = resolve_customization(files.root, root)
    skills = {files.name: _skill_record(files, root, custom, module, central, config_files)}
    steps, handovers = _skill_steps(files, custom, root)
    intent = (mode or "").lower() or None
    forwarded = None
    runs = files  # the skill whose steps run: the shim's target for a shim
    if files.kind == "shim":
        target_root = find_skill(str(files.forward_to), files.root, root)
        if target_root is None:
            raise NotFoundError(f"skill {files.name!r} forwards to {files.forward_to!r}, which is not installed",
                                hint=f"install the module holding {files.forward_to}")
        target = read_skill_files(target_root)
        if target.kind == "shim":
            raise ReaderError(f"{files.forward_to} is itself a shim", path=str(target.skill.path), line=1)
        _refuse_unrunnable(target)
        runs = target
        target_module = module_of(target.root)
        target_central, target_files = load_central_config(root, target_module)
        target_custom = _forwarded(custom, resolve_customization(target.root, root))
        skills[target.name] = _skill_record(target, root, target_custom, target_module, target_central,
                                            target_files)
        target_steps, more = _skill_steps(target, target_custom, root)
        shim_step = steps[0]
        shim_step.meta["next"] = target_steps[0].id
        steps = [shim_step, *(s for s in steps[1:] if s.meta.get("role") == "route"), *target_steps]
        handovers = [*handovers, *more]
        intent = intent or files.forward_intent
        forwarded = target.name
    agent = next((s for s in steps if s.meta.get("role") == "agent-menu"), None)
    items = [str(i["skill"]) for i in agent.meta["items"] if "skill" in i] if agent is not None else []
    firsts = _hand_over_steps(steps, skills, [*handovers, *items], {files.name, runs.name}, files.root, root)
    if agent is not None:
        for item in agent.meta["items"]:
            if item.get("skill") in firsts:
                item["step"] = firsts[item["skill"]]
    given = str((variables or {}).get("intent") or "").strip()
    if mode and given and given.lower() != mode.lower():  # the run's --var would win over --mode: say so
        raise UsageError(f"--mode {mode} and --var intent={given} disagree", hint="give one of them")
    if mode:
        _check_mode(runs, mode, f"--mode {mode}")
    elif given and _mode_names(runs):  # a skill without modes may use an `intent` variable of its own
        _check_mode(runs, given, f"--var intent={given}")
    attach_points(steps, {files.name: files, runs.name: runs}, skill_finder(files.root, root))
    names = _flat_config(central, module, root)
    variables = {**names, "project-root": str(root), "skill-root": str(files.root), "skill-name": files.name,
                 **(variables or {})}
    if intent:
        variables["intent"] = intent
    return WorkflowSpec(
        id=files.name, name=files.name, description=files.description, format=SKILL_FORMAT,
        source=SourceRef(path=str(files.skill.path), line=1), root=str(files.root), variables=variables,
        steps=steps, meta={"kind": files.kind, "skills": skills, "skill": files.name, "forwarded_to": forwarded,
                           "intent": intent, "module": module, "handovers": firsts})


def skill_path(path: Path) -> Path:
    """The skill folder for a path that is a skill folder, its SKILL.md or its workflow.md."""
    return skill_folder(path)
