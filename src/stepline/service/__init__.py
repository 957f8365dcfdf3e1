"""The run service: what the CLI, the dashboard and the MCP server do with a project's runs, done one way.

:class:`RunService` opens a run, builds its engine (the one place an interface gets an :class:`Engine`), reads
its status and digest, lists the runs and their gates, decides a gate, answers a question and says how a run
goes on. The interfaces parse their input, call it and render what it returns; none imports another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports
from stepline.service._digest import KEEP, Digest, event_detail, make_digest, record_digest
from stepline.service._facts import (
    context_detail,
    context_lines,
    one_line,
    run_errors,
    run_summary,
    secrets_in_artifacts,
)
from stepline.service._runs import INTERFACE_EXECUTORS, Decided, Question, RunService, person, resume_command

__all__ = [
    "INTERFACE_EXECUTORS",
    "KEEP",
    "CostReport",
    "Decided",
    "Digest",
    "Question",
    "RunCost",
    "RunService",
    "context_detail",
    "context_lines",
    "cost_report",
    "event_detail",
    "has_story_runs",
    "make_digest",
    "one_line",
    "person",
    "project_prices",
    "record_digest",
    "resume_command",
    "run_cost",
    "run_errors",
    "run_summary",
    "secrets_in_artifacts",
    "usage_summary",
]

# What runs cost loads the executors (and a YAML reader with them): imported on first use, so that registering the
# CLI's commands stays cheap.
_COST = ("CostReport", "RunCost", "cost_report", "has_story_runs", "project_prices", "run_cost", "usage_summary")
__getattr__, __dir__ = _lazy_exports(__name__, globals(), dict.fromkeys(_COST, "._cost"))

if TYPE_CHECKING:
    from stepline.service._cost import (
        CostReport,
        RunCost,
        cost_report,
        has_story_runs,
        project_prices,
        run_cost,
        usage_summary,
    )
