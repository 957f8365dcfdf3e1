"""Scale-out: a run's executor work on a Ray cluster, its state in the coordinating process (SPEC R-D1).

Importing this package does not import Ray; joining the cluster happens at a run's first step.
"""

from __future__ import annotations

from stepline.distributed._ray import (
    ClusterCapacity,
    RayExecutor,
    WorkerLost,
    check_reachable,
    join_cluster,
    ray_executor,
)

__all__ = ["ClusterCapacity", "RayExecutor", "WorkerLost", "check_reachable", "join_cluster", "ray_executor"]
