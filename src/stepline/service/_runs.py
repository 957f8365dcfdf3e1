"""The runs of one project as every interface sees them: open a run, build its engine, read its status and digest,
list the runs and their pending gates, decide a gate, answer a question, resume.

The CLI, the dashboard and the MCP server call this and only render what it returns, so a run is found, a
gate decided and an answer matched the same way wherever a person acts. Answers are matched once, by the
engine's gate book (:meth:`stepline.engine.GateBook.answer_taken`, the step chain's matcher): an answer that
is not among a question's options is refused before anything is recorded, naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepline.engine import Engine, HumanChannel, RuntimeConfig
    from stepline.executors import Executor
    from stepline.model import Event, Gate, GateChoice, Run, RunMode
    from stepline.store import Diagnosis, RunDir, RunStore, RunSummary

__all__ = ["INTERFACE_EXECUTORS", "Decided", "Question", "RunService", "person", "resume_command"]

#: Executors that live inside one interface and cannot be built anywhere else: a run they drove is resumed
#: elsewhere by another executor (see :meth:`RunService.resume_executor`).
INTERFACE_EXECUTORS = {"mcp-bridge": "an IDE agent over MCP"}


@dataclass(frozen=True, slots=True)
class Question:
    """A question a blocked run waits on: its gate, step, question text and the answers it takes (none: any)."""

    run_id: str
    gate_id: str
    step_id: str | None
    question: str
    choices: list[GateChoice]


@dataclass(frozen=True, slots=True)
class Decided:
    """A gate decided here: its run, and the gate as recorded (who decided, and a question's answer: an option's
    key)."""

    run_id: str
    gate: Gate

    @property
    def question(self) -> str:
        """The question the gate asked (a question gate), else its reason."""
        from stepline.engine import gate_question

        return gate_question(self.gate)


def person(project_root: Path) -> str:
    """Who a person deciding here is, when they do not say: git's ``user.name`` for the project, else the OS
    user."""
    import getpass
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(project_root), "config", "user.name"], capture_output=True,
                              text=True, timeout=10, check=False)
        name = done.stdout.strip() if done.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        name = ""
    if name:
        return name
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no USER variable (a bare container)
        return "unknown"


class RunService:
    """The runs of the project at ``project_root`` (its runtime ``config``: a loaded one, a file, or the project's
    ``config/runtime.yaml``)."""

    def __init__(self, project_root: Path, config: RuntimeConfig | Path | None = None) -> None:
        from stepline.engine import RuntimeConfig, load_runtime_config
        from stepline.store import RunStore

        self.project_root = project_root.resolve()
        self.config = config if isinstance(config, RuntimeConfig) else load_runtime_config(self.project_root, config)
        self.store: RunStore = RunStore(self.project_root / self.config.runtime.storage_root)

    # -- engines --------------------------------------------------------------------------------------------
    def engine(self, *, executor: Executor | str | None = None, executor_options: dict[str, Any] | None = None,
               mode: RunMode = "normal", listeners: Sequence[Callable[[Event], None]] = (),
               human: HumanChannel | None = None, **options: Any) -> Engine:
        """An engine for this project: the one place an interface (and the Python API) gets one. Without an
        executor it reads and checks runs and decides gates; with one (or on resume, the run's own) it drives a
        run. ``options``: the rest of :class:`Engine`'s (``sleep``, ``concurrency``). The caller registers the
        families' step drivers it needs (:func:`stepline.families.register_drivers`)."""
        from stepline.engine import Engine

        return Engine(project_root=self.project_root, config=self.config, executor=executor,
                      executor_options=executor_options, mode=mode, listeners=list(listeners), human=human,
                      **options)

    def resume_executor(self, run_dir: RunDir) -> tuple[str | None, str | None]:
        """The executor a resume from here uses when none is named, and the line saying why: (None, None) for
        the run's own; for a run an executor of another interface drove (an IDE agent over MCP), the person at
        this terminal (``human``)."""
        recorded = run_dir.manifest().executor
        driver = INTERFACE_EXECUTORS.get(recorded)
        if driver is None:
            return None, None
        return "human", (f"run {run_dir.run_id} was driven by {driver}; here its steps go to you (the human "
                         "executor; --executor NAME picks another)")

    def unattended(self, run_dir: RunDir) -> str | None:
        """Why the run cannot go on in a process with nobody at its terminal (a sprint story goes on with its
        loop; a run whose executor is a person, or an executor of another interface, needs that person), or None:
        :meth:`resume_unattended` continues it with the executor it was started with."""
        manifest = run_dir.manifest()
        if manifest.workflow.format == "sprint":
            return f"a sprint story goes on with its loop: {resume_command(run_dir.run_id, 'sprint')}"
        driver = INTERFACE_EXECUTORS.get(manifest.executor)
        if driver is not None:
            return (f"it was driven by {driver}; its steps go to a person at a terminal now: "
                    f"stepline resume {run_dir.run_id}")
        if manifest.executor == "human":
            return (f"its executor is a person at a terminal (the human executor): stepline resume {run_dir.run_id} "
                    "there")
        return None

    async def resume_unattended(self, run_id: str, *, listeners: Sequence[Callable[[Event], None]] = ()) -> Run:
        """Continue a run with the executor it was started with, nobody at this process's terminal: a question
        or an approval blocks it again, as a gate to decide here. Its digest is kept when it stops.

        Raises:
            UsageError: :meth:`unattended` says why it cannot go on so.
            RunStateError: it is completed, or another process drives it (the run's lock).
        """
        from stepline.engine import HumanChannel
        from stepline.errors import UsageError
        from stepline.families import register_drivers
        from stepline.service._digest import record_digest

        run_dir = self.store.open(run_id)
        why = self.unattended(run_dir)
        if why is not None:
            raise UsageError(f"run {run_dir.run_id} cannot go on from here: {why}")
        register_drivers()
        engine = self.engine(human=HumanChannel(interactive=False), listeners=listeners)
        run = await engine.resume(run_dir.run_id)
        record_digest(run_dir, run, run_dir.events())
        return run

    # -- runs -----------------------------------------------------------------------------------------------
    def open(self, run_id: str | None) -> RunDir:
        """The directory of the run ``run_id`` names (its id or a unique part of it), or of the latest run."""
        from stepline.errors import NotFoundError

        if run_id is not None:
            return self.store.open(run_id)
        latest = self.store.latest()
        if latest is None:
            raise NotFoundError(f"no runs under {self.store.root}", hint="start one with `stepline run PATH`")
        return latest

    def load(self, run: RunDir | str | None) -> Run:
        """The run rebuilt from its journal (JournalError when its directory is damaged); takes no lock."""
        return self.engine().load(run if not isinstance(run, str | None) else self.open(run))

    def diagnose(self, run_dir: RunDir) -> Diagnosis:
        """What ``stepline doctor`` finds in ``run_dir`` (its journal folded as a resume folds it)."""
        return self.engine().diagnose(run_dir)

    def damage(self, run_dir: RunDir) -> str | None:
        """The first thing :meth:`diagnose` finds wrong (``file:line: problem``), or None. A run nobody drives is
        read from its digest, so its journal is folded once for its files as they are, not on every look (as
        ``stepline list`` does: the digest is built and saved when missing or stale)."""
        if run_dir.holder() is None:
            digest = self.digest(run_dir)
            return None if digest.get("row") is not None else str(digest.get("damage"))
        first = self.diagnose(run_dir).first()
        return None if first is None else first.short()

    def digest(self, run_dir: RunDir) -> dict[str, Any]:
        """The run's digest (what status, show and list print), kept in its summary.json."""
        from stepline.service._digest import digest_of

        return digest_of(self.engine(), run_dir)

    def view(self, run_id: str | None, *, whole: bool) -> tuple[str, dict[str, Any]]:
        """The run's id and what status and show print of it: from its digest, or with ``whole`` every step and
        event from its journal. A damaged run raises what its journal says (as loading it does)."""
        from stepline.service._digest import KEEP, make_digest

        run_dir = self.open(run_id)
        if not whole:
            shown = self.digest(run_dir).get("run")
            if shown is not None:
                return run_dir.run_id, shown
        run = self.load(run_dir)
        return run_dir.run_id, make_digest(run_dir, run, run_dir.events(), keep=None if whole else KEEP)["run"]

    def runs(self) -> list[RunSummary]:
        """Every run, oldest first, each checked once as ``stepline doctor`` checks it (its digest keeps the
        result until the run's files change)."""
        from stepline.service._digest import summary_row

        engine = self.engine()
        return [summary_row(self.store, engine, run_id) for run_id in self.store.run_ids()]

    @staticmethod
    def resume_command(run_dir: RunDir) -> str:
        """The command that goes on with a run: a sprint story's run goes on with its loop (the stories after
        it too)."""
        return resume_command(run_dir.run_id, run_dir.manifest().workflow.format)

    # -- gates and questions --------------------------------------------------------------------------------
    def pending_gates(self, run_id: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
        """The gates waiting for a person (approvals, risky tools, questions) of one run or of every run, each
        with its ``run_id``; and, listing every run, what is wrong with each one that cannot be read."""
        from stepline.errors import JournalError

        run_dirs = [self.store.open(run_id)] if run_id else \
            [self.store.open(s.run_id) for s in self.store.summaries() if s.damage is None]
        rows: list[dict[str, Any]] = []
        skipped: list[str] = []
        for run_dir in run_dirs:
            try:
                found = run_dir.read("gates.json", []) or []
            except JournalError as exc:
                if run_id:
                    raise
                skipped.append(exc.format_message())
                continue
            rows += [{"run_id": run_dir.run_id, **gate} for gate in (found if isinstance(found, list) else ())
                     if isinstance(gate, dict) and gate.get("status") == "pending"]
        return rows, skipped

    def questions(self, run_id: str) -> list[Question]:
        """The questions a run waits on (its pending question gates), with the answers each takes."""
        from stepline.engine import GateBook, gate_choices, gate_question

        run_dir = self.store.open(run_id)
        return [Question(run_id=run_dir.run_id, gate_id=gate.gate_id, step_id=gate.step_id,
                         question=gate_question(gate), choices=gate_choices(gate))
                for gate in GateBook(run_dir, "").pending() if gate.kind == "question"]

    def decide(self, run_id: str, gate_id: str | None, *, approved: bool, by: str | None,
               notes: str | None = None) -> Decided:
        """Approve or reject a pending gate of a run nobody drives (``by`` None: :func:`person`; a blank one is
        refused)."""
        run_dir = self.store.open(run_id)
        decided = self.engine().decide_gate(run_dir.run_id, gate_id, approved=approved,
                                            by=person(self.project_root) if by is None else by, notes=notes)
        return self._decided(run_dir, decided)

    def answer(self, run_id: str, text: str, *, gate_id: str | None = None, by: str | None) -> Decided:
        """Answer the question a run nobody drives waits on (``gate_id``: which, when several wait; ``by`` None:
        :func:`person`). An answer that is not among its options is refused at once, naming them (UsageError);
        nothing is recorded then."""
        run_dir = self.store.open(run_id)
        decided = self.engine().decide_gate(run_dir.run_id, gate_id, approved=True,
                                            by=person(self.project_root) if by is None else by, notes=None, answer=text)
        return self._decided(run_dir, decided)

    @staticmethod
    def _decided(run_dir: RunDir, gate_id: str) -> Decided:
        from stepline.engine import GateBook

        gate = GateBook(run_dir, "").get(gate_id)
        assert gate is not None, f"gate {gate_id} was just decided"
        return Decided(run_id=run_dir.run_id, gate=gate)


def resume_command(run_id: str, workflow_format: str) -> str:
    """The command that goes on with run ``run_id`` of a workflow of ``workflow_format``."""
    return "stepline sprint resume" if workflow_format == "sprint" else f"stepline resume {run_id}"
