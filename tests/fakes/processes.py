"""Whether a process the tests started is still running (for the tests that check nothing is left behind)."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"))


def python_running_with(word: str) -> bool:
    """Whether a ``python3`` process whose arguments include ``word`` runs (a command an agent ran, named by a word:
    codex runs commands in a pid namespace of their own, so their pids mean nothing here)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if word.encode() in words and b"python3" in words[0] and alive(int(cmdline.parent.name)):
            return True
    return False
