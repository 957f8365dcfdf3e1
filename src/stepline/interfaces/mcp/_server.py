"""The ``stepline mcp`` server: an IDE or CLI agent drives runs through the step protocol, one step at a time.

The server owns an :class:`~stepline.engine.Engine` that runs in its own asyncio task with the
:class:`~stepline.executors._mcp_bridge.McpBridgeExecutor`. When the engine needs judgement it publishes the
request; the agent sees it with ``current_step`` (that step only — never a later one), does the work with the
protocol tools (``read``, ``ask``, ``write_output``, ``set_var``, ``call_tool``) and ends it with ``finish``
or ``decide``. Every call goes through the run's journaled session, so order, state and validation stay
with stepline. Nobody is prompted on a terminal here (stdio is the transport): the agent is the person's
voice. A step's menu is answered by the choice the agent passes with ``finish``; a question for the person
(a menu left unanswered, a router's question, an ``ask``) comes back from ``current_step`` as the thing to do
(``waiting_for_answer``: its kind, question and choices) and ``answer`` gives the person's answer, journaled as
a terminal answer is. Approvals stay gates: a gated step blocks the run, ``list_gates``/``decide_gate`` settle
it and ``resume_run`` continues; a run blocked on a question (non-interactive mode, or stopped while one was
waiting) shows it from ``current_step`` too, and ``answer`` records it and resumes the run.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from stepline.errors import NotFoundError, RunStateError, SteplineError, UsageError
from stepline.executors._mcp_bridge import McpBridgeExecutor, StepBridge, add_step_tools, step_payload

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from stepline import Engine
    from stepline.engine import RuntimeConfig
    from stepline.engine._human import Question
    from stepline.model import Event, Run, RunMode

__all__ = ["RunHost", "build_server", "find_workflows", "serve_stdio"]

_SKIP_DIRS = frozenset({".git", ".stepline", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache",
                        ".ruff_cache", ".pytest_cache", "archives"})
_MODES = ("normal", "yolo", "non-interactive")
_CHOICES_RE = re.compile(r"\s\[([^\[\]]+)\]$")  # a question gate's reason ends with its choices: "… [A/P/C]"


def find_workflows(root: Path, *, limit: int = 500) -> list[dict[str, str]]:
    """Every workflow under ``root`` that :func:`stepline.families.detect_format` recognises, by relative path."""
    from stepline.families import detect_format

    found: list[dict[str, str]] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        candidates = [here / name for name in sorted(files)
                      if name.endswith((".yaml", ".yml", ".json")) or (name.startswith("workflow")
                                                                        and name.endswith(".md"))]
        if here.name.startswith("WFS-") or (here / "workflow-session.json").is_file():
            candidates = [here]
            dirs[:] = []
        for path in candidates:
            try:
                fmt = detect_format(path)
            except SteplineError:
                continue
            found.append({"path": path.relative_to(root).as_posix() or ".", "format": fmt})
            if len(found) >= limit:
                return found
    return found


class RunHost:
    """The runs one MCP server drives: at most one at a time, in a background task.

    Args:
        project_root: the project whose workflows and runs the server sees.
        config: runtime configuration (loaded from the project when omitted).
    """

    def __init__(self, project_root: Path, config: RuntimeConfig | None = None) -> None:
        from stepline.engine import load_runtime_config

        self.project_root = project_root.resolve()
        if not self.project_root.is_dir():
            raise NotFoundError(f"{project_root}: no such project folder", hint="pass an existing --project-root")
        self.config = config or load_runtime_config(self.project_root, None)
        self.bridge = StepBridge()
        self.run_id: str | None = None
        self._task: asyncio.Task[Run] | None = None
        self._started = asyncio.Event()

    # -- driving --------------------------------------------------------------------------------------------
    def _engine(self, mode: RunMode) -> Engine:
        from stepline import Engine
        from stepline.engine import HumanChannel

        return Engine(project_root=self.project_root, config=self.config,
                      executor=McpBridgeExecutor({"bridge": self.bridge}), mode=mode,
                      human=HumanChannel(interactive=False, relay=self._relay), listeners=[self._listen])

    async def _relay(self, question: Question) -> tuple[str, str]:
        """The human channel's way to the person: the question waits in the bridge for ``answer``."""
        return await self.bridge.ask_person(run_id=question.run_id, step_id=question.step_id,
                                            gate_id=question.gate_id, question=question.question,
                                            choices=question.choices, menu=question.menu)

    def _listen(self, event: Event) -> None:
        if event.type in ("WorkflowStarted", "WorkflowResumed"):
            self.run_id = event.run_id
            self._started.set()

    def _check_idle(self) -> None:
        if self._task is not None and not self._task.done():
            raise RunStateError(f"run {self.run_id} is being driven by this server",
                                hint="finish its steps (current_step) before starting or resuming another")

    async def _launch(self, drive: Any) -> dict[str, Any]:
        self._started.clear()
        self.run_id = None
        task: asyncio.Task[Run] = asyncio.ensure_future(drive)
        task.add_done_callback(_retrieve)  # its error is reported by run_status, not logged as unretrieved
        self._task = task
        waiter = asyncio.ensure_future(self._started.wait())
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done() and task.exception() is not None and self.run_id is None:
            error = task.exception()
            raise error if isinstance(error, SteplineError) else RunStateError(f"the run did not start: {error}")
        return {"run_id": self.run_id, "next": "call current_step to get the step waiting for work"}

    async def start(self, path: str, variables: dict[str, Any] | None = None, mode: str = "normal") -> dict[str, Any]:
        """Start a run of the workflow at ``path`` (relative to the project root)."""
        from stepline.families import load_workflow

        self._check_idle()
        if mode not in _MODES:
            raise UsageError(f"mode {mode!r} is not one of {', '.join(_MODES)}")
        target = (self.project_root / path).resolve()
        if not target.is_relative_to(self.project_root):
            raise UsageError(f"{path!r} is outside the project root", hint="list_workflows shows what can run")
        workflow = load_workflow(target, project_root=self.project_root, variables=variables or {})
        engine = self._engine(cast("RunMode", mode))
        return await self._launch(engine.start(workflow, variables or {}))

    async def resume(self, run_id: str) -> dict[str, Any]:
        """Continue a blocked, failed or interrupted run from its first unfinished step."""
        self._check_idle()
        return await self._launch(self._engine("normal").resume(run_id))

    async def current(self, wait_seconds: float = 10.0) -> dict[str, Any]:
        """The request waiting for work (only the current step), or the run's state when none is waiting."""
        task = self._task
        if task is None:
            raise UsageError("no run is being driven", hint="start_run (or resume_run) first")
        bridge = self.bridge
        if bridge.request is None and bridge.question is None and not task.done() and wait_seconds > 0:
            waiter = asyncio.ensure_future(bridge.wait_ready())
            await asyncio.wait({waiter, task}, timeout=wait_seconds, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        question = bridge.question
        if question is not None:  # before the request: while it waits, the request (an ask) cannot go on
            return {"run_id": self.run_id, "status": "waiting_for_answer", "step": question.payload()}
        request = bridge.request
        if request is not None:
            step = step_payload(request)
            if request.menu and request.kind == "work" and request.mode != "yolo":
                step["menu_note"] = ("the menu is the user's: show it to them once and pass their choice as "
                                     "finish(choice=KEY); without a choice it comes back from current_step as "
                                     "waiting_for_answer, for answer(run_id, KEY)")
            return {"run_id": self.run_id, "status": "waiting_for_work", "step": step}
        if not task.done():
            return {"run_id": self.run_id, "status": "running",
                    "note": "the runtime is busy (tools, checks); call current_step again"}
        return self.status(self.run_id)

    # -- inspecting -----------------------------------------------------------------------------------------
    def _load(self, run_id: str | None) -> Run:
        from stepline import Engine

        engine = Engine(project_root=self.project_root, config=self.config)
        if run_id is None:
            latest = engine.store.latest()
            if latest is None:
                raise NotFoundError(f"no runs under {engine.store.root}", hint="start one with start_run")
            return engine.load(latest)
        return engine.load(engine.store.open(run_id))

    def status(self, run_id: str | None = None) -> dict[str, Any]:
        """A run's status and steps (default: the run this server drives, else the latest)."""
        run = self._load(run_id or self.run_id)
        summary: dict[str, Any] = {
            "run_id": run.run_id, "workflow": run.workflow.id, "format": run.workflow.format,
            "status": run.status.value, "blocked_reason": run.blocked_reason, "error": run.error,
            "steps": [{"step_id": s.step_id, "name": s.name, "status": s.status.value, "attempts": s.attempts,
                       "error": s.error, "outputs": s.outputs} for s in run.steps.values()],
        }
        task = self._task
        if task is not None and task.done() and run.run_id == self.run_id and not task.cancelled():
            error = task.exception()
            if error is not None:
                summary["error"] = summary["error"] or str(error)
        if run.status.value == "blocked":
            question = self._blocked_question(run.run_id)
            if question is not None:
                summary["step"] = question
                summary["next"] = (f"ask the user, then answer({run.run_id!r}, answer): it is recorded and the "
                                   "run resumes")
            else:
                summary["next"] = "see list_gates; decide_gate, then resume_run"
        return summary

    def _blocked_question(self, run_id: str, step_id: str | None = None) -> dict[str, Any] | None:
        """The oldest question gate a blocked run waits on (of ``step_id`` when given), as an agent sees it."""
        for gate in self.gates(run_id):
            if gate.get("kind") != "question" or (step_id is not None and gate.get("step_id") != step_id):
                continue
            reason = str(gate.get("reason") or "")
            found = _CHOICES_RE.search(reason)
            choices = found[1].split("/") if found else None
            question = reason[:found.start()] if found else reason
            return {"kind": "question", "run_id": run_id, "step_id": gate.get("step_id"),
                    "gate_id": gate["gate_id"], "question": question, "choices": choices, "menu": [],
                    "ends_with": "answer(run_id, answer): ask the user, then pass their answer"}
        return None

    def gates(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Pending gates (approvals, risky tools, questions) of one run, or of every run."""
        from stepline.store import RunStore

        store = RunStore(self.project_root / self.config.runtime.storage_root)
        run_dirs = [store.open(run_id)] if run_id else [store.open(s.run_id) for s in store.summaries()]
        return [{"run_id": run_dir.run_id, **gate} for run_dir in run_dirs
                for gate in run_dir.read("gates.json", []) or [] if gate.get("status") == "pending"]

    def decide_gate(self, run_id: str, gate_id: str | None, *, approve: bool, by: str, notes: str | None,
                    answer: str | None) -> dict[str, Any]:
        """Approve, reject or answer a pending gate of a run that is not being driven."""
        from stepline import Engine

        if self._task is not None and not self._task.done() and self.run_id and run_id in self.run_id:
            raise RunStateError(f"run {self.run_id} is being driven; its gates are decided once it blocks")
        decided = Engine(project_root=self.project_root, config=self.config).decide_gate(
            run_id, gate_id, approved=approve or answer is not None, by=by, notes=notes, answer=answer)
        return {"gate_id": decided, "next": f"resume_run({run_id!r}) continues the run"}

    def _driving(self, run_id: str) -> bool:
        return (bool(run_id) and self._task is not None and not self._task.done() and self.run_id is not None
                and (run_id == self.run_id or self.run_id.startswith(run_id)))

    async def answer(self, run_id: str, answer: str, *, step_id: str | None = None,
                     by: str = "mcp") -> dict[str, Any]:
        """Give the person's answer to the question ``run_id`` waits on (a menu's choice, a question's answer).

        The run this server drives gets it at once; a run blocked on a question gate gets it recorded the way
        ``stepline answer`` records it, and is resumed (when this server drives nothing else).
        """
        if self._driving(run_id):
            if self.bridge.question is None:
                raise RunStateError(f"run {self.run_id} has no question waiting for an answer",
                                    hint="current_step shows what it waits for")
            return self.bridge.answer(answer, step_id=step_id, by=by)
        from stepline import Engine

        run_id = self._load(run_id).run_id
        waiting = self._blocked_question(run_id, step_id)
        if waiting is None:
            raise RunStateError(f"run {run_id} has no question waiting for an answer",
                                hint="run_status shows its state; list_gates its pending gates")
        choices: list[str] | None = waiting["choices"]
        value = answer.strip()
        if choices:
            wanted = value.strip("[]*").strip().lower()
            matched = next((c for c in choices if c.lower() == wanted), None)
            if matched is None:
                raise UsageError(f"{answer!r} is not an answer to {waiting['question']!r}",
                                 hint="answer one of " + ", ".join(choices))
            value = matched
        gate_id = Engine(project_root=self.project_root, config=self.config).decide_gate(
            run_id, waiting["gate_id"], approved=True, by=by, notes=None, answer=value)
        result: dict[str, Any] = {"ok": True, "run_id": run_id, "gate_id": gate_id, "step_id": waiting["step_id"],
                                  "question": waiting["question"], "answer": value}
        if self._task is not None and not self._task.done():
            return {**result, "next": f"resume_run({run_id!r}) continues the run once run {self.run_id} is done"}
        await self.resume(run_id)
        return {**result, "resumed": True, "next": "call current_step"}


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def build_server(host: RunHost) -> MCPServer[Any]:
    """The MCP server exposing ``host``: workflows, runs, the current step, the protocol, gates."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server: MCPServer[Any] = MCPServer(
        "stepline", log_level="WARNING",
        instructions="Drive stepline workflow runs one step at a time: start_run, then repeat current_step -> do "
                     "the step's work with read/write_output/set_var/call_tool/ask -> finish (or decide) until "
                     "the run is completed. Only the current step is ever shown. A step's menu is the user's: "
                     "show it to them once and pass their choice with finish(choice=...). When current_step "
                     "says waiting_for_answer (a menu or a question), ask the user and call answer(run_id, "
                     "answer).")
    add_step_tools(server, host.bridge)

    def guard(exc: SteplineError) -> ToolError:
        return ToolError(exc.format_message())

    @server.tool()
    async def list_workflows() -> list[dict[str, str]]:
        """Workflows under the project root (native YAML/JSON, BMAD workflow.yaml / workflow*.md, CCW sessions)."""
        return await asyncio.to_thread(find_workflows, host.project_root)

    @server.tool()
    async def start_run(path: str, variables: dict[str, Any] | None = None, mode: str = "normal") -> dict[str, Any]:
        """Start a run of the workflow at `path`; mode normal|yolo|non-interactive. Then call current_step."""
        try:
            return await host.start(path, variables, mode)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def resume_run(run_id: str) -> dict[str, Any]:
        """Continue a blocked, failed or interrupted run from its first unfinished step."""
        try:
            return await host.resume(run_id)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def current_step(wait_seconds: float = 10.0) -> dict[str, Any]:
        """The step waiting for work (this step only), or the run's final state; waits up to `wait_seconds`."""
        try:
            return await host.current(wait_seconds)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def run_status(run_id: str | None = None) -> dict[str, Any]:
        """A run's status and its steps (default: the run this server drives, else the latest)."""
        try:
            return await asyncio.to_thread(host.status, run_id)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def list_gates(run_id: str | None = None) -> list[dict[str, Any]]:
        """Gates waiting for a person: approvals, high-risk tools, questions."""
        try:
            return await asyncio.to_thread(host.gates, run_id)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def answer(run_id: str, answer: str, step_id: str | None = None, by: str = "mcp") -> dict[str, Any]:
        """Give the user's answer to the question or menu the run waits on (what current_step shows as
        waiting_for_answer): the option's key for a menu. Journaled like an answer typed at the terminal; a run
        blocked on the question is resumed."""
        try:
            return await host.answer(run_id, answer, step_id=step_id, by=by)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def decide_gate(run_id: str, gate_id: str | None = None, approve: bool = True, by: str = "mcp",
                          notes: str | None = None, answer: str | None = None) -> dict[str, Any]:
        """Approve or reject a pending gate (or answer a pending question with `answer`); then resume_run."""
        try:
            return host.decide_gate(run_id, gate_id, approve=approve, by=by, notes=notes, answer=answer)
        except SteplineError as exc:
            raise guard(exc) from exc

    return server


async def serve_stdio(project_root: Path, config: RuntimeConfig | None = None) -> None:
    """Serve the project's runs over MCP on stdin/stdout until the client closes the stream."""
    host = RunHost(project_root, config)
    await build_server(host).run_stdio_async()
