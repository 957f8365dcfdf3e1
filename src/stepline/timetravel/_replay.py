"""``stepline replay``: run a (changed) workflow with a recorded run's answers and model responses.

The project's files are first put back to what they were before the recorded run (as a fork at its first step
would), then the workflow runs as a new run whose executor is wrapped in a
:class:`~stepline.executors._cassette.ServingExecutor`: a model request whose text the recorded run made is
answered with the recorded answer, any other goes to the model (or, ``strict``, stops the step). Questions get
the recorded run's answers (:class:`~stepline.timetravel._fork.Answers`). At the end the two runs are compared
(:func:`~stepline.timetravel._report.compare`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepline.engine import Engine, RuntimeConfig
from stepline.executors import Executor, ServingExecutor, create_executor
from stepline.model import Run, WorkflowSpec
from stepline.timetravel._fork import Answers, Restoration, rewind
from stepline.timetravel._record import ModelRequest, RecordedRun, read_run
from stepline.timetravel._report import Report, compare, request_diff

__all__ = ["Replay", "replay", "serving"]


@dataclass(slots=True)
class Replay:
    """A replay's outcome: the new run, the comparison, how its model requests were answered."""

    run: Run
    report: Report
    served: int
    sent: list[ModelRequest]  # the requests sent to the model (the others were answered from the record)
    stopped_at: str | None
    rewound: Restoration


def serving(config: RuntimeConfig, recorded: RecordedRun, executor: str | None, options: dict[str, Any], *,
            strict: bool) -> ServingExecutor:
    """The replay's executor: ``executor`` (default: the recorded run's, with its options) serving the record."""
    name = executor or recorded.run.executor
    given = options if executor else {**recorded.run.executor_options, **options}
    inner: Executor = create_executor(name, {**config.executors.get(name, {}), **given})
    return ServingExecutor(inner, recorded.served_answers(), strict=strict)


async def replay(engine: Engine, recorded: RecordedRun, workflow: WorkflowSpec, executor: ServingExecutor) -> Replay:
    """Rewind the project, run ``workflow`` on ``engine`` (built with ``executor``), compare with ``recorded``."""
    rewound = rewind(recorded, 0)
    engine.human = Answers(engine.human, [], recorded.answers(), by="replay")
    run = await engine.start(workflow, recorded.given_variables())
    replayed = read_run(engine, run.run_id)
    report = compare(recorded, replayed)
    stopped_at = None
    if executor.refused is not None:  # never sent, so not in the replay's journal: compared as it would have been
        stopped_at, label, payload = executor.refused
        before = [r for r in recorded.requests if r.step_id == stopped_at]
        asked = [r for r in replayed.requests if r.step_id == stopped_at]
        report.requests[stopped_at] = request_diff(stopped_at, before,
                                                   [*asked, ModelRequest(stopped_at, label, payload, {})])
    sent = [ModelRequest(step, "", {}, answer) for step, answer in executor.sent]
    return Replay(run=run, report=report, served=len(executor.served), sent=sent, stopped_at=stopped_at,
                  rewound=rewound)
