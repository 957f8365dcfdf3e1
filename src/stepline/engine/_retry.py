"""Retry delays: exponential backoff with jitter from the run's seeded random source (reproducible per run)."""

from __future__ import annotations

import random

from stepline.model import RetryPolicy

__all__ = ["retry_delay"]


def retry_delay(policy: RetryPolicy | None, attempt: int, rng: random.Random) -> float:
    """Seconds to wait before attempt ``attempt + 1``, given the step's policy (none: retry at once)."""
    if policy is None or policy.backoff_seconds <= 0:
        return 0.0
    base = policy.backoff_seconds * (2 ** (attempt - 1) if policy.exponential else 1)
    base = min(base, policy.max_backoff_seconds)
    if policy.jitter:
        base *= 1 + rng.uniform(-policy.jitter, policy.jitter)
    return max(0.0, base)
