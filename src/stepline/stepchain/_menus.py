"""What a step file's menu options do: the runtime, not the model, decides where each one leads.

A step's menu comes from the reader (``meta["menu"]``: key, label, kind, handler text, :func:`parse_menu`); a
step that halts for the person without one presents its halt's options (``meta["halts"]``, :func:`halt_menu`).
Each option gets a :class:`Route`:

``goto``
    save state and go to a step file (``target``), or end the workflow (``target`` None). ``[C]`` goes to
    ``nextStepFile``; an option whose handler names a step file (``{altStepFile}``, ``./step-02a-….md``) goes
    there; an option that says it ends or exits the workflow ends it.
``elicit`` / ``party``
    ``[A]`` / ``[P]``: the runtime invokes advanced elicitation or party mode, then shows the menu again.
``exit``
    ``[X]``: the run stops cleanly where it is (resumable).
``local``
    any other option (``[1]`` … ``[7]`` technique categories, "any other comments"): the executor acts on it
    inside the step, then the menu is shown again (unless no option moves forward: see :func:`build_menu`).

A step with no menu but branch links (``nextStepFile_modeA/B``, ``skipToStepFile``) gets a synthesised menu,
answered by the executor, since choosing a branch there is the model's judgement of the step's prose.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepline._placeholders import substitute
from stepline.executors import match_answer, menu_text
from stepline.stepchain._read import Option, Route, halt_menu

__all__ = ["Option", "Route", "build_menu", "match_answer", "menu_text"]

_ENDS_RE = re.compile(r"\b(exit|done|end (?:the )?workflow|finish(?:es)? (?:the )?workflow|complete (?:the )?workflow|"
                      r"workflow (?:is )?complete)\b", re.IGNORECASE)


def _targets(meta: dict[str, Any]) -> list[str]:
    found = [meta.get("next"), meta.get("alt"), *meta.get("branches", {}).values()]
    return [t for t in dict.fromkeys(found) if t]


def _target_named(handler: str, meta: dict[str, Any], env: dict[str, Any]) -> str | None:
    """The step file a handler text loads (by path or file name after substitution), first mention wins."""
    text = substitute(handler, env, nested=True)
    best: tuple[int, str] | None = None
    for target in _targets(meta):
        # a step of a skill handed over to is named ``<skill>:<step>``: its handlers name the step's own file
        positions = [p for p in (text.find(target), text.find(Path(target.rsplit(":", 1)[-1]).name)) if p >= 0]
        if positions and (best is None or min(positions) < best[0]):
            best = (min(positions), target)
    return best[1] if best else None


def _route(raw: dict[str, Any], meta: dict[str, Any], env: dict[str, Any]) -> Route:
    kind = raw.get("kind")
    if kind == "advanced-elicitation":
        return Route("elicit")
    if kind == "party-mode":
        return Route("party")
    if kind == "exit":
        return Route("exit")
    handler = str(raw.get("handler") or "")
    target = _target_named(handler, meta, env)
    if target is not None:
        return Route("goto", target)
    if kind == "continue":
        return Route("goto", meta.get("next"))
    if _ENDS_RE.search(f"{raw.get('label', '')} {handler}"):
        return Route("goto", None)
    return Route("local")


def _synthesised(meta: dict[str, Any]) -> list[tuple[dict[str, Any], Route]]:
    """Options for a step without a menu whose prose may branch: continue, each branch, or finish."""
    branches = [(label, path) for label, path in meta.get("branches", {}).items()
                if Path(path).is_file() and "continu" not in Path(path).stem]
    if not branches:
        return []
    options: list[tuple[dict[str, Any], Route]] = []
    nxt = meta.get("next")
    if nxt:
        options.append(({"key": "C", "label": f"Continue ({Path(nxt).name})", "kind": "continue"},
                        Route("goto", nxt)))
    ordered = sorted(branches, key=lambda item: not item[0].startswith("nextStep"))
    for index, (label, path) in enumerate(ordered, start=1):
        options.append(({"key": str(index), "label": f"{label} ({Path(path).name})",
                         "kind": "continue" if label.startswith("nextStep") else "custom"}, Route("goto", path)))
    if not nxt:  # a final step's branches are offers (run validation next?); finishing is the way forward
        natural = "custom" if ordered[0][0].startswith("nextStep") else "continue"
        options.append(({"key": "F", "label": "Finish the workflow here", "kind": natural}, Route("goto", None)))
    return options


def _default(options: list[tuple[dict[str, Any], Route]], meta: dict[str, Any], visited: frozenset[str],
             exists: Callable[[str], bool]) -> str | None:
    """The option that moves forward: to an existing step not visited yet (or the end), then continue,
    then ``nextStepFile``, then ``[C]``. Exit and local options are never the default."""
    forward = [(raw, route) for raw, route in options
               if route.kind == "goto" and (route.target is None or exists(route.target))]
    ranked = sorted(forward, key=lambda item: (item[1].target in visited, item[0].get("kind") != "continue",
                                               item[1].target is None or item[1].target != meta.get("next"),
                                               item[0]["key"] != "C"))
    return str(ranked[0][0]["key"]) if ranked else None


def build_menu(meta: dict[str, Any], env: dict[str, Any], visited: frozenset[str] = frozenset(),
               exists: Callable[[str], bool] = lambda target: Path(target).is_file()) -> tuple[list[Option], bool]:
    """The options of a step and whether a person answers them (authored menu) or the executor (synthesised).

    When a menu has no option that moves forward at all, its ``local`` options are taken as the step's ways
    forward instead (the prose decides; the runtime follows ``next``).

    ``visited`` holds the step files this run has already been through: the default (what pressing Enter, or
    the dry-run executor, picks) prefers a way forward to a step not visited yet, so that a workflow whose
    menus lead back (validate -> edit -> validate) is walked through rather than around in circles. Targets are
    what ``meta`` names (a micro-file step's file, a skill's step id); ``exists`` says whether one is there.
    """
    written = meta.get("menu") or halt_menu(meta.get("halts") or [], meta.get("points") or [])
    authored = [(raw, _route(raw, meta, env)) for raw in written]
    if authored and not any(route.kind == "goto" for _, route in authored):
        authored = [(raw, Route("goto", meta.get("next")) if route.kind == "local" else route)
                    for raw, route in authored]
    chosen = authored or _synthesised(meta)
    default = _default(chosen, meta, visited, exists)
    options = [Option(str(raw["key"]), str(raw.get("label") or raw["key"]), route, str(raw.get("handler") or ""),
                      default=raw["key"] == default) for raw, route in chosen]
    return options, bool(authored)
