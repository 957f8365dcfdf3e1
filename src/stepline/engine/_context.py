"""The context one step runs in: what the format's step driver uses to talk to the executor and the run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline._placeholders import Kind, find, substitute
from stepline.executors import MenuOption, RequestKind, StepRequest
from stepline.formats import read_text
from stepline.model import EventType, Risk, Run, RunStep, StepSpec

if TYPE_CHECKING:
    from stepline.engine._runner import Engine
    from stepline.engine._session import Outcome
    from stepline.store import Durability

__all__ = ["StepContext"]


class StepContext:
    """Everything a step driver may do during one attempt of one step."""

    def __init__(self, engine: Engine, run: Run, spec: StepSpec, step: RunStep, attempt: int) -> None:
        self.engine = engine
        self.run = run
        self.spec = spec
        self.step = step
        self.attempt = attempt
        #: The attempt whose journal keys this one's calls use: itself, or the attempt a lost Ray worker left,
        #: whose calls this one replays (see Engine._run_step).
        self.calls_attempt = attempt
        self.project_root = engine.project_root
        self.invocations = 0
        self.default_output: str | None = (
            self.render(spec.outputs[0]) if spec.outputs else None)
        self.handed_over: list[dict[str, Any]] = []
        self.guardrails: list[dict[str, Any]] = []
        self.written: dict[str, Path] = {}

    @property
    def variables(self) -> dict[str, Any]:
        """The run's variables as they are now."""
        return self.run.variables

    def render(self, text: str) -> str:
        """Substitute the run's variables into ``text``."""
        return substitute(text, self.run.variables, nested=True)

    def emit(self, kind: EventType, data: dict[str, Any] | None = None, *,
             sync: Durability = False) -> None:
        """Journal an event about this step."""
        self.engine.emit(kind, data or {}, step_id=self.spec.id, sync=sync)

    async def invoke(self, kind: RequestKind, *, title: str | None = None, content: str = "",
                     question: str | None = None, choices: list[str] | None = None, condition: str | None = None,
                     section: str | None = None, menu: list[MenuOption] | None = None,
                     hints: dict[str, Any] | None = None, context: dict[str, Any] | None = None) -> Outcome:
        """Send one request to the executor (or replay its journaled outcome) and return what it produced."""
        self.invocations += 1
        redact = self.engine.redact  # prompts handed to executors never carry secrets (R-S1)
        request = StepRequest(
            kind=kind, run_id=self.run.run_id, step_id=self.spec.id, title=title or self.spec.name or self.spec.id,
            content=redact(content), variables=self.engine.redacted_variables(), question=question, choices=choices,
            condition=condition, section=section, menu=list(menu or []),
            context={"project_root": str(self.project_root), **(context or {})},
            mode=self.run.mode, workflow_id=self.run.workflow.id, attempt=self.attempt,
            hints={**(hints or {}), "invocation": self.invocations - 1}, evidence=self.spec.evidence,
            telis_context=redact(self.step.telis_context) if self.step.telis_context else None,
        )
        return await self.engine.invoke(self, request, self.invocations - 1)

    def next_invoke_replays(self) -> bool:
        """Whether the next :meth:`invoke` returns the outcome an earlier driver journaled, calling no executor (a
        driver that must prepare the ground for a call that runs again — a worktree put back — asks first)."""
        return self.engine.outcome_key(self, self.invocations) in self.engine.calls.recorded

    def note_output(self, rel: str, target: Path) -> None:
        """Remember a file this step wrote, for the artifact index at completion."""
        self.written[rel] = target

    def write_section(self, target: Path, section: str, content: str) -> None:
        """Fill ``{{section}}`` in ``target`` with ``content``, or append it as a new section."""
        from stepline.store import atomic_write_bytes

        text = read_text(target) if target.exists() else ""
        markers = {Kind.RUNTIME, Kind.SLOT}  # a section's name may be free text: {{ Executive Summary }}
        updated = substitute(text, {section: content.rstrip("\n")}, kinds=markers) if any(
            p.name == section for p in find(text, markers)) else (
            text + ("\n" if text and not text.endswith("\n") else "") + content)
        atomic_write_bytes(target, updated.encode("utf-8"))

    def guard(self, name: str, data: Any) -> Any:
        """Run the input guardrails over ``data`` the step gathered itself (a command's output), report them
        with the step's, and return it redacted (see :func:`stepline.engine._checks.check_gathered`)."""
        from stepline.engine._checks import check_gathered

        return check_gathered(self, name, data)

    async def run_tool(self, name: str, args: dict[str, Any], *, risk: Risk | None = None) -> dict[str, Any]:
        """Run a tool through the engine's tool pipeline for this step (``risk`` can raise the tool's own)."""
        return await self.engine.run_tool(self, name, args, risk=risk)
