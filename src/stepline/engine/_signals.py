"""Control-flow signals inside the engine. They are not errors: they never reach a user as a traceback."""

from __future__ import annotations

__all__ = ["StepBlocked"]


class StepBlocked(Exception):
    """The step cannot go on without a person (a gate, a question, an interrupted tool)."""

    def __init__(self, reason: str, gate_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.gate_id = gate_id
