"""Time travel over recorded runs: fork a run from a step, replay it against a changed workflow,
compare two runs. It runs workflows, so it sits beside :mod:`stepline._api`, above the families' drivers."""

from __future__ import annotations

from stepline.timetravel._fork import Answers, Restoration, prepare_fork, rewind
from stepline.timetravel._record import ModelRequest, RecordedRun, read_run
from stepline.timetravel._replay import Replay, replay, serving
from stepline.timetravel._report import Report, compare

__all__ = ["Answers", "ModelRequest", "RecordedRun", "Replay", "Report", "Restoration", "compare", "prepare_fork",
           "read_run", "replay", "rewind", "serving"]
