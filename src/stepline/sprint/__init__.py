"""The sprint loop (R-L1): BMAD's implementation phase, unattended and verified (``stepline sprint``).

Readers (``_board``: sprint-status.yaml; ``_project``: where a BMAD project keeps its artifacts, dev workflow,
stories and review layers; ``_config``: config/sprint.yaml; ``_plan``: which stories, in sprint order;
``_usage``: what the agents' calls cost; ``_flow``: which stage comes next; ``_parallel``: what may build at once)
never import the engine. The driver (``_driver``: the stages of one story's run, one module per stage) registers
with the engine when :func:`stepline.families.register_drivers` imports it; ``_loop`` runs the stories, each on an
engine of its own that carries what the loop hands it (``_link``).
Names below are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepline._lazy import lazy_exports as _lazy_exports

_EXPORTS = {
    "budget_prices": "._usage",
    "SUCCEEDED": "._flow",
    "BudgetLimit": "._config",
    "STORY_PREFIX": "._status",
    "Board": "._board",
    "LoopOptions": "._loop",
    "SprintConfig": "._config",
    "SprintProject": "._project",
    "StoryResult": "._loop",
    "Waiting": "._status",
    "board_rows": "._status",
    "deferred_run": "._loop",
    "find_project": "._project",
    "load_loop": "._loop",
    "load_sprint_config": "._config",
    "loop_driver": "._status",
    "loop_log_path": "._status",
    "loop_outcome": "._loop",
    "loop_state": "._status",
    "plan_loop": "._loop",
    "plan_stories": "._plan",
    "read_board": "._board",
    "run_loop": "._loop",
    "save_loop": "._loop",
    "set_status": "._board",
    "waiting": "._status",
    "waiting_on_board": "._status",
}

__all__ = [
    "STORY_PREFIX",
    "SUCCEEDED",
    "Board",
    "BudgetLimit",
    "LoopOptions",
    "SprintConfig",
    "SprintProject",
    "StoryResult",
    "Waiting",
    "board_rows",
    "budget_prices",
    "deferred_run",
    "find_project",
    "load_loop",
    "load_sprint_config",
    "loop_driver",
    "loop_log_path",
    "loop_outcome",
    "loop_state",
    "plan_loop",
    "plan_stories",
    "read_board",
    "run_loop",
    "save_loop",
    "set_status",
    "waiting",
    "waiting_on_board",
]

if TYPE_CHECKING:
    from stepline.sprint._board import Board, read_board, set_status
    from stepline.sprint._config import BudgetLimit, SprintConfig, load_sprint_config
    from stepline.sprint._flow import SUCCEEDED
    from stepline.sprint._loop import (
        LoopOptions,
        StoryResult,
        deferred_run,
        load_loop,
        loop_outcome,
        plan_loop,
        run_loop,
        save_loop,
    )
    from stepline.sprint._plan import plan_stories
    from stepline.sprint._project import SprintProject, find_project
    from stepline.sprint._status import (
        Waiting,
        board_rows,
        loop_driver,
        loop_log_path,
        loop_state,
        waiting,
        waiting_on_board,
    )
    from stepline.sprint._usage import budget_prices

__getattr__, __dir__ = _lazy_exports("stepline.sprint", globals(), _EXPORTS)
