"""The dashboard's cost page (``/cost``) and its API (``/api/cost``): what ``stepline cost`` prints — tokens and
dollars per run, story, step and executor/model — and, per sprint story, a plot of what each of its stages used
(an SVG drawn here: a bar per stage, its prompt's uncached part, cache reads, cache writes and output stacked)."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from stepline.executors import Usage
from stepline.interfaces.web._pages import _render
from stepline.interfaces.web._state import WebState, authenticate, state_of
from stepline.service import CostReport, cost_report, has_story_runs

__all__ = ["cost_api", "cost_pages", "story_plot"]

State = Annotated[WebState, Depends(state_of)]
Authenticated = Annotated[str, Depends(authenticate)]
cost_pages = APIRouter(include_in_schema=False)
cost_api = APIRouter(prefix="/api")

#: The parts of a stage's bar, in order, with their colours: (label, Usage → tokens, colour).
_PARTS: tuple[tuple[str, Callable[[Usage], float], str], ...] = (
    ("input", lambda u: u.uncached_input_tokens, "#4c78a8"),
    ("cache read", lambda u: u.cache_read_tokens, "#9ecae9"),
    ("cache write", lambda u: u.cache_write_tokens, "#f58518"),
    ("output", lambda u: u.output_tokens, "#54a24b"))
_BAR, _GAP, _LABEL, _WIDTH = 18, 6, 130, 520


def _report(state: WebState, run: str | None, sprint: bool, since: str | None) -> CostReport:
    return cost_report(state.runs, run or None, sprint=sprint, since=since or None)


def story_plot(story: str, stages: dict[str, Usage], largest: float) -> str:
    """An SVG of ``story``'s stages: a bar each, ``largest`` tokens the full width, its cost at its end."""
    height = len(stages) * (_BAR + _GAP) + 24
    out = [f'<svg class="cost-plot" role="img" width="{_LABEL + _WIDTH + 110}" height="{height}" '
           f'aria-label="{escape(story)}: tokens per stage">']
    for row, (stage, used) in enumerate(stages.items()):
        y = row * (_BAR + _GAP)
        out.append(f'<text x="0" y="{y + 13}" font-size="12">{escape(stage)}</text>')
        x = float(_LABEL)
        for name, tokens, colour in _PARTS:
            width = _WIDTH * tokens(used) / largest if largest else 0.0
            if width > 0:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{_BAR}" fill="{colour}">'
                           f'<title>{escape(stage)} {name}: {tokens(used):,.0f} tokens</title></rect>')
                x += width
        money = "?" if used.cost_usd is None else f"${used.cost_usd:.4f}"
        out.append(f'<text x="{x + 6:.1f}" y="{y + 13}" font-size="12">{used.tokens:,.0f} · {money}</text>')
    y = len(stages) * (_BAR + _GAP) + 10
    x = float(_LABEL)
    for name, _, colour in _PARTS:
        out.append(f'<rect x="{x:.0f}" y="{y}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{x + 14:.0f}" y="{y + 9}" font-size="11">{name}</text>')
        x += 95
    out.append("</svg>")
    return "".join(out)


@cost_pages.get("/cost", response_class=HTMLResponse)
def cost_page(request: Request, state: State, _: Authenticated,
              run: Annotated[str | None, Query()] = None, sprint: Annotated[bool, Query()] = False,
              since: Annotated[str | None, Query()] = None) -> HTMLResponse:
    """What the chosen runs used and cost (default: the sprint loop's story runs when there are any, else the
    latest run), with a plot per story."""
    if not (run or sprint or since):
        sprint = has_story_runs(state.runs)
    report = _report(state, run, sprint, since)
    stories = report.story_steps()
    largest = max((used.tokens for steps in stories.values() for used in steps.values()), default=0.0)
    return _render(request, "cost.html", report=report, total=report.total(), by_run=report.by_run(),
                   by_story=report.by_story(), by_step=report.by_step(), by_executor=report.by_executor(),
                   plots={story: story_plot(story, steps, largest) for story, steps in stories.items()},
                   run=run or "", sprint=sprint, since=since or "")


@cost_api.get("/cost", summary="Tokens and cost per run, story, step and executor/model (as `stepline cost`)")
def cost_json(state: State, _: Authenticated, run: Annotated[str | None, Query()] = None,
              sprint: Annotated[bool, Query()] = False, since: Annotated[str | None, Query()] = None
              ) -> dict[str, Any]:
    """``stepline cost --json`` over HTTP: a run (default: the latest), ``sprint``, or ``since`` a date."""
    return _report(state, run, sprint, since).to_dict()
