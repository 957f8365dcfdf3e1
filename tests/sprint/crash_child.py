"""Run the stepline CLI in a child that SIGKILLs itself at a chosen point of the sprint loop.

``SPRINT_KILL=commit``: right after git made a story's commit, before the journal records it.
``SPRINT_KILL=advance``: after the commit is journaled, before the board moves (between commit and advance).
``SPRINT_KILL=ff``: a parallel loop's merge, right after the integration branch was fast-forwarded to a story
(before the journal records it), at the ``SPRINT_KILL_AT``-th merge (default 1); ``SPRINT_KILL=land``: later in
that merge, once the story's worktree is removed and its branch deleted.
"""

import os
import signal
import sys
from typing import Any

from stepline.interfaces.cli._app import main
from stepline.sprint import _commit, _merge

kind = os.environ.get("SPRINT_KILL")
real_git, real_git_ok, real_set_status = _merge.git, _commit.git_ok, _commit.set_status
merges = [0]


async def git(root: Any, *args: str, **options: Any) -> tuple[int, str]:
    out = await real_git(root, *args, **options)
    if out[0] == 0 and ((kind == "ff" and "--ff-only" in args) or (kind == "land" and args[:2] == ("branch", "-d"))):
        merges[0] += 1
        if merges[0] == int(os.environ.get("SPRINT_KILL_AT") or 1):
            os.kill(os.getpid(), signal.SIGKILL)
    return out


async def git_ok(root: Any, *args: str, **options: Any) -> str:
    out = await real_git_ok(root, *args, **options)
    if kind == "commit" and args[0] == "commit":
        os.kill(os.getpid(), signal.SIGKILL)
    return out


def set_status(*args: Any, **kwargs: Any) -> bool:
    if kind == "advance":
        os.kill(os.getpid(), signal.SIGKILL)
    return real_set_status(*args, **kwargs)


os.environ["FAKE_STEPLINE_PID"] = str(os.getpid())  # the process a fake agent's FAKE_KILL kills
_commit.git_ok = git_ok  # type: ignore[assignment]
_merge.git = git  # type: ignore[assignment]
_commit.set_status = set_status
main(sys.argv[1:])
