"""The run service: what the CLI, the dashboard and the MCP server do with a project's runs, done one way.

:class:`RunService` opens a run, builds its engine (the one place an interface gets an :class:`Engine`), reads
its status and digest, lists the runs and their gates, decides a gate, answers a question and says how a run
goes on. The interfaces parse their input, call it and render what it returns; none imports another.
"""

from __future__ import annotations

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
    "Decided",
    "Digest",
    "Question",
    "RunService",
    "context_detail",
    "context_lines",
    "event_detail",
    "make_digest",
    "one_line",
    "person",
    "record_digest",
    "resume_command",
    "run_errors",
    "run_summary",
    "secrets_in_artifacts",
]
