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
    "CcwSession": "._session",
    "check_ccw_session": "._check",
    "discover_sessions": "._session",
    "load_ccw_session": "._session",
    "plan_workflow_waves": "._waves",
}

__all__ = [
    "CcwSession",
    "check_ccw_session",
    "discover_sessions",
    "load_ccw_session",
    "plan_workflow_waves",
]

if TYPE_CHECKING:
    from stepline.ccw._check import check_ccw_session
    from stepline.ccw._session import CcwSession, discover_sessions, load_ccw_session
    from stepline.ccw._waves import plan_workflow_waves

__getattr__, __dir__ = _lazy_exports("stepline.ccw", globals(), _EXPORTS)
