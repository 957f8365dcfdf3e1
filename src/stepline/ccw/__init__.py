"""Claude-Code-Workflow (CCW) sessions: ``.workflow/active/WFS-*`` folders of task JSON, TODO_LIST.md and
IMPL_PLAN.md, run as a DAG of tasks in waves.

Readers (``_session``, ``_task``, ``_todo``, ``_plan``, ``_graph``, ``_check``) and the pure wave planner
(``_waves``) never import the engine. The driver (``_driver`` with ``_state`` for the three completion files
and ``_prompt`` for the task prompt) runs the tasks and registers itself with the engine when
:func:`stepline.families.register_drivers` imports it. Names below are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

_EXPORTS = {
    "Completion": "._state",
    "SessionWriter": "._state",
    "SessionInfo": "._session",
    "confined_session": "._session",
    "find_session": "._session",
    "infer_agent": "._session",
    "read_ccw_session": "._session",
    "PendingCompletions": "._driver",
    "complete_session": "._driver",
    "execute_session": "._driver",
    "pending_completions": "._driver",
    "CcwSession": "._session",
    "check_ccw_session": "._check",
    "discover_sessions": "._session",
    "load_ccw_session": "._session",
    "plan_workflow_waves": "._waves",
}

__all__ = [
    "CcwSession",
    "Completion",
    "PendingCompletions",
    "SessionInfo",
    "SessionWriter",
    "check_ccw_session",
    "complete_session",
    "confined_session",
    "discover_sessions",
    "execute_session",
    "find_session",
    "infer_agent",
    "load_ccw_session",
    "pending_completions",
    "plan_workflow_waves",
    "read_ccw_session",
]

if TYPE_CHECKING:
    from stepline.ccw._check import check_ccw_session
    from stepline.ccw._driver import PendingCompletions, complete_session, execute_session, pending_completions
    from stepline.ccw._session import (
        CcwSession,
        SessionInfo,
        confined_session,
        discover_sessions,
        find_session,
        infer_agent,
        load_ccw_session,
        read_ccw_session,
    )
    from stepline.ccw._state import Completion, SessionWriter
    from stepline.ccw._waves import plan_workflow_waves

__getattr__, __dir__ = _lazy_exports("stepline.ccw", globals(), _EXPORTS)
