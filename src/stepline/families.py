"""The workflow families stepline runs, in one place: native, BMAD (legacy, hybrid, micro-file), Agent Skills
and CCW.

Each family is a package holding its readers and its step drivers; the engine knows none of them. This module
is the only one that names them all: it picks the reader for a path (:func:`load_workflow`,
:func:`lint_path`) and registers every family's drivers with the engine (:func:`register_drivers`). A new
family is one new package plus its lines here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline.errors import NotFoundError, ReaderError
from stepline.formats import Diagnostic
from stepline.model import WorkflowSpec
from stepline.native import is_native_workflow, lint_native, load_native

if TYPE_CHECKING:
    from stepline.stepchain import Plan, PlanStep, Point

__all__ = ["detect_format", "lint_path", "lint_tree", "load_workflow", "read_plan", "read_plans", "register_drivers",
           "workflows_of_kind"]

#: The modules that register each family's step drivers (and flows) with the engine when imported.
_DRIVERS = (
    "stepline.native._driver",  # native (R-F1)
    "stepline.bmad._legacy_driver",  # bmad-legacy (R-E2..R-E5)
    "stepline.bmad._microfile_driver",  # bmad-microfile and hybrid
    "stepline.skills._driver",  # Agent Skills (R-F8)
    "stepline.ccw._driver",  # CCW sessions (R-E7, R-E8)
    "stepline.sprint._driver",  # the sprint loop's story stages (R-L1)
)
#: Families whose runs never start a run of another family: only their own drivers are needed to run them
#: (a native run then imports no BMAD, skills, CCW or sprint code; the others may start child runs of any).
_SELF_CONTAINED = {"native": "stepline.native._driver"}


def register_drivers(fmt: str | None = None) -> None:
    """Register the step drivers a run of format ``fmt`` needs with the engine: its own family's when that
    family starts no runs of others, else every family's (also with no ``fmt``). Idempotent: a module
    registers once. Every process that drives runs comes here first, so the runs' traces are set up here too
    (:func:`stepline.telemetry.observe_from_env`: nothing unless the ``OTEL_*`` variables ask for them)."""
    from stepline.telemetry import observe_from_env

    observe_from_env()
    own = _SELF_CONTAINED.get(fmt or "")
    for module in (own,) if own else _DRIVERS:
        importlib.import_module(module)
    if not own:
        from stepline.bmad import LegacyFlow
        from stepline.engine import register_driver

        register_driver("bmad-legacy", _run_bmad_legacy_step, LegacyFlow)


def _refuse_skill_without_skill_md(path: Path) -> None:
    """A skill folder whose SKILL.md is missing or misspelled is no workflow (not a micro-file one)."""
    folder = path if path.is_dir() else path.parent
    if path.is_dir() or path.name.lower() == "skill.md" or path.name.startswith("workflow"):
        from stepline.skills import skill_md_missing  # here: a native file needs no skills code

        missing = skill_md_missing(folder)
        if missing is not None:
            raise ReaderError(missing, path=str(folder))


def detect_format(path: Path) -> str:
    """Name the format of the workflow at ``path`` (a file or a folder holding one)."""
    if (path / "SKILL.md" if path.is_dir() else path.parent / "SKILL.md").is_file() and (
            path.is_dir() or path.name == "SKILL.md" or path.name.startswith("workflow")):
        return "bmad-skill"  # a skill folder, its SKILL.md, or the workflow.md it renders
    _refuse_skill_without_skill_md(path)
    if path.is_dir():
        if (path / "workflow.yaml").is_file() and is_native_workflow(path / "workflow.yaml"):
            return "native"
        if (path / "workflow.yaml").is_file():
            return "bmad-legacy"
        if any(path.glob("workflow*.md")):
            return "bmad-legacy" if _holds_xml_steps(path) else "bmad-microfile"
        if path.name.startswith("WFS-") or (path / "workflow-session.json").is_file():
            return "ccw"
        raise ReaderError("no workflow here (expected workflow.yaml, workflow.md, SKILL.md, a WFS-* session or "
                          "a native .yaml/.json file)", path=str(path))
    if is_native_workflow(path):
        return "native"
    if path.name == "workflow.yaml":
        return "bmad-legacy"
    if path.suffix == ".md" and path.name.startswith("workflow"):
        return "bmad-legacy" if _holds_xml_steps(path) else "bmad-microfile"
    raise ReaderError("not a workflow file (expected workflow.yaml, workflow*.md, SKILL.md, or a native "
                      ".yaml/.json file with steps:)", path=str(path))


def _holds_xml_steps(path: Path) -> bool:
    from stepline.bmad import holds_xml_steps  # here: a native file needs no BMAD code

    return holds_xml_steps(path)


def load_workflow(path: Path | str, *, project_root: Path | str | None = None,
                  variables: dict[str, Any] | None = None, mode: str | None = None) -> WorkflowSpec:
    """Read the workflow at ``path`` into the canonical model, whatever its format."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or folder", hint="check the path")
    root = Path(project_root) if project_root is not None else Path.cwd()
    fmt = detect_format(path)
    if fmt == "native":
        return load_native(path / "workflow.yaml" if path.is_dir() else path)
    return _load_other(fmt, path, root.resolve(), variables or {}, mode)


def _load_other(fmt: str, path: Path, root: Path, variables: dict[str, Any], mode: str | None) -> WorkflowSpec:
    folder = path if path.is_dir() else path.parent
    if fmt == "bmad-skill" and _holds_xml_steps(folder):
        return _load_xml_skill(folder, root, variables, mode)
    if fmt == "bmad-skill":
        from stepline.skills import load_skill

        return load_skill(path, project_root=root, variables=variables, mode=mode)
    if fmt in ("bmad-legacy", "bmad-microfile"):
        from stepline.bmad import load_bmad_workflow

        return load_bmad_workflow(path, project_root=root, variables=variables, mode=mode)
    from stepline.ccw import load_ccw_session

    return load_ccw_session(path)


def _load_xml_skill(folder: Path, root: Path, variables: dict[str, Any], mode: str | None) -> WorkflowSpec:
    """A skill whose steps are the runner's XML (in SKILL.md, v6.5 and newer, or in the file it hands over to):
    the legacy interpreter runs them step by step, so each <ask> and HALT reaches the person; around them the
    skill driver runs the skill's activation and ``on_complete`` as for any skill (:func:`_run_bmad_legacy_step`),
    and the run keeps the skill's name (its folder's)."""
    from stepline.bmad import load_bmad_workflow, markdown_workflow
    from stepline.formats import read_text
    from stepline.skills import skill_frame

    text = read_text(markdown_workflow(folder))
    frame = skill_frame(folder, project_root=root, mode=mode, instructions=text[text.find("<workflow"):])
    spec = load_bmad_workflow(folder, project_root=root, variables={**frame.variables, **variables})
    return spec.model_copy(update={"steps": frame.around(spec.steps), "meta": {**spec.meta, **frame.meta}})


async def _run_bmad_legacy_step(ctx: Any) -> None:
    """The ``bmad-legacy`` driver: the legacy interpreter's, but a step with a ``role`` (an XML-step skill's
    activation and on-complete steps, see :func:`_load_xml_skill`) is the skill driver's."""
    from stepline.bmad import run_legacy_step
    from stepline.skills import run_skill_step

    await (run_skill_step if "role" in ctx.spec.meta else run_legacy_step)(ctx)


def _lint_one(fmt: str, path: Path, root: Path) -> list[Diagnostic]:
    if fmt == "native":
        return lint_native(path / "workflow.yaml" if path.is_dir() else path)
    if fmt == "bmad-skill":
        from stepline.skills import lint_skill

        folder = path if path.is_dir() else path.parent
        # a skill whose steps are <workflow> XML is also checked as the legacy workflow it runs as
        if not _holds_xml_steps(folder):
            return lint_skill(path, root)
        return [*lint_skill(path, root), *_lint_one("bmad-legacy", folder, root)]
    if fmt == "bmad-legacy":
        from stepline.bmad import lint_bmad_legacy

        return lint_bmad_legacy(path, root)
    if fmt == "bmad-microfile":
        from stepline.bmad import lint_bmad_microfile

        return lint_bmad_microfile(path, root)
    from stepline.ccw import check_ccw_session

    return check_ccw_session(path)


def lint_path(path: Path, *, project_root: Path | None = None) -> list[Diagnostic]:
    """Every problem in the workflow at ``path``, or in every workflow found under a folder."""
    return lint_tree(path, project_root=project_root)[0]


def _kind(fmt: str, path: Path) -> str:
    """What ``validate`` counts a workflow as: its format, and for a skill its kind (``bmad-skill/shim``)."""
    if fmt != "bmad-skill":
        return fmt
    from stepline.skills import skill_kind

    try:
        return f"bmad-skill/{skill_kind(path)}"
    except ReaderError:
        return "bmad-skill"


def lint_tree(path: Path, *, project_root: Path | None = None) -> tuple[list[Diagnostic], dict[str, int]]:
    """Every problem in the workflow at ``path`` or under a folder, and how many workflows of each kind were checked.

    A folder holding no workflow stepline recognises is an error (``no-workflow``), never a silent pass.
    """
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or folder", hint="check the path")
    root = (project_root or Path.cwd()).resolve()
    try:
        fmt = detect_format(path)
        return _lint_one(fmt, path, root), {_kind(fmt, path): 1}
    except ReaderError as exc:
        if path.is_file():
            raise
        if _is_broken_skill(path):
            return [Diagnostic("error", "unreadable", exc.detail, exc.path or str(path), exc.line)], {"unreadable": 1}
    diagnostics: list[Diagnostic] = []
    counts: dict[str, int] = {}
    for candidate in _workflows_under(path):
        try:
            fmt = detect_format(candidate)
            kind = _kind(fmt, candidate)
            diagnostics.extend(_lint_one(fmt, candidate, root))
        except ReaderError as exc:
            kind = "unreadable"
            diagnostics.append(Diagnostic("error", "unreadable", exc.detail, exc.path or str(candidate), exc.line))
        counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        diagnostics.append(Diagnostic("error", "no-workflow", "no workflow found here (no workflow.yaml, "
                                      "workflow.md with steps, SKILL.md, WFS-* session or native workflow file)",
                                      str(path)))
    return diagnostics, counts


def workflows_of_kind(folder: Path, kind: str) -> list[Path]:
    """The workflows under ``folder`` that ``validate`` counts as ``kind`` (``bmad-skill/step-files``), in path
    order; an unreadable one is none of them."""
    found = []
    for candidate in _workflows_under(folder):
        try:
            if _kind(detect_format(candidate), candidate) == kind:
                found.append(candidate)
        except ReaderError:
            continue
    return found


def _is_broken_skill(folder: Path) -> bool:
    from stepline.skills import skill_md_missing

    return skill_md_missing(folder) is not None


def _workflows_under(folder: Path) -> list[Path]:
    """Every workflow file or session folder under ``folder`` (hidden folders other than .workflow skipped)."""
    found: list[Path] = []
    skills: list[Path] = []
    for candidate in sorted(folder.rglob("*")):
        parts = candidate.relative_to(folder).parts
        if any(p.startswith(".") and p != ".workflow" for p in parts[:-1]):
            continue
        if parts[:2] == ("_bmad", "render") or any(candidate.is_relative_to(s) for s in skills):
            continue  # a skill is checked as one, from its folder; render/ holds BMAD's generated snapshots
        if candidate.is_dir() and (candidate / "SKILL.md").is_file():
            skills.append(candidate)
            found.append(candidate)
            continue
        if candidate.is_dir() and _is_broken_skill(candidate):  # reported, never skipped
            skills.append(candidate)
            found.append(candidate)
            continue
        if candidate.is_dir():
            if candidate.name.startswith("WFS-") and (candidate / ".task").is_dir():
                found.append(candidate)
            continue
        name = candidate.name
        is_bmad = name == "workflow.yaml" or (
            name.startswith("workflow") and name.endswith(".md")
            and (any(candidate.parent.glob("steps*")) or _holds_xml_steps(candidate)))
        is_native = candidate.suffix in (".yaml", ".yml", ".json") and is_native_workflow(candidate)
        if is_bmad or is_native:
            found.append(candidate)
    return found



def _home_of(path: Path) -> Path | None:
    """The project a path inside an installed ``_bmad`` tree belongs to (the folder holding that ``_bmad``)."""
    parts = path.absolute().parts
    if "_bmad" not in parts:
        return None
    return Path(*parts[:len(parts) - 1 - parts[::-1].index("_bmad")])


def read_plan(path: Path | str, *, project_root: Path | str | None = None) -> Plan:
    """The plan of the workflow at ``path``, read before anything runs: its steps in the order the family's
    driver runs them (the same step ids), each with the points its text hands the person, routes and hands
    over; a file a step routes to follows that step as a step of its own (``route-<name>``), once.

    ``project_root`` defaults to the project an installed skill is in (its ``_bmad``'s folder), else the
    current folder.
    """
    from stepline.formats import read_text
    from stepline.stepchain import Plan, PlanStep, Point, auto_mode_of

    path = Path(path)
    root = Path(project_root) if project_root is not None else (_home_of(path) or Path.cwd())
    spec = load_workflow(path, project_root=root)
    base = Path(spec.root) if spec.root else (path if path.is_dir() else path.parent)
    steps: list[PlanStep] = []
    # a workflow's own step files (a skill's, a micro-file workflow's) are steps already, not routes
    own = {Path(s.source.path).resolve() for s in spec.steps if s.source and (
        s.meta.get("role") == "step-file" or ("frontmatter" in s.meta and "role" not in s.meta))}
    routed: set[Path] = set()
    finder = None
    if spec.format == "bmad-skill" or "skills" in spec.meta:
        from stepline.skills import skill_finder

        finder = skill_finder(base, root.resolve())
    for step in spec.steps:
        # a file a step routes to is planned after that step (below); a skill a step hands over to, or an agent's
        # menu item runs, has a plan of its own: the run loads their steps too (``route-…``, ``<skill>:…``)
        if step.meta.get("role") == "route" or step.meta.get("skill", spec.meta.get("skill")) not in (
                spec.meta.get("skill"), spec.meta.get("forwarded_to")):
            continue
        points = tuple(Point.from_json(p) for p in step.meta.get("points") or [])
        source = Path(step.source.path) if step.source else base
        steps.append(PlanStep(step.id, step.name or step.id, str(step.meta.get("role") or spec.format), source,
                              step.source.line if step.source and step.source.line else 1, points))
        steps.extend(_routed_steps(points, base, own, routed, finder))
    steps = _under_route_conditions(steps)
    entry = Path(spec.source.path) if spec.source else None
    text = read_text(entry) if entry is not None and entry.is_file() else ""
    auto = auto_mode_of(text) if "autoYes" in text or "auto mode" in text.lower() else None
    kind = spec.format if spec.format != "bmad-skill" else f"{spec.format}/{spec.meta.get('kind')}"
    return Plan(path=path, kind=kind, steps=tuple(steps),
                diagnostics=tuple(_plan_diagnostics(steps)), auto_mode=auto, name=spec.name or spec.id)


def _routed_steps(points: tuple[Point, ...], base: Path, own: set[Path], routed: set[Path],
                  finder: Callable[[str], Path | None] | None) -> list[PlanStep]:
    """A step for each file ``points`` route to (and each file those route to, depth first), once per plan; a
    workflow's own step files are steps already."""
    from stepline.formats import read_text
    from stepline.stepchain import PlanStep, PointKind, read_points

    out: list[PlanStep] = []
    for point in points:
        target = point.resolved
        if point.kind is not PointKind.ROUTE or target is None or target in own or target in routed:
            continue
        routed.add(target)
        home = next((p for p in target.parents if (p / "SKILL.md").is_file() or (p / "workflow.yaml").is_file()),
                    base.resolve())
        name = target.relative_to(home).with_suffix("").as_posix() if target.is_relative_to(home) else target.stem
        inner = read_points(read_text(target), file=target, base=home, find_skill=finder)
        out.append(PlanStep(f"route-{name.replace('/', '-')}", point.target or target.name, "route", target, 1,
                            inner))
        out.extend(_routed_steps(inner, base, own, routed, finder))
    return out


def _under_route_conditions(steps: list[PlanStep]) -> list[PlanStep]:
    """Each routed file's points under the condition on which the run gets there: none when a route to it always
    applies (prfaq's interactive path reaches press-release.md as its headless case does), else its routes'
    conditions, each with the condition on which the run reaches the file that routes (one ``or`` another)."""
    from stepline.stepchain import PointKind, with_condition

    routed = {s.file.resolve(): s for s in steps if s.kind == "route"}
    reachers: dict[Path, list[tuple[PlanStep, str | None]]] = {target: [] for target in routed}
    for step in steps:
        for point in step.points:
            if point.kind is PointKind.ROUTE and point.resolved is not None and point.resolved.resolve() in routed:
                reachers[point.resolved.resolve()].append((step, point.condition))

    reached: dict[Path, tuple[str | None, bool]] = {}  # file: (its condition, whether it is reached at all)

    def condition_of(step: PlanStep, seen: frozenset[Path]) -> tuple[str | None, bool]:
        if step.kind != "route":
            return None, True
        target = step.file.resolve()
        if target in reached:
            return reached[target]
        ways: list[str] = []
        for source, condition in reachers[target]:
            if source.file.resolve() in seen:
                continue  # a route back into a file on the way here adds no way to get here
            above, ok = condition_of(source, seen | {target})
            if not ok:
                continue
            both = "; ".join(c for c in (above, condition) if c)
            if not both:
                reached[target] = (None, True)
                return None, True
            ways.append(both)
        found = (" or ".join(dict.fromkeys(ways)) or None, bool(ways))
        if not seen:
            reached[target] = found
        return found

    return [replace(s, points=with_condition(s.points, condition_of(s, frozenset())[0])) if s.kind == "route" else s
            for s in steps]


def _plan_diagnostics(steps: list[PlanStep]) -> list[Diagnostic]:
    """A route or hand-over whose target was not found, each with its file:line."""
    found = []
    for step in steps:
        for point in step.points:
            if point.unresolved:
                what = "route to" if point.kind.value == "route" else "hand-over to"
                found.append(Diagnostic("warning", f"unresolved-{point.kind.value}",
                                        f"{what} {point.target}: not found", str(point.file), point.line))
    return found


def read_plans(path: Path | str, *, project_root: Path | str | None = None) -> list[Plan]:
    """The plan of the workflow at ``path``, or of every workflow under a folder (in path order); a folder with
    none is a ReaderError."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or folder", hint="check the path")
    try:
        detect_format(path)
        return [read_plan(path, project_root=project_root)]
    except ReaderError:
        if path.is_file():
            raise
    found = _workflows_under(path)
    if not found:
        raise ReaderError("no workflow found here (no workflow.yaml, workflow.md with steps, SKILL.md, WFS-* "
                          "session or native workflow file)", path=str(path))
    return [read_plan(candidate, project_root=project_root) for candidate in found]
