"""Run the stepline CLI in a child that SIGKILLs itself at a chosen point of the sprint loop.

``SPRINT_KILL=commit``: right after git made a story's commit, before the journal records it.
``SPRINT_KILL=advance``: after the commit is journaled, before the board moves (between commit and advance).
"""

import os
import signal
import sys
from typing import Any

from stepline.interfaces.cli._app import main
from stepline.sprint import _driver

kind = os.environ.get("SPRINT_KILL")
real_git_ok, real_set_status = _driver.git_ok, _driver.set_status


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
_driver.git_ok = git_ok  # type: ignore[assignment]
_driver.set_status = set_status
main(sys.argv[1:])
