"""What a tool IS: its spec, the registry that names it, and what its handler receives and returns (R-T1).

This module is imported by every tool worker process, so it stays free of pydantic and of the model.
"""

from __future__ import annotations

import difflib
import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from stepline.errors import ToolError
from stepline.time import DEFAULT_TIMEZONE

if TYPE_CHECKING:  # not at run time: worker processes import this module and must start fast
    from stepline.model import Risk

__all__ = [
    "EffectCheck",
    "RunOutcome",
    "ToolCommand",
    "ToolContext",
    "ToolHandler",
    "ToolOutput",
    "ToolRegistry",
    "ToolSpec",
    "tool_gate_id",
]

RISK_ORDER: dict[str, int] = {"low": 0, "medium": 1, "high": 2}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a handler knows about the call besides its arguments; picklable, it travels to the worker.

    ``now`` is the instant the pipeline dispatched the call; inside the worker :func:`stepline.time.now`
    returns it, so a tool's notion of "now" is the call's time and is the same on replay.
    """

    project_root: str
    step_id: str | None
    now: datetime
    default_timezone: str = DEFAULT_TIMEZONE
    max_output_bytes: int = 65_536


@dataclass(slots=True)
class ToolOutput:
    """What a handler may return instead of a bare JSON value: captured streams, artifacts, or a failure.

    A non-``None`` ``error`` makes the call fail while keeping ``stdout``/``stderr`` (a shell command that
    exits non-zero, a validation that finds problems).
    """

    result: Any = None
    stdout: str = ""
    stderr: str = ""
    artifacts: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How one run of a tool ended (in a worker or as a command); ``pid`` is its process id, gone by now.

    ``output`` is what the tool produced, when it got that far; a ``timeout`` may carry the output so far.
    """

    status: Literal["ok", "error", "timeout", "cancelled"]
    output: ToolOutput | None = None
    error: str | None = None
    retryable: bool = False
    pid: int | None = None


ToolHandler = Callable[[dict[str, Any], ToolContext], Any]
"""A tool's code: ``handler(args, ctx)`` returns a JSON value or a :class:`ToolOutput`, or raises.

It runs in a separate worker process, so it must be a module-level function (picklable by reference).
Raise :class:`~stepline.errors.ToolError` with ``retryable=True`` for failures worth trying again.
"""

@dataclass(frozen=True, slots=True)
class EffectCheck:
    """How to tell, after a crash, whether a call of a tool that is not idempotent had its effect.

    A call's intent is journaled before it runs; a crash after the intent and before the result leaves its
    outcome unknown. ``before(args, project_root)`` is called just before the intent is journaled and returns
    the state the call will change (journaled with the intent), or ``None`` when this call's effect cannot be
    checked. On resume ``happened(args, project_root, before)`` looks at the disk: ``True`` (the effect is
    there: the call is recorded done, not run again), ``False`` (it is not: the call runs), or ``None``
    (cannot tell: the step stops for a person). Both run in the engine's process and must only read files.
    """

    before: Callable[[dict[str, Any], str], dict[str, Any] | None]
    happened: Callable[[dict[str, Any], str, dict[str, Any]], bool | None]


ToolCommand = Callable[[dict[str, Any]], Sequence[str]]
"""A tool that is a program: ``command(args)`` returns the argv to run, e.g. ``["/bin/sh", "-c", ...]``.

It is called in the engine's process with the validated arguments and must only build the argv (no I/O).
The program runs as the engine's direct child in the project root, stdin ``/dev/null``; exit code 0 is
success with ``{"exit_code": 0}`` as the result, any other code a failed call, and its output is captured.
"""


@dataclass(frozen=True)
class ToolSpec:
    """A tool the pipeline can run: name, JSON-schema arguments, risk, and either a handler or a command.

    A tool is exactly one of two kinds, because they need different isolation. A Python ``handler`` runs in
    a fresh interpreter (the worker), since Python code in the engine's process could neither be stopped on
    timeout nor be kept from harming the engine. A ``command`` is a program: it is isolated by being its own
    process already, so the pipeline starts it directly (one process, no interpreter to boot) in its own
    process group, and kills the group on timeout or cancellation. Prefer a command when the tool's work is
    running a program (``shell`` is one); write a handler when it is Python.

    ``required`` is the tool's default for whether its failure fails the step (a step's call may also
    mark it required). ``idempotent`` says running it twice is harmless: only idempotent tools are retried.
    ``effect`` (for a tool that is not idempotent) tells whether an interrupted call had its effect, so a
    resumed run neither repeats it nor stops for a person when the disk shows it.
    ``timeout_seconds`` overrides the policy's timeout for this tool.
    ``precondition(args, project_root)`` says why a call cannot do anything (a script that does not exist), or
    None; the pipeline then refuses the call, saying so, instead of running it to a bare failed exit code.
    ``code(args)`` names the files of code a call runs (``runScript``'s script): the pipeline refuses one whose
    real path is outside the project unless the policy allows its folder (:attr:`ToolPolicy.allowed_paths`).
    """

    name: str
    description: str
    handler: ToolHandler | None = None
    command: ToolCommand | None = None
    args_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    risk: Risk = "low"
    required: bool = False
    idempotent: bool = False
    timeout_seconds: float | None = None
    effect: EffectCheck | None = None
    precondition: Callable[[dict[str, Any], str], str | None] | None = None
    code: Callable[[dict[str, Any]], list[str]] | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ToolError(f"invalid tool name {self.name!r}", hint="use letters, digits, '_', '-', '.'")
        if self.risk not in RISK_ORDER:
            raise ToolError(f"tool {self.name!r}: risk must be low, medium or high, not {self.risk!r}")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ToolError(f"tool {self.name!r}: timeout_seconds must be positive")
        if (self.handler is None) == (self.command is None):
            raise ToolError(f"tool {self.name!r}: give either a handler or a command, not both or neither")
        # Imported here, not at the top: worker processes import this module and never validate schemas.
        from jsonschema import Draft202012Validator, SchemaError

        try:
            Draft202012Validator.check_schema(dict(self.args_schema))
        except SchemaError as exc:
            raise ToolError(f"tool {self.name!r}: args_schema is not a valid JSON Schema: "
                            f"{exc.message}") from exc
        if self.handler is None:
            return
        try:
            pickle.dumps(self.handler)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise ToolError(f"tool {self.name!r}: its handler cannot be sent to a worker process",
                            hint="make it a module-level function, not a lambda or closure") from exc


class ToolRegistry:
    """The tools a run may call, by name. Built-ins and third-party tools register the same way."""

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: ToolSpec, *, replace: bool = False) -> None:
        """Add ``spec``; a second tool with the same name is an error unless ``replace`` is set."""
        if spec.name in self._specs and not replace:
            raise ToolError(f"tool {spec.name!r} is already registered",
                            hint="pass replace=True to override it")
        self._specs[spec.name] = spec

    def get(self, name: str) -> ToolSpec:
        """Return the tool called ``name``; an unknown name is a ToolError suggesting close names."""
        try:
            return self._specs[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._specs, n=3)
            by_case = [known for known in self._specs if known.lower() == name.lower()]
            suggestions = list(dict.fromkeys(by_case + close))
            hint = f"did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else (
                f"known tools: {', '.join(sorted(self._specs)) or 'none'}")
            raise ToolError(f"unknown tool {name!r}", hint=hint) from None

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._specs)


def tool_gate_id(name: str, step_id: str) -> str:
    """Return the id of the approval gate a risky call waits on: ``tool:<name>:<step_id>``."""
    return f"tool:{name}:{step_id}"
