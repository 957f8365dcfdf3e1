"""The ``stepline mcp`` server: an IDE or CLI agent drives runs through the step protocol.

The server owns an :class:`~stepline.engine.Engine` that runs in its own asyncio task with the
:class:`~stepline.executors._mcp_bridge.McpBridgeExecutor`. When the engine needs judgement it publishes a
request under an id of its own; ``current_step`` lists every request waiting now (several at once when steps or a
skill's subagent layers run in parallel; never a later step's text), the agent does each one's work with the
protocol tools (``read``, ``ask``, ``write_output``, ``set_var``, ``call_tool``), naming its ``request_id``, and
ends it with ``finish`` or ``decide``. Every call goes through the request's journaled session, so order, state
and validation stay with stepline. While no request waits, ``current_step`` says what the runtime is doing.
Nobody is prompted on a terminal here (stdio is the transport): the agent is the person's voice. A step's menu
is answered by the choice the agent passes with ``finish``; a question for the person (a menu left unanswered, a
router's question, an ``ask``) is listed as a request ``waiting_for: "answer"`` (its kind, question and choices)
and ``answer`` gives the person's answer, journaled as a terminal answer is. Approvals stay gates: a gated step
blocks the run, ``list_gates``/``decide_gate`` settle it and ``resume_run`` continues; a run blocked on a
question (non-interactive mode, or stopped while one was waiting) shows it from ``current_step`` too, and
``answer`` records it and resumes the run.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

from pydantic import Field

from stepline._paths import confine
from stepline.errors import NotFoundError, RunStateError, SteplineError, UsageError
from stepline.executors import McpBridgeExecutor, StepBridge, add_step_tools
from stepline.model import RunMode

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from stepline import Engine
    from stepline.engine import Question, RuntimeConfig
    from stepline.model import Event, Run

__all__ = ["RunHost", "build_server", "find_workflows", "serve_stdio"]

_SKIP_DIRS = frozenset({".git", ".stepline", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache",
                        ".ruff_cache", ".pytest_cache", "archives"})
#: The folders beside a workflow file that hold its resources (BMAD's data/ and templates/), not workflows.
_RESOURCE_DIRS = frozenset({"data", "templates"})
_STEP_ENDS = frozenset({"WorkflowStepCompleted", "WorkflowStepFailed", "StepBlocked", "StepSkipped"})
_MENU_NOTE = ("the menu is the user's: show it to them once and pass their choice as finish(choice=KEY); without a "
              "choice it comes back from current_step as waiting_for_answer, for answer(run_id, KEY)")


def find_workflows(root: Path, *, limit: int = 500) -> list[dict[str, str]]:
    """Every workflow under ``root`` that :func:`stepline.families.detect_format` recognises, by relative path: a
    CCW session or an Agent Skill is its folder."""
    from stepline.families import detect_format

    found: list[dict[str, str]] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        if any(name.startswith("workflow") and name.endswith((".md", ".yaml")) for name in files):
            dirs[:] = [d for d in dirs if d not in _RESOURCE_DIRS]  # a workflow's own data and templates
        candidates = [here / name for name in sorted(files)
                      if name.endswith((".yaml", ".yml", ".json")) or (name.startswith("workflow")
                                                                        and name.endswith(".md"))]
        if here.name.startswith("WFS-") or "SKILL.md" in files or "workflow-session.json" in files:
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
        config: runtime configuration, or its file (the project's config/runtime.yaml when omitted).
    """

    def __init__(self, project_root: Path, config: RuntimeConfig | Path | None = None) -> None:
        from stepline.service import RunService

        if not project_root.is_dir():
            raise NotFoundError(f"{project_root}: no such project folder", hint="pass an existing --project-root")
        self.runs = RunService(project_root, config)
        self.project_root = self.runs.project_root
        self.bridge = StepBridge()
        self.run_id: str | None = None
        self._task: asyncio.Task[Run] | None = None
        self._started = asyncio.Event()
        #: The steps at work and what each is doing since when (``time.monotonic``), from the engine's events.
        self._active: dict[str, tuple[str, float]] = {}

    # -- driving --------------------------------------------------------------------------------------------
    def _engine(self, mode: RunMode) -> Engine:
        from stepline.engine import HumanChannel
        from stepline.families import register_drivers

        register_drivers()  # any run of the project may be started or resumed here
        return self.runs.engine(executor=McpBridgeExecutor({"bridge": self.bridge}), mode=mode,
                                human=HumanChannel(interactive=False, relay=self._relay), listeners=[self._listen])

    async def _relay(self, question: Question) -> tuple[str, str]:
        """The human channel's way to the person: the question waits in the bridge for ``answer``."""
        return await self.bridge.ask_person(run_id=question.run_id, step_id=question.step_id,
                                            gate_id=question.gate_id, question=question.question,
                                            choices=question.choices, menu=question.menu)

    def _listen(self, event: Event) -> None:
        if event.type in ("WorkflowStarted", "WorkflowResumed"):
            self.run_id = event.run_id
            self._active.clear()
            self._started.set()
        step_id = event.step_id or event.data.get("step_id")
        if not step_id:
            return
        if event.type in _STEP_ENDS:
            self._active.pop(step_id, None)
        elif event.type == "ToolStarted":
            self._active[step_id] = (f"running the tool {event.data.get('tool')!r}", time.monotonic())
        elif event.type in ("WorkflowStepStarted", "ToolCompleted", "ToolFailed"):
            self._active[step_id] = ("at work", time.monotonic())

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
        return {"run_id": self.run_id, "next": "call current_step to get the requests waiting for you"}

    async def start(self, path: str, variables: dict[str, Any] | None = None,
                    mode: RunMode = "normal") -> dict[str, Any]:
        """Start a run of the workflow at ``path`` (relative to the project root); a CCW session is executed as
        ``stepline ccw execute`` does (its tasks as a DAG, concurrently; its files kept; an unfinished run of it
        resumed)."""
        from stepline.families import detect_format, load_workflow

        self._check_idle()
        if mode not in get_args(RunMode):
            raise UsageError(f"mode {mode!r} is not one of {', '.join(get_args(RunMode))}")
        target = confine(self.project_root, path)
        engine = self._engine(mode)
        if target.is_dir() and detect_format(target) == "ccw":
            from stepline.ccw import execute_session

            return await self._launch(execute_session(engine, target))
        workflow = load_workflow(target, project_root=self.project_root, variables=variables or {})
        return await self._launch(engine.start(workflow, variables or {}))

    async def resume(self, run_id: str) -> dict[str, Any]:
        """Continue a blocked, failed or interrupted run from its first unfinished step."""
        self._check_idle()
        return await self._launch(self._engine("normal").resume(run_id))

    async def current(self, wait_seconds: float = 10.0) -> dict[str, Any]:
        """Every request the run waits on (work requests and questions, each with its id), or what the runtime is
        doing when none waits, or the run's state once it is over. Waits up to ``wait_seconds`` for a request."""
        task = self._task
        if task is None:
            raise UsageError("no run is being driven", hint="start_run (or resume_run) first")
        bridge = self.bridge
        if not bridge.pending() and not task.done() and wait_seconds > 0:
            waiter = asyncio.ensure_future(bridge.wait_until(lambda: bool(bridge.pending())))
            await asyncio.wait({waiter, task}, timeout=wait_seconds, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        requests = bridge.pending()
        if requests:
            for item in requests:
                if item["waiting_for"] == "work" and item["menu"] and item["kind"] == "work" and item["mode"] != "yolo":
                    item["menu_note"] = _MENU_NOTE
            asked = any(item["waiting_for"] == "answer" for item in requests)
            result: dict[str, Any] = {"run_id": self.run_id,
                                      "status": "waiting_for_answer" if asked else "waiting_for_work",
                                      "requests": requests}
            if len(requests) > 1:
                result["note"] = (f"{len(requests)} requests are waiting: do each, in any order or in parallel "
                                  "subagents, passing its request_id with every call")
            return result
        if not task.done():
            return {"run_id": self.run_id, "status": "running", "requests": [], "note": self._activity()}
        return self.status(self.run_id)

    def _activity(self) -> str:
        """What the runtime is doing while no request waits for the agent: its steps at work, and for how long."""
        now = time.monotonic()
        doing = [f"step {step_id!r} is {what} ({now - since:.0f} s)" for step_id, (what, since) in self._active.items()]
        return ("no request waits for you: the runtime is working — " + ("; ".join(doing) if doing else
                "between steps (checks, saving)") + ". Call current_step again; it returns as soon as a request "
                "comes.")

    # -- inspecting -----------------------------------------------------------------------------------------
    def status(self, run_id: str | None = None) -> dict[str, Any]:
        """A run's status and steps (default: the run this server drives, else the latest)."""
        from stepline.service import run_summary

        run = self.runs.load(run_id or self.run_id)
        summary = run_summary(run)
        task = self._task
        if task is not None and task.done() and run.run_id == self.run_id and not task.cancelled():
            error = task.exception()
            if error is not None:
                summary["error"] = summary["error"] or str(error)
        if run.status.value == "blocked":
            questions = self._blocked_questions(run.run_id)
            if questions:
                summary["requests"] = questions
                summary["next"] = (f"ask the user, then answer({run.run_id!r}, answer, request_id): it is recorded "
                                   "and the run resumes")
            else:
                summary["next"] = "see list_gates; decide_gate, then resume_run"
        return summary

    def _blocked_questions(self, run_id: str) -> list[dict[str, Any]]:
        """The question gates a blocked run waits on, as an agent sees them (a gate's id is its request id)."""
        return [{"request_id": q.gate_id, "waiting_for": "answer", "kind": "question", "run_id": run_id,
                 "step_id": q.step_id, "gate_id": q.gate_id, "question": q.question,
                 "choices": [c.key for c in q.choices] or None,
                 "menu": [{"key": c.key, "label": c.label} for c in q.choices if c.label],
                 "ends_with": f"answer(run_id, answer, request_id={q.gate_id!r}): ask the user, then pass their "
                              "answer"} for q in self.runs.questions(run_id)]

    def gates(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Pending gates (approvals, risky tools, questions) of one run, or of every run."""
        return self.runs.pending_gates(run_id)[0]

    def driving(self, run_id: str) -> bool:
        """Whether this server drives run ``run_id`` (its id or a unique part of it) right now."""
        return (bool(run_id) and self._task is not None and not self._task.done() and self.run_id is not None
                and (run_id == self.run_id or self.run_id.startswith(run_id)))

    async def answer(self, run_id: str, answer: str, *, request_id: str | None = None,
                     by: str = "mcp") -> dict[str, Any]:
        """Give the person's answer to the question ``request_id`` of run ``run_id`` (the only one it waits on,
        without it): a menu's choice, a question's answer.

        The run this server drives gets it at once; a run blocked on a question gate gets it recorded the way
        ``stepline answer`` records it, and is resumed (when this server drives nothing else).
        """
        if self.driving(run_id):
            return self.bridge.answer(answer, request_id=request_id, by=by)
        questions = self.runs.questions(run_id)
        if request_id:
            questions = [q for q in questions if q.gate_id == request_id.strip()]
        if not questions:
            raise RunStateError(f"run {run_id} has no question {request_id + ' ' if request_id else ''}waiting for "
                                "an answer", hint="run_status shows its state; list_gates its pending gates")
        if len(questions) > 1:
            raise UsageError(f"run {run_id} waits on {len(questions)} questions ("
                             + ", ".join(q.gate_id for q in questions) + "): name one with request_id",
                             hint="run_status lists them")
        decided = self.runs.answer(questions[0].run_id, answer, gate_id=questions[0].gate_id, by=by)
        result: dict[str, Any] = {"ok": True, "run_id": decided.run_id, "gate_id": decided.gate.gate_id,
                                  "step_id": decided.gate.step_id, "question": decided.question,
                                  "answer": decided.gate.answer}
        if self._task is not None and not self._task.done():
            return {**result, "next": f"resume_run({decided.run_id!r}) continues the run once run {self.run_id} is "
                                      "done"}
        await self.resume(decided.run_id)
        return {**result, "resumed": True, "next": "call current_step"}


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


#: The ``run_id`` parameter of the tools that name a run.
RunId = Annotated[str, Field(description="The run's id, as start_run or current_step returned it (a unique prefix "
                                         "will do).")]

INSTRUCTIONS = """\
stepline runs a workflow (BMAD, Agent Skills, CCW, native) step by step; you do the work it asks for.
1. list_workflows, then start_run(path, mode) (mode normal: menus and questions go to the user through you).
2. current_step: every request the run waits on now, each with its request_id. waiting_for "work": do what its
   content says with read / write_output / set_var / call_tool / ask, then end it with finish(choice?, summary) —
   or decide(value, reason) when its kind is "decide". waiting_for "answer": ask the user the question (show the
   menu once), then answer(run_id, answer, request_id) with their reply (a menu: the option's key).
3. Pass request_id with every call. Several requests at once (parallel steps, a step's review layers run as
   subagents, marked by "layer") can be done in any order, or by parallel subagents of yours, each with its id.
4. Repeat current_step until its status is completed (or failed / blocked: run_status says why; a blocked gate is
   settled with list_gates and decide_gate, then resume_run). "running" means the runtime is working: call again.
Only the requests of now are ever shown, never a later step's text: do not guess ahead.
"""


def build_server(host: RunHost) -> MCPServer[Any]:
    """The MCP server exposing ``host``: workflows, runs, the waiting requests, the protocol, gates."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from stepline import __version__

    server: MCPServer[Any] = MCPServer("stepline", title="stepline workflow runs", version=__version__,
                                       log_level="WARNING", instructions=INSTRUCTIONS)
    add_step_tools(server, host.bridge)

    def guard(exc: SteplineError) -> ToolError:
        return ToolError(exc.format_message())

    @server.tool()
    async def list_workflows() -> list[dict[str, str]]:
        """Workflows under the project root that start_run can run: their path and format (native YAML/JSON,
        BMAD workflow.yaml / workflow*.md, Agent Skills folders, CCW sessions)."""
        return await asyncio.to_thread(find_workflows, host.project_root)

    @server.tool()
    async def start_run(
            path: Annotated[str, Field(description="The workflow to run, relative to the project root, as "
                                                   "list_workflows lists it.")],
            variables: Annotated[dict[str, Any] | None, Field(
                description="Values for the workflow's variables (name -> value), e.g. a skill's inputs.")] = None,
            mode: Annotated[RunMode, Field(
                description="normal: menus and questions go to the user through you; yolo: you answer them "
                            "yourself, as the user would (requests of kind 'answer'); non-interactive: the run "
                            "blocks on them until answered.")] = "normal") -> dict[str, Any]:
        """Start a run of a workflow (one run at a time per server). Then call current_step."""
        try:
            return await host.start(path, variables, mode)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def resume_run(run_id: RunId) -> dict[str, Any]:
        """Continue a blocked, failed or interrupted run from its first unfinished step. Then call current_step."""
        try:
            return await host.resume(run_id)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def current_step(
            wait_seconds: Annotated[float, Field(
                ge=0, le=600, description="How long to wait for a request when none waits yet (seconds).")] = 10.0,
    ) -> dict[str, Any]:
        """Every request the run waits on now (status waiting_for_work / waiting_for_answer, `requests`: each with
        its request_id, step, layer, kind and text), else what the runtime is doing (running), else the run's
        final state (completed, failed, blocked)."""
        try:
            return await host.current(wait_seconds)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def run_status(run_id: Annotated[str | None, Field(
            description="The run's id; default: the run this server drives, else the latest run.")] = None,
    ) -> dict[str, Any]:
        """A run's status and its steps (each with status, attempts, error, outputs); for a blocked run, the
        questions it waits on."""
        try:
            return await asyncio.to_thread(host.status, run_id)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def list_gates(run_id: Annotated[str | None, Field(
            description="The run's id; default: every run's pending gates.")] = None) -> list[dict[str, Any]]:
        """Gates waiting for a person: approvals, high-risk tools, questions of blocked runs."""
        try:
            return await asyncio.to_thread(host.gates, run_id)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool()
    async def answer(
            run_id: RunId,
            answer: Annotated[str, Field(description="The user's answer: for a menu or a question with choices, "
                                                     "one of the request's `choices` (a menu option's key; "
                                                     "another is refused naming them).")],
            request_id: Annotated[str | None, Field(
                description="The question's request_id, as current_step lists it. May be left out only while "
                            "exactly one question waits.")] = None,
            by: Annotated[str, Field(description="Who answered, for the journal.")] = "mcp") -> dict[str, Any]:
        """Give the user's answer to a question or menu the run waits on (a request current_step shows as
        waiting_for "answer"). Journaled like an answer typed at the terminal; a run blocked on the question is
        resumed."""
        try:
            return await host.answer(run_id, answer, request_id=request_id, by=by)
        except SteplineError as exc:
            raise guard(exc) from exc

    @server.tool(name="decide_gate")
    async def decide(
            run_id: RunId,
            gate_id: Annotated[str | None, Field(description="The gate's id, as list_gates lists it; may be left "
                                                             "out when the run has one pending gate.")] = None,
            approve: Annotated[bool, Field(description="Approve (true) or reject (false).")] = True,
            by: Annotated[str, Field(description="Who decided, for the journal.")] = "mcp",
            notes: Annotated[str | None, Field(description="Why, for the journal.")] = None,
            answer: Annotated[str | None, Field(description="For a question gate: the answer.")] = None,
    ) -> dict[str, Any]:
        """Approve or reject a pending gate of a run that is not being driven (or answer its question); then
        resume_run."""
        try:
            if host.driving(run_id):
                raise RunStateError(f"run {host.run_id} is being driven; its gates are decided once it blocks")
            decided = host.runs.answer(run_id, answer, gate_id=gate_id, by=by) if answer is not None else \
                host.runs.decide(run_id, gate_id, approved=approve, by=by, notes=notes)
        except SteplineError as exc:
            raise guard(exc) from exc
        return {"gate_id": decided.gate.gate_id, "next": f"resume_run({decided.run_id!r}) continues the run"}

    return server


async def serve_stdio(project_root: Path, config: RuntimeConfig | Path | None = None) -> None:
    """Serve the project's runs over MCP on stdin/stdout until the client closes the stream."""
    host = RunHost(project_root, config)
    await build_server(host).run_stdio_async()
