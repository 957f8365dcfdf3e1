"""How a resume reads back the effect of an interrupted script call (issue 16.5): BMAD's memlog.py init, append
and set, run as runScript or as one shell command; anything else cannot be checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stepline.tools import EffectCheck, default_registry

from .conftest import CORPUS_V611

MEMLOG = CORPUS_V611 / "src" / "scripts" / "memlog.py"
pytestmark = pytest.mark.skipif(not MEMLOG.is_file(), reason="shared/corpus/bmad/v6.11.0 is not available")


def _effect(tool: str) -> EffectCheck:
    effect = default_registry().get(tool).effect
    assert effect is not None
    return effect


def _run(project: Path, args: list[str]) -> None:
    subprocess.run([sys.executable, str(MEMLOG), *args], cwd=project, check=True, capture_output=True)


def _check(project: Path, tool: str, call: dict[str, Any], run: bool) -> bool | None:
    """Snapshot before, run the script (or not: the crash came first), then ask whether it happened."""
    effect = _effect(tool)
    before = effect.before(call, str(project))
    assert before is not None
    if run:
        _run(project, call["args"] if tool == "runScript" else call["command"].split()[3:])
    return effect.happened(call, str(project), before)


@pytest.mark.parametrize("run", [True, False])
def test_init_append_and_set_are_read_back(tmp_path: Path, run: bool) -> None:
    """Each memlog command's effect is found on disk exactly when the script ran."""
    script = str(MEMLOG)
    init = {"script": script, "args": ["init", "--workspace", "ws", "--field", "topic=T"]}
    assert _check(tmp_path, "runScript", init, run) is run
    if not run:
        _run(tmp_path, init["args"])
    append = {"script": script, "args": ["append", "--workspace", "ws", "--type", "idea", "--by", "user",
                                         "--text", "two  words\nhere"]}
    assert _check(tmp_path, "runScript", append, run) is run
    set_ = {"script": script, "args": ["set", "--path", "ws/.memlog.md", "--key", "status", "--value", "complete"]}
    assert _check(tmp_path, "runScript", set_, run) is run


def test_an_equal_earlier_entry_is_not_taken_for_this_one(tmp_path: Path) -> None:
    """The check looks after the entries the memlog held before the call: the same text logged earlier does
    not count as this call's."""
    script = str(MEMLOG)
    _run(tmp_path, ["init", "--workspace", "ws"])
    args = ["append", "--workspace", "ws", "--text", "again"]
    _run(tmp_path, args)
    assert _check(tmp_path, "runScript", {"script": script, "args": args}, run=False) is False


def test_a_shell_command_that_is_one_memlog_call_is_checked_too(tmp_path: Path) -> None:
    """`uv run …/memlog.py append …` given to the shell tool is read back like runScript's call; a compound
    command or another script cannot be checked (None: the step waits for a person)."""
    _run(tmp_path, ["init", "--workspace", "ws"])
    command = {"command": f"uv run {MEMLOG} append --workspace ws --text done"}
    assert _check(tmp_path, "shell", command, run=True) is True
    shell = _effect("shell")
    assert shell.before({"command": f"uv run {MEMLOG} append --workspace ws --text x && rm -rf ws"},
                        str(tmp_path)) is None
    assert _effect("runScript").before({"script": "_bmad/scripts/other.py", "args": ["append"]}, str(tmp_path)) is None
