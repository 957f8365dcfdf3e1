"""Scale-out: a run's executor work on a Ray cluster, its state in the coordinating process (SPEC R-D1).

Importing this package does not import Ray; joining the cluster happens at a run's first step.
"""

from __future__ import annotations

from stepline.distributed._ray import RayExecutor, WorkerLost, check_reachable, ray_executor

__all__ = ["RayExecutor", "WorkerLost", "check_reachable", "ray_executor"]
