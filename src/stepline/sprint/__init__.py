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
    "Board": "._board",
    "SprintConfig": "._config",
    "SprintProject": "._project",
    "find_project": "._project",
    "load_sprint_config": "._config",
    "plan_stories": "._plan",
    "read_board": "._board",
    "set_status": "._board",
}

__all__ = [
    "Board",
    "SprintConfig",
    "SprintProject",
    "find_project",
    "load_sprint_config",
    "plan_stories",
    "read_board",
    "set_status",
]

if TYPE_CHECKING:
    from stepline.sprint._board import Board, read_board, set_status
    from stepline.sprint._config import SprintConfig, load_sprint_config
    from stepline.sprint._plan import plan_stories
    from stepline.sprint._project import SprintProject, find_project

__getattr__, __dir__ = _lazy_exports("stepline.sprint", globals(), _EXPORTS)
