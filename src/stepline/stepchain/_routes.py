"""Where a step file leaves besides its menu: its routes (an EARLY EXIT, a loop back, a status a line maps).

The runtime decides from structured facts when they show it — a file named by one of the step's variables whose
frontmatter ``status`` a route line maps (```draft` → step-02-plan.md``), or a file a route line hinges on (``If
`x` exists →``). Otherwise the executor chose among the routes in the finish of the step's work (so a step costs
one model turn), else each route is a ``decide`` request with its line as the condition; none holding, the step's
NEXT. A step's ``meta`` holds ``next``, ``routes`` (target, file, line, text, loop), ``status_routes`` and ``file``.
"""

from __future__ import annotations

from typing import Any

from stepline.engine import StepContext
from stepline.stepchain._chain import Host
from stepline.stepchain._conditions import EXISTS, existence_fact, status_of

__all__ = ["decide_route", "offered_routes", "routes_text"]

Routes = dict[str, list[dict[str, Any]]]


def offered_routes(meta: dict[str, Any]) -> Routes:
    """The routes the executor may choose at the end of the step's work, by target: each other route (an EARLY
    EXIT, a loop back) whose line does not hinge on a file on disk (the runtime settles those)."""
    offered: Routes = {}
    for route in meta.get("routes", []):
        if EXISTS.search(route["text"]) is None:
            offered.setdefault(route["target"], []).append(route)
    return offered


def routes_text(ctx: StepContext, offered: Routes) -> str:
    """The part of the step's last request that asks where the step leaves (in the same turn as the work, by the
    model that did it, instead of a request per route)."""
    default = ctx.spec.meta.get("next")
    following = next((s.meta.get("file") for s in ctx.run.workflow.steps if s.id == default), default)
    # The routes' own lines are in the step's text above: each is named by its file, not restated.
    lines = [f"- `{routes[0]['file']}`{' (a loop back)' if routes[0]['loop'] else ''}" for routes in offered.values()]
    return ("\n\n## Where this step leaves\nThe runtime follows the step's routes: do not read or follow another "
            f"step file. When you finish, set `choice` to `next` to go on to {following or 'the end of the skill'}, "
            "or to the step file below if the text above sends the work there now (an EARLY EXIT, a loop "
            "back):\n" + "\n".join(lines))


async def decide_route(ctx: StepContext, host: Host, proposal: str | None = None,
                       offered: Routes | None = None) -> tuple[str | None, str, str]:
    """Where the step leaves: ``(step id, reason, decided by)`` (see the module doc). ``proposal``: the choice the
    executor made among the ``offered`` routes at the end of the step's work."""
    meta = ctx.spec.meta
    default = meta.get("next")
    status_routes = {value: (target, line) for value, target, line in meta.get("status_routes", [])}
    if status_routes:
        for name in [*meta.get("frontmatter", {}), *ctx.variables]:
            fact = status_of(ctx.project_root, ctx.variables.get(name))
            if fact is None:
                continue
            path, status = fact
            if status in status_routes:
                target, line = status_routes[status]
                return target, (f"{name} = {path} has status {status!r}, which {meta['file']}:{line} sends to "
                                f"{target}"), "runtime"
            break
    by_target: Routes = {}
    for route in meta.get("routes", []):
        on_disk = existence_fact(route["text"], host.render, ctx.project_root)
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
            hints=host.hints(default=False), context=host.context)
        if outcome.decision:
            return target, outcome.reason or "the executor decided the condition holds", "executor"
    return default, ("the step's NEXT" if default else "the step names no next step: the skill ends"), "runtime"
