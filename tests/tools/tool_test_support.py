"""Test support for tool tests: a recording event sink and a check that a process is really gone."""

from __future__ import annotations

import time
from typing import Any

import psutil


class Events:
    """Collects ``(name, data)`` pairs the pipeline emits."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, data: dict[str, Any]) -> None:
        self.items.append((name, data))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.items]


def process_gone(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` no longer exists or is a zombie (dead, waiting for a reaper that is not us).

    Polls for a bounded time because a killed orphan is reaped by init asynchronously.
    """
    deadline = time.monotonic() + within
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
