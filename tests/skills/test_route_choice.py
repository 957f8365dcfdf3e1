"""Where a skill's step leaves is asked in the step's last work request (issue 21: one turn per step): the model
that did the step names a route (or ``next``) as its ``finish`` choice, instead of one ``decide`` request per route.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from stepline import Engine
from stepline.executors import StepRequest, StepSession
from stepline.families import load_workflow, register_drivers
from stepline.model import StepStatus

from .conftest import Recorder

register_drivers()


class Choosing(Recorder):
    """Finishes a work request that offers routes with the route ``picks`` names for its step (else ``next``)."""

    def __init__(self, picks: dict[str, list[str]]) -> None:
        super().__init__()
        self.picks = picks

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.kind == "work" and request.choices:
            self.requests.append(request)
            queue = self.picks.get(request.step_id.split("@")[0], [])
            await session.finish(choice=queue.pop(0) if queue else "next", summary=f"did {request.step_id}")
            return
        await super().perform(request, session)


def _run(project: Path, executor: Recorder) -> tuple[Any, list[Any]]:
    engine = Engine(project_root=project, executor=executor, mode="yolo")
    run = asyncio.run(engine.start(load_workflow(project / "_bmad" / "mini" / "tiny-build", project_root=project)))
    return run, list(engine.store.open(run.run_id).events())


def test_the_step_names_its_route_in_the_same_request(mini: Path) -> None:
    """step-01 offers its EARLY EXIT (the line hinging on a file stays the runtime's), the model takes it; step-04
    offers its loop back, taken once then not: the journal says the executor chose, and no decide is sent."""
    executor = Choosing({"step-01-route": ["step-03-do.md"], "step-04-review": ["step-03-do.md", "next"]})
    run, events = _run(mini, executor)
    assert run.status == "completed", run.error
    done = [sid for sid, step in run.steps.items() if step.status == StepStatus.COMPLETED]
    assert done == ["activate", "on-activation", "step-01-route", "step-03-do", "step-04-review", "step-03-do@2",
                    "step-04-review@2"]
    assert [r for r in executor.requests if r.kind == "decide"] == []
    first = next(r for r in executor.requests if r.step_id == "step-01-route")
    assert first.choices == ["next", "step-03-do.md", "step-04-review.md"]
    offered = first.content.split("## Where this step leaves")[1]
    assert "- `step-03-do.md`\n- `step-04-review.md`" in offered and "If the change is trivial" in first.content
    routes = [(e.data["key"].split("/")[0], e.data["result"]) for e in events
              if e.type == "CallRecorded" and e.data["op"] == "route"]
    assert [(step, r["next"], r["by"]) for step, r in routes] == [
        ("step-01-route", "step-03-do", "executor"), ("step-03-do", "step-04-review", "runtime"),
        ("step-04-review", "step-03-do", "executor"), ("step-03-do@2", "step-04-review", "runtime"),
        ("step-04-review@2", None, "executor")]
    assert "chose step-03-do.md at the end of its work" in routes[0][1]["reason"]


def test_without_a_choice_each_route_is_still_a_decide(mini: Path) -> None:
    """An executor that finishes without naming a route (a script, an older agent) gets the decide requests."""
    executor = Recorder()
    run, _ = _run(mini, executor)
    assert run.status == "completed", run.error
    decides = [(r.step_id, r.title.split(" to ")[-1]) for r in executor.requests if r.kind == "decide"]
    assert decides == [("step-01-route", "step-03-do.md"), ("step-01-route", "step-04-review.md"),
                       ("step-04-review", "step-03-do.md")]
