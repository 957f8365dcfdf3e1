"""Errors a user of stepline can cause, and how the CLI reports them.

The tree of errors, with the exit code of each: :class:`SteplineError`.

Control-flow signals (a step blocked on a person, a cancelled step) are not errors and live in
:mod:`stepline.engine`; they never reach a user as a traceback.

Every message names the thing (file:line, run id, gate id) and, where there is one, the fix.
"""

from __future__ import annotations

import errno
from typing import ClassVar

__all__ = [
    "EXIT_CODES",
    "AgentCrashed",
    "AgentEnvironmentError",
    "AgentNeedsPermission",
    "AgentRateLimited",
    "AgentStalled",
    "AgentUnreachable",
    "BudgetExceeded",
    "ConfigError",
    "ExecutorError",
    "JournalError",
    "NondeterminismError",
    "NotFoundError",
    "OutsideRootError",
    "ReaderError",
    "RunLockedError",
    "RunStateError",
    "StepFailed",
    "SteplineError",
    "StorageError",
    "ToolError",
    "UsageError",
]


#: Every exit code of the ``stepline`` command and what it means: the errors' ``exit_code`` values and the
#: outcomes of a run (failed, blocked, deferred, different) that are not errors. The docs' table is made from it.
EXIT_CODES: dict[int, str] = {
    0: "success: the run completed, validation found no error",
    1: "another error a user can cause (one line naming the thing and the fix)",
    2: "usage: a bad flag, a malformed --var, a wrong combination",
    3: "not found: a path, run, gate, session or executor",
    4: "a workflow or config file that cannot be read, or a path that leads out of the project (file:line)",
    5: "the run's state does not allow it (already completed, locked by another process)",
    6: "a damaged run directory (`stepline doctor RUN` explains it)",
    7: "an executor or tool failure outside a step",
    8: "the run failed: a step failed after its retries",
    9: "the run is blocked, waiting for a person (approve, reject or answer; then resume)",
    10: "`validate` found errors",
    11: "`sprint run` / `resume`: a story was deferred (the others committed), or the loop's budget stopped it",
    12: "`replay` / `diff`: the two runs' artifacts differ",
    130: "interrupted (Ctrl-C); the run can be resumed",
}


class SteplineError(Exception):
    """Root of every error a user can cause; the CLI prints ``format_message()`` and exits ``exit_code``.

    The tree, with the exit code of each::

        SteplineError                 exit 1   anything a user can cause; one clear line
        ├── UsageError                exit 2   a bad flag, a bad --var, a wrong combination
        ├── NotFoundError             exit 3   a path, a run, a gate, a session that does not exist
        ├── ReaderError               exit 4   a workflow file that cannot be read (carries file:line)
        │   └── OutsideRootError               a path (a tool's argument, a run's record) that leads out of its root
        │   └── ValidationReport...            (see formats: a list of Diagnostics, not an exception)
        ├── RunStateError             exit 5   the run is not in a state that allows this (completed, locked)
        │   └── RunLockedError                 another process drives the run
        ├── JournalError              exit 6   a run directory that is damaged beyond the torn last line
        │   └── NondeterminismError            a resumed step asked for something the journal did not record
        ├── StorageError              exit 1   a run's file cannot be written (disk full, read-only): path + cause
        ├── ExecutorError             exit 7   an executor failed (retryable says whether to try again)
        │   ├── BudgetExceeded                 a call was stopped because its usage crossed its budget
        │   └── AgentEnvironmentError          an agent CLI failed for a reason outside the work (``kind`` says which):
        │       ├── AgentStalled               no output and no file change for its stall limit (stopped there)
        │       ├── AgentNeedsPermission       a permission, trust or login prompt it cannot pass unattended
        │       ├── AgentRateLimited           a rate limit or quota error
        │       ├── AgentUnreachable           its model's endpoint could not be reached
        │       └── AgentCrashed               it exited at start, before it reached stepline (its stderr says why)
        ├── ToolError                 exit 7   a tool failed or was refused
        ├── ConfigError               exit 4   config/runtime.yaml or a --config file is wrong
        └── StepFailed                exit 8   a step failed for good (the run is failed, details on the step)
    """

    exit_code: ClassVar[int] = 1
    #: Whether doing the same thing again may succeed (used by the retry policy).
    retryable: bool = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def format_message(self) -> str:
        """Return the one line the CLI shows: the problem, then the fix when there is one."""
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message

    def __str__(self) -> str:
        return self.format_message()


class UsageError(SteplineError):
    """A bad command line: unknown flag value, malformed ``--var``, conflicting options."""

    exit_code: ClassVar[int] = 2


class NotFoundError(SteplineError):
    """A path, run, gate, executor or session that does not exist."""

    exit_code: ClassVar[int] = 3


class _AtFile(SteplineError):
    """An error about a file: ``path`` and ``line`` (1-based), when given, start the message as ``path:line:``;
    ``detail`` is the message without them."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 hint: str | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(where + message, hint=hint)
        self.detail = message
        self.path = path
        self.line = line


class ReaderError(_AtFile):
    """A workflow file that cannot be read; the message starts with ``file:line:``."""

    exit_code: ClassVar[int] = 4


class OutsideRootError(ReaderError):
    """A path that leads out of the folder it must stay in (the project, a skill): as written, or through a
    symlink. ``path:line``, when given, is where the path was named (a journal's record, say)."""


class ConfigError(ReaderError):
    """A runtime configuration file (``config/runtime.yaml``) that is malformed or invalid."""


class RunStateError(SteplineError):
    """The run is not in a state that allows the operation (resuming a completed run, say)."""

    exit_code: ClassVar[int] = 5


class RunLockedError(RunStateError):
    """Another live process holds the run's lock."""


class JournalError(_AtFile):
    """A run's journal or snapshot is damaged in a way that is not a torn last line.

    ``path`` and ``line`` (1-based), when given, start the message as ``path:line:``; ``detail`` is what is
    wrong without them (what ``stepline doctor`` shows next to the file and line).
    """

    exit_code: ClassVar[int] = 6

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 hint: str | None = None) -> None:
        # A damaged file's text may hold any line break: the message stays one line.
        super().__init__(message.translate(_LINE_BREAKS), path=path, line=line, hint=hint)


#: What ``str.splitlines`` breaks a line at, each shown escaped.
_LINE_BREAKS = {ord(c): ascii(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


class NondeterminismError(JournalError):
    """On resume, a step asked for a different call than the one the journal recorded at that position.

    The journal is the truth: a resumed step must make the same calls in the same order up to the point
    where the previous process stopped. Editing a workflow between a crash and its resume can cause this.
    """


class StorageError(SteplineError):
    """A file of a run (or the folder of its runs) cannot be written: the disk is full, read-only, or refuses.

    The message names the path and the cause (``No space left on device``); the run itself is left as the
    journal says, so it can be resumed once the cause is gone (the hint says how).
    """

    #: The errnos of a disk that refuses to store more (full, over quota, read-only): not a step's failure.
    REFUSALS: ClassVar[frozenset[int]] = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        #: What removes the cause (free some space), before any caller adds how its work goes on.
        self.remedy = hint or "fix the cause"

    @classmethod
    def from_os(cls, exc: OSError, path: object, doing: str = "write") -> StorageError:
        """The one line for ``exc``, raised while doing ``doing`` (a verb: write, create, lock) to ``path``."""
        cause = exc.strerror or type(exc).__name__
        return cls(f"cannot {doing} {path}: {cause}", hint=_STORAGE_HINTS.get(exc.errno or 0))


_STORAGE_HINTS = {errno.ENOSPC: "free some space on that disk",
                  errno.EDQUOT: "free some space: the disk quota is used up",
                  errno.EROFS: "the file system is mounted read-only: remount it read-write"}


class ExecutorError(SteplineError):
    """An executor could not do a step (network down, model refused, CLI missing)."""

    exit_code: ClassVar[int] = 7

    def __init__(self, message: str, *, retryable: bool = False, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retryable = retryable


class BudgetExceeded(ExecutorError):
    """A running call was stopped because its usage crossed the budget its caller gave it (never retryable:
    the same call would cross it again). ``usage`` is what it had used when it was stopped."""

    def __init__(self, message: str, *, usage: dict[str, float] | None = None, hint: str | None = None) -> None:
        super().__init__(message, retryable=False, hint=hint)
        self.usage = dict(usage or {})


class AgentEnvironmentError(ExecutorError):
    """A coding-agent CLI failed for a reason that is not the work's: it hung, it waits for a permission or a login,
    its quota or rate limit is spent, its endpoint is unreachable. ``kind`` names which (it is in the message too),
    so a caller that counts attempts at the work (the sprint loop's builds) need not count this one."""

    kind: ClassVar[str] = "environment"
    #: Whether doing the same again may succeed, unless the raiser says otherwise.
    retryable_by_default: ClassVar[bool] = True

    def __init__(self, message: str, *, retryable: bool | None = None, hint: str | None = None) -> None:
        super().__init__(message, retryable=self.retryable_by_default if retryable is None else retryable, hint=hint)


class AgentStalled(AgentEnvironmentError):
    """No line on its stream and no file change in its folder for its ``stall_seconds``: it was stopped there."""

    kind: ClassVar[str] = "stall"


class AgentNeedsPermission(AgentEnvironmentError):
    """It stopped at a permission, trust or login prompt nobody can answer unattended (not retryable as it is)."""

    kind: ClassVar[str] = "permission"
    retryable_by_default: ClassVar[bool] = False


class AgentRateLimited(AgentEnvironmentError):
    """Its provider refused for a rate limit or a spent quota."""

    kind: ClassVar[str] = "rate-limit"


class AgentUnreachable(AgentEnvironmentError):
    """It could not connect to its model's endpoint."""

    kind: ClassVar[str] = "connection"


class AgentCrashed(AgentEnvironmentError):
    """It exited with an error before it reached stepline (no line on its stream, no call to its step's server): it
    crashed at start (an import, its installation). Not retryable as it is."""

    kind: ClassVar[str] = "crash"
    retryable_by_default: ClassVar[bool] = False


class ToolError(SteplineError):
    """A tool call was refused by the pipeline or failed while running."""

    exit_code: ClassVar[int] = 7

    def __init__(self, message: str, *, retryable: bool = False, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retryable = retryable


class StepFailed(SteplineError):
    """A step failed after its retries; the run is marked failed."""

    exit_code: ClassVar[int] = 8

    def __init__(self, message: str, *, retryable: bool = True, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retryable = retryable
