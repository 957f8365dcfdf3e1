"""The journaled implementation of the step protocol that executors call.

Each call gets a deterministic key ``<step>/<attempt>/<invocation>/<index>``. A call the journal already
recorded returns its recorded result (replay); a call with a visible effect (writing a file, running a tool)
is journaled as started and made durable *before* the effect, so a crash between the two is detected on
resume and the effect is redone idempotently (a file append is truncated back to its recorded length first)
or, for a tool that is not idempotent, its effect is read back from the disk where the tool can tell (done:
recorded, not run again; not done: run) and otherwise the step blocks for a person instead of running it twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepline._paths import confine
from stepline.engine._signals import StepBlocked
from stepline.engine._tools import tool_spec
from stepline.errors import NondeterminismError, StepFailed
from stepline.executors import StepRequest, StepSession, WriteMode
from stepline.model import Event, EventType, Risk, ToolResult
from stepline.time import isoformat, now

if TYPE_CHECKING:
    from stepline.engine._context import StepContext

__all__ = ["JournaledSession", "Outcome", "repair_torn_appends", "run_tool_once", "sha256_file"]


@dataclass(slots=True)
class Outcome:
    """What one executor request produced."""

    choice: str | None = None
    summary: str | None = None
    decision: bool | None = None
    reason: str | None = None
    written: list[str] = field(default_factory=list)
    sections: dict[str, str] = field(default_factory=dict)
    finished: bool = False
    #: the person's answers to the questions the executor asked (``ask``) during the request, in order
    asked: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form for the journal."""
        return {"choice": self.choice, "summary": self.summary, "decision": self.decision, "reason": self.reason,
                "written": self.written, "sections": self.sections, "finished": self.finished, "asked": self.asked}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Outcome:
        """Rebuild from the journal."""
        return cls(**raw)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class JournaledSession(StepSession):
    """One executor request's view of the runtime; every call is journaled under a deterministic key."""

    def __init__(self, ctx: StepContext, request: StepRequest, invocation: int) -> None:
        self.ctx = ctx
        self.request = request
        self.prefix = f"{ctx.spec.id}/{ctx.calls_attempt}/{invocation}"
        self.index = 0
        self.outcome = Outcome()

    # -- the replay machinery -------------------------------------------------------------------------------
    def _next_key(self, op: str) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
        self.index += 1
        key = f"{self.prefix}/{self.index}"
        calls = self.ctx.engine.calls
        recorded = calls.recorded.get(key)
        started = calls.started.get(key)
        seen = recorded or started
        if seen is not None and seen.get("op") != op:
            raise NondeterminismError(
                f"step {self.ctx.spec.id!r}: call {self.index} was {seen.get('op')!r} when the run was interrupted "
                f"but is {op!r} now", hint="the workflow or script changed since; restart the run instead")
        return key, recorded, started

    def _record(self, key: str, op: str, args: dict[str, Any], result: Any) -> None:
        self.ctx.emit(EventType.CALL_RECORDED, {"key": key, "op": op, "args": args, "result": result}, sync=False)

    def output_log(self) -> Path | None:
        """The step's agent-output log in the run's folder (:meth:`stepline.store.RunDir.step_log`)."""
        run_dir = self.ctx.engine._dir
        return run_dir.step_log(self.ctx.spec.id) if run_dir is not None else None

    async def record_usage(self, label: str, usage: dict[str, Any]) -> None:
        """Journal what a call that ended without a result used, under a key of its own (replay never reads it)."""
        base = f"{self.prefix}/usage/"
        number = 1 + sum(1 for key in self.ctx.engine.calls.recorded if key.startswith(base))
        self._record(f"{base}{number}", "usage:" + label, {}, {"usage": usage})

    async def agent_process(self, process: dict[str, Any]) -> dict[str, Any] | None:
        """Journal the agent process as an intent (synced before it starts), under this request's own key: a
        resumed request reads back the one an earlier driver left, whichever call it had reached."""
        key = f"{self.prefix}/agent-process"
        before = self.ctx.engine.calls.started.get(key)
        self.ctx.emit(EventType.CALL_STARTED, {"key": key, "op": "agent_process", "args": process}, sync=True)
        return dict(before["args"]) if before is not None else None

    def _folder(self) -> Path:
        """The folder this request's paths are relative to: its context's ``project_root`` (a sprint story's
        worktree, with ``isolation: worktree``), which must be in the project; by default the project."""
        given = self.request.context.get("project_root")
        return confine(self.ctx.project_root, given) if given else self.ctx.project_root

    def _check_open(self, op: str) -> None:
        if self.outcome.finished:
            raise StepFailed(f"step {self.ctx.spec.id!r}: {op} after finish", retryable=False)

    # -- the protocol ---------------------------------------------------------------------------------------
    async def read(self, path: str) -> str:
        """Read a project file (re-read on replay; the journal keeps its hash for the audit)."""
        self._check_open("read")
        key, recorded, _ = self._next_key("read")
        target = confine(self._folder(), path)
        try:
            # A file that is not UTF-8 (an image, say) reaches the executor with U+FFFD in place of bad bytes.
            text = target.read_bytes().decode("utf-8", "replace").replace("\r\n", "\n")
        except FileNotFoundError:
            text = ""
            found = False
        else:
            found = True
        if recorded is None:
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            self._record(key, "read", {"path": path}, {"sha256": digest, "found": found})
            self.ctx.handed_over.append({"read": path})
        return text

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        """Ask the human channel; the answer is journaled so a resumed step does not ask again."""
        self._check_open("ask")
        key, recorded, _ = self._next_key("ask")
        if recorded is not None:
            self.outcome.asked.append(str(recorded["result"]))
            return str(recorded["result"])
        answer = await self.ctx.engine.human.ask(self.ctx, question, choices, key)
        self._record(key, "ask", {"question": question, "choices": choices}, answer)
        self.outcome.asked.append(answer)
        return answer

    async def write_output(self, content: str, *, path: str | None = None, section: str | None = None,
                           mode: WriteMode = "append") -> str:
        """Write to the step's output file; durable intent first, then the write, then the record."""
        self._check_open("write_output")
        key, recorded, started = self._next_key("write_output")
        if recorded is not None:
            written = str(recorded["result"])
            self.outcome.written.append(written)
            if section:
                self.outcome.sections[section] = content
            # a step resumed after it wrote (and then waited for a person) still records the file at completion
            self.ctx.note_output(written, confine(self.ctx.project_root, written))
            return written
        rel = path or self.ctx.default_output
        if not rel:
            raise StepFailed(f"step {self.ctx.spec.id!r} wrote output but declares no output file",
                             hint="pass path= or declare outputs: on the step", retryable=False)
        folder = self._folder()
        target = confine(folder, rel)
        if folder != self.ctx.project_root:  # the journal names project files from the project (fork, repair)
            rel = target.relative_to(self.ctx.project_root).as_posix()
        landed = started is not None and mode == "append" and _landed_at(target, content,
                                                                          started["args"].get("pre_size"))
        if not landed:
            # A redo journals its own intent: the last append intent of a file must name the last write to it,
            # which a resume's repair_torn_appends cuts off if it has no record.
            pre_size = target.stat().st_size if target.exists() else None
            self.ctx.emit(EventType.CALL_STARTED, {"key": key, "op": "write_output",
                                                   "args": {"path": rel, "mode": mode, "section": section,
                                                            "pre_size": pre_size}}, sync=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            if section and mode == "section":
                self.ctx.write_section(target, section, content)
            elif mode == "replace":
                _write_replace(target, content)
            else:
                _fsync_write(target, content.encode("utf-8"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.outcome.written.append(rel)
        if section:
            self.outcome.sections[section] = content
        self.ctx.note_output(rel, target)
        self._record(key, "write_output", {"path": rel, "mode": mode, "section": section}, rel)
        return rel

    async def set_var(self, name: str, value: Any) -> None:
        """Set a run variable (folded from the journal record)."""
        self._check_open("set_var")
        key, recorded, _ = self._next_key("set_var")
        if recorded is None:
            self._record(key, "set_var", {"name": name, "value": value}, None)

    async def call_tool(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a tool through the pipeline; a non-idempotent tool interrupted mid-run is never re-run blindly."""
        self._check_open("call_tool")
        key, recorded, _ = self._next_key("call_tool")
        if recorded is not None:
            result: dict[str, Any] = recorded["result"]
            return result
        args = dict(args or {})
        risk = self._code_risk(name, args)
        result = await run_tool_once(self.ctx, key, "call_tool", name, args,
                                     lambda: self.ctx.run_tool(name, args, risk=risk))
        self._record(key, "call_tool", {"name": name, "args": args}, result)
        return result

    def _code_risk(self, name: str, args: dict[str, Any]) -> Risk | None:
        """``high`` for a call that runs code the request does not name (a script a step wrote, a script of a
        workflow that names none): gated as ``shell`` is. None: the tool's own risk, for the workflow's own
        scripts: listed in the request's ``scripts``, or written in its text (``uv run {project-root}/…``)."""
        spec = tool_spec(name)
        if spec is None or spec.code is None:
            return None
        named = {Path(str(s["script"])).resolve() for s in self.request.context.get("scripts") or []
                 if isinstance(s, dict) and s.get("script")}
        try:
            paths = spec.code(args)
        except (KeyError, TypeError):
            return None  # arguments the pipeline refuses
        root = self.ctx.project_root.resolve()

        def named_here(path: str) -> bool:
            real = (root / path).resolve()
            shown = [str(real), real.relative_to(root).as_posix()] if real.is_relative_to(root) else [str(real)]
            return real in named or any(text in self.request.content for text in shown)

        return None if all(named_here(path) for path in paths) else "high"

    async def decide(self, value: bool, reason: str) -> None:
        """Answer a decide request."""
        self._check_open("decide")
        self.outcome.decision = bool(value)
        self.outcome.reason = reason
        self.outcome.finished = True

    async def finish(self, choice: str | None = None, summary: str | None = None) -> None:
        """End the request."""
        self._check_open("finish")
        self.outcome.choice = choice
        self.outcome.summary = summary
        self.outcome.finished = True

    async def memo(self, label: str, payload: dict[str, Any],
                   compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Journal the result of ``compute`` (a model call, say) so a resumed step reuses it."""
        key, recorded, _ = self._next_key("memo:" + label)
        if recorded is not None:
            cached: dict[str, Any] = recorded["result"]
            return cached
        if not self.ctx.engine.executor.pure:
            self.ctx.engine.journal_sync()
        result = await compute()
        self._record(key, "memo:" + label, {"payload": payload}, result)
        return result


def _fsync_write(target: Path, data: bytes, flags: int) -> None:
    """Write all of ``data`` and fsync it. A disk that fills up part way takes some bytes and refuses the
    rest: the error names ``target`` (the engine stops the run there, resumable; the redo cuts the torn bytes)."""
    try:
        fd = os.open(target, flags, 0o644)
        try:
            view = memoryview(data)
            while view:  # a write may be short when the disk fills: the next one says why
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(target)
        raise


def _landed_at(target: Path, content: str, pre_size: int | None) -> bool:
    """Whether an append journaled at ``pre_size`` landed whole before a crash (only its record is missing).

    The intent and the write happen with no await between them, so the write landed exactly at ``pre_size``; a
    torn one was cut off by :func:`repair_torn_appends` before any step ran, as was a whole one whose intent was
    the file's last. Anything else there is other steps' lines: this append is still to do.
    """
    data = content.encode("utf-8")
    start = pre_size or 0
    try:
        with target.open("rb") as handle:
            handle.seek(start)
            return handle.read(len(data)) == data
    except FileNotFoundError:
        return False


def repair_torn_appends(events: Iterable[Event], project_root: Path) -> None:
    """Before a resumed run does anything, cut off the append a crash tore, if any.

    An append's intent, with the file's size before it, is synced before the bytes are written, and nothing
    awaits in between; so the last append intent journaled for a file names the last write to it. If that
    intent has no record, the bytes past its size are that write's, whole or torn: they are cut off, and the
    replayed step writes them again. It has to be done before any step runs: in a parallel run another
    step's append would otherwise land after the torn bytes and glue them to the front of its own line.
    """
    last: dict[str, dict[str, Any]] = {}
    recorded: set[str] = set()
    for event in events:
        data = event.data
        if data.get("op") != "write_output":
            continue
        if event.type == EventType.CALL_STARTED.value and data["args"].get("mode") == "append":
            last[data["args"]["path"]] = data
        elif event.type == EventType.CALL_RECORDED.value:
            recorded.add(data["key"])
    for rel, intent in last.items():
        if intent["key"] in recorded:
            continue
        target = confine(project_root, rel)
        size = intent["args"].get("pre_size") or 0
        if target.is_file() and target.stat().st_size > size:
            os.truncate(target, size)


def _write_replace(target: Path, content: str) -> None:
    from stepline.store import atomic_write_bytes

    atomic_write_bytes(target, content.encode("utf-8"))


def tool_intent(ctx: StepContext, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The intent journaled (synced) before tool ``name`` runs: its call, and the state it changes where the
    tool can read its effect back after a crash (``effect_before``, for :func:`interrupted_tool`)."""
    intent: dict[str, Any] = {"name": name, "args": args}
    spec = tool_spec(name)
    check = spec.effect if spec is not None else None
    before = check.before(args, str(ctx.project_root)) if check is not None else None
    if before is not None:
        intent["effect_before"] = before
    return intent


async def run_tool_once(ctx: StepContext, key: str, op: str, name: str, args: dict[str, Any],
                        run: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """Run a tool call whose result the caller journals under ``key`` (not yet journaled): its intent first
    (synced, :func:`tool_intent`), and once only. An intent found without its result (a crash came between) is
    an interrupted call (:func:`interrupted_tool`): not run again unless the disk or a person says it did not
    finish. A call that runs again journals a new intent first, counting its reruns: a person's approval covers
    one run, so a crash during it is asked about again. A call that waits at its approval gate did not start:
    its intent is withdrawn (its reruns kept), so once approved it runs. Every family's effects go through here
    (``call_tool``, a step's declared tools, CCW commands)."""
    started = ctx.engine.calls.started.get(key)
    reruns = int(started["args"].get("reruns") or 0) if started is not None else 0
    rerun: str | None = None
    if started is not None and not started["args"].get("withdrawn") and not ctx.engine.tool_is_idempotent(name):
        done, rerun = await interrupted_tool(ctx, key, name, args, started["args"].get("effect_before"), reruns)
        if done is not None:
            return done
        reruns += 1
    if started is None or started["args"].get("withdrawn") or rerun is not None:
        intent = {**tool_intent(ctx, name, args), **({"reruns": reruns} if reruns else {})}
        ctx.emit(EventType.CALL_STARTED, {"key": key, "op": op, "args": intent}, sync=True)
    try:
        result = await run()
    except StepBlocked:
        ctx.emit(EventType.CALL_STARTED, {"key": key, "op": op, "args": {"withdrawn": True, "reruns": reruns}},
                 sync=False)
        raise
    if rerun is not None:
        result["after_crash"] = rerun
    return result


async def interrupted_tool(ctx: StepContext, key: str, name: str, args: dict[str, Any], before: Any, reruns: int = 0
                           ) -> tuple[dict[str, Any] | None, str]:
    """A non-idempotent call whose intent (:func:`tool_intent`) is journaled but not its result: ``(its
    result, why)`` when it is not to run again, ``(None, why)`` when it runs again. Every family's effects use
    it (the step protocol's ``call_tool``, a CCW task's ``pre_analysis`` command).

    The disk answers where the tool can read its effect back (:class:`~stepline.tools.EffectCheck`);
    otherwise a person does, at the gate ``rerun:<tool>:<call key>`` (``#<n>`` after it when the call was
    already run again ``n - 1`` times: each rerun is a question of its own): approved, the call runs again;
    rejected, it is recorded as finished without running. Until then the step blocks (in every mode:
    nobody else can know what happened).
    """
    shown = args.get("script", args.get("command"))
    what = f"{name} {shown}" if isinstance(shown, str) else name
    spec = tool_spec(name)
    check = spec.effect if spec is not None else None
    found = None
    if check is not None and isinstance(before, dict):
        found = await asyncio.to_thread(check.happened, args, str(ctx.project_root), before)
    if found is False:
        return None, "the process stopped while it ran and its effect is not on disk: run again"
    why = "the process stopped while it ran; its effect is on disk: recorded done, not rerun"
    if found is None:
        gate_id = f"rerun:{name}:{key}" + (f"#{reruns + 1}" if reruns else "")
        decision = ctx.engine.calls.decisions.get(gate_id)
        if decision is None:
            reason = (f"tool {what!r} was running when the process stopped and its effect cannot be checked; "
                      "approve to run it again, reject if it had finished")
            ctx.engine.gates.open(gate_id, kind="tool", step_id=ctx.spec.id, reason=reason, phase=ctx.spec.phase)
            raise StepBlocked(f"{reason} (gate {gate_id})", gate_id)
        if decision["decision"] == "approved":
            return None, f"the process stopped while it ran; approved at gate {gate_id}: run again"
        why = f"the process stopped while it ran; rejected at gate {gate_id} (it had finished): not rerun"
    stamp = isoformat(now())
    record = ToolResult(name=name, status="ok", risk=spec.risk if spec is not None else "low", started_at=stamp,
                        ended_at=stamp, step_id=ctx.spec.id, args=args).model_dump(mode="json")
    record["after_crash"] = why
    ctx.engine.record_tool_result(record)
    return record, why
