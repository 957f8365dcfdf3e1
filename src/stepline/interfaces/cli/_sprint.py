"""``stepline sprint …``: BMAD's implementation phase, unattended (R-L1): run, status, resume."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stepline.interfaces.cli._options import (
    EXIT_BLOCKED,
    EXIT_FAILED,
    BackendOption,
    ConfigOption,
    Directory,
    JsonOutput,
    ProjectRoot,
    RayAddressOption,
    Where,
    app,
    where,
)
from stepline.interfaces.cli._render import console, err_console, print_json

if TYPE_CHECKING:
    from stepline.executors import Ledger, PriceTable, Usage
    from stepline.sprint import BudgetLimit, LoopOptions, SprintConfig, SprintProject, StoryResult, Waiting

sprint_app = typer.Typer(name="sprint", help="Run BMAD stories from sprint-status.yaml: build, verify, review, "
                                             "commit, advance the board.", no_args_is_help=True)
app.add_typer(sprint_app, name="sprint")

SprintConfigOption = Annotated[Path | None, typer.Option("--sprint-config", help="The sprint loop's config "
                                                         "(default: config/sprint.yaml in the project root).")]
#: ``--concurrency`` without its ``-j``: in the sprint commands ``-j`` is ``--jobs`` (stories at once).
ConcurrencyOption = Annotated[int | None, typer.Option("--concurrency", min=1, help="Agent calls of one story at "
                                                       "once (its review layers). Default: runtime.concurrency (4); "
                                                       "with --backend ray, the cluster's CPUs.")]


def _project(at: Where, sprint_config: Path | None) -> tuple[SprintProject, SprintConfig]:
    from stepline.errors import NotFoundError
    from stepline.sprint import find_project, load_sprint_config

    if not (at.root / "_bmad").is_dir():
        raise NotFoundError(f"{at.root}: not a BMAD project (no _bmad/ folder)", hint="run it in the project (or "
                            "pass -C PROJECT); install BMAD there with `stepline bmad install SRC`")
    return find_project(at.root), load_sprint_config(at.root, at.option(sprint_config))


def _print_plan(project: SprintProject, config: SprintConfig, keys: list[str], resume: dict[str, str],
                as_json: bool) -> None:
    layers = [layer.id for layer in config.review.layers] or [
        layer.id for layer in (project.dev.review_layers if project.dev else ())] or ["adversarial"]
    dev = project.dev
    plan: dict[str, Any] = {
        "board": str(project.board_path), "dev_workflow": str(dev.path) if dev else None,
        "verify_commands": config.verify.commands, "review_layers": layers if config.review.enabled else [],
        "isolation": config.isolation, "builds_per_story": config.retries.build,
        "review_rounds": config.retries.review,
        "stories": [{"key": key, "story_file": str(s.path) if (s := project.story_file(key)) else None,
                     "resume_run": resume.get(key)} for key in keys]}
    if as_json:
        print_json(plan)
        return
    console.print(f"board: {project.board_path}", markup=False)
    console.print(f"dev workflow: {dev.path if dev else 'none found'}", markup=False)
    console.print(f"verify: {', '.join(config.verify.commands) or '(no project commands)'}; review layers: "
                  f"{', '.join(plan['review_layers']) or 'none'}; isolation: {config.isolation}", markup=False)
    if not keys:
        console.print("no story is ready-for-dev")
    for number, story in enumerate(plan["stories"], start=1):
        note = f" (resume run {story['resume_run']})" if story["resume_run"] else ""
        console.print(f"{number}. {story['key']}{note}: baseline → build → verify → review → verify → commit"
                      f"{' → merge' if config.isolation == 'worktree' else ''} → advance   "
                      f"[{story['story_file'] or 'no story file yet'}]", markup=False)


#: ``sprint run`` / ``resume`` / ``watch`` exit codes by how the loop ended (stepline.errors.EXIT_CODES): failed 8 and
#: blocked on a person 9 as for any run; a story deferred (or the loop's budget spent) 11; all done 0.
EXIT_DEFERRED = 11
_EXIT = {"done": 0, "deferred": EXIT_DEFERRED, "blocked": EXIT_BLOCKED, "failed": EXIT_FAILED}
_STYLE = {"committed": "green", "deferred": "yellow", "blocked": "yellow", "stopped": "yellow", "halted": "red"}


def _progress(quiet: bool) -> Any:
    """One line per stage of the story being run (stderr): ✓ only for a stage that did what it is for."""
    from rich.text import Text

    from stepline.sprint import SUCCEEDED

    def listen(event: Any) -> None:
        if quiet or event.type not in ("WorkflowStepCompleted", "WorkflowStepFailed", "StepBlocked", "StepRetry"):
            return
        data = event.data
        choice = data.get("choice")
        if event.type == "WorkflowStepCompleted":
            mark, style = ("✓", "green") if choice in SUCCEEDED or choice is None else ("✗", "red")
        else:
            mark, style = {"WorkflowStepFailed": ("✗", "red"), "StepBlocked": ("⏸", "yellow")}.get(
                event.type, ("↻", "yellow"))
        detail = " ".join(str(data.get("error") or data.get("reason") or data.get("summary") or "").split())
        said = f"{choice}: " if choice and choice not in SUCCEEDED else ""
        err_console.print(Text.assemble((mark, style), f" {event.step_id or ''} ", (said + detail[:300], "dim")))

    return listen


def _drive(at: Where, config_path: Path | None, sprint_config: Path | None, options: LoopOptions,
           quiet: bool, as_json: bool, backend: tuple[str | None, str | None, int | None] = (None, None, None),
           *, resumed: bool = False) -> None:
    import asyncio

    from stepline.errors import StorageError, UsageError
    from stepline.interfaces.cli._driving import build_engine, use_backend
    from stepline.sprint import loop_outcome, run_loop, save_loop, waiting

    project, config = _project(at, sprint_config)
    executor = options.executor or config.executor
    if executor is None:  # the dry-run executor would "build" nothing and every story would be deferred
        raise UsageError("the sprint loop needs an executor that builds", hint="pass --executor NAME (cli-agent, "
                         "openai, anthropic, scripted, …) or set executor: in config/sprint.yaml")
    stall = {"stall_seconds": config.stall_seconds} if config.stall_seconds and executor == "cli-agent" else None
    engine = build_engine(at, config_path, executor, None, "non-interactive", True, stall)
    engine.listeners.append(_progress(quiet or as_json))
    use_backend(engine, *backend, quiet=quiet or as_json)  # build and review calls on Ray; the loop stays here
    save_loop(at.root, options)

    def report(result: StoryResult) -> None:
        if not as_json:
            style = _STYLE.get(result.outcome, "red")
            console.print(f"[{style}]{result.outcome}[/{style}] {result.key} (run {result.run_id}, "
                          f"{_money(result.usage)})")
            console.print(f"  {result.summary}", markup=False, soft_wrap=True)

    try:
        results = asyncio.run(run_loop(engine, project, config, options, report=report, resumed=resumed))
    except KeyboardInterrupt:  # the story's run is journaled as far as it went
        err_console.print("interrupted; the loop goes on with `stepline sprint resume`", markup=False)
        raise typer.Exit(130) from None
    except StorageError as exc:  # the loop goes on, not only the story's run (its resume also lands the story)
        exc.hint = f"{exc.remedy}; then `stepline sprint resume` continues the loop"
        raise
    if as_json:
        print_json([{"key": r.key, "run_id": r.run_id, "outcome": r.outcome, "summary": r.summary,
                     "usage": r.usage.to_record()} for r in results])
    passed_over = _passed_over(at.root)
    if not as_json and not results and not passed_over:
        console.print("no story is ready-for-dev")
    for key, why in passed_over.items():
        err_console.print(f"story {key} is not taken: {why} (`stepline sprint status` shows the board)", markup=False,
                          soft_wrap=True)
    for stopped in [r for r in results if r.outcome == "stopped"]:  # why a loop that built nothing exits 11
        err_console.print(f"the loop stopped before story {stopped.key}: {stopped.summary}; raise budgets.run in "
                          "config/sprint.yaml (or set budgets.mode: warn), then `stepline sprint resume` takes the "
                          "stories left", markup=False, soft_wrap=True)
    outcome = loop_outcome(results)
    if blocked := [(r.key, r.run_id) for r in results if r.outcome == "blocked"]:
        if found := waiting(engine.store, blocked):
            _print_waiting(found)
        else:  # answered while the loop went on with other stories
            err_console.print("every question the loop stopped at is answered: `stepline sprint resume` goes on",
                              markup=False)
    for halted in [r for r in results if r.outcome == "halted"]:
        err_console.print(f"{halted.summary}; fix the agent (start its command by hand to see why), then "
                          "`stepline sprint resume`", markup=False, soft_wrap=True)
    if failed := next((r for r in results if r.outcome == "failed"), None):
        err_console.print(f"story {failed.key} failed (see `stepline logs {failed.run_id}`); fix the cause, then "
                          "`stepline sprint resume`", markup=False, soft_wrap=True)
    raise typer.Exit(_EXIT[outcome])


def _passed_over(root: Path) -> dict[str, str]:
    """The stories the loop that just ended did not take, and why (its story-waiting records, since it started or
    resumed, of stories it did not start after)."""
    import json

    from stepline.sprint import loop_log_path

    path = loop_log_path(root)
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    start = max((n for n, line in enumerate(lines) if '"event": "loop-started"' in line), default=0)
    passed: dict[str, str] = {}
    for record in map(json.loads, lines[start:]):
        if record.get("event") == "story-waiting":
            passed[str(record.get("key"))] = str(record.get("reason"))
        elif record.get("event") == "story-started":
            passed.pop(str(record.get("key")), None)
    return passed


def _print_waiting(found: list[Waiting]) -> None:
    """Every question the loop's stories wait on, one line each with its story and the command that settles it."""
    many = f"{len(found)} questions wait" if len(found) > 1 else "a question waits"
    err_console.print(f"{many} for a person; settle each, then `stepline sprint resume`:", markup=False)
    for found_one in found:
        err_console.print(f"  {found_one.line()}", markup=False, soft_wrap=True)


@sprint_app.command("run")
def run(
    epic: Annotated[int | None, typer.Option("--epic", help="Only this epic's stories.")] = None,
    story: Annotated[str | None, typer.Option("--story", help="Only this story (its key or N-M).")] = None,
    max_stories: Annotated[int | None, typer.Option("--max-stories", min=1, help="At most this many stories.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; run nothing.")] = False,
    executor: Annotated[str | None, typer.Option("--executor", "-e", help="Who builds and reviews (cli-agent, "
                                                 "openai, anthropic, scripted, …).")] = None,
    sprint_config: SprintConfigOption = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    backend: BackendOption = None,
    ray_address: RayAddressOption = None,
    concurrency: ConcurrencyOption = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Stories built and reviewed at once, "
                                             "each in its own worktree (needs isolation: worktree); merged one "
                                             "at a time in sprint order. Default: max_parallel in sprint.yaml, "
                                             "else 1.")] = None,
) -> None:
    """Take the board's ready-for-dev stories in sprint order; per story one durable run: baseline, build,
    verify, review, verify, commit, advance the board. Stories that do not converge are deferred."""
    from stepline.interfaces.cli._options import project_runs
    from stepline.sprint import LoopOptions, plan_loop

    at = where(directory, project_root)
    options = LoopOptions(epic=epic, story=story, max_stories=max_stories, executor=executor, jobs=jobs)
    if dry_run:
        from stepline.interfaces.cli._driving import build_engine
        from stepline.interfaces.cli._options import check_backend_name

        project, sprint = _project(at, sprint_config)
        check_backend_name(backend)  # the plan is what a run would do: refuse what the run would refuse
        if options.executor or sprint.executor:
            build_engine(at, config, options.executor or sprint.executor, None, "non-interactive", True)
        _, keys, resume = plan_loop(project, project_runs(at, config).store, options)
        _print_plan(project, sprint, keys, resume, as_json)
        return
    _drive(at, config, sprint_config, options, quiet, as_json, (backend, ray_address, concurrency))


@sprint_app.command("resume")
def resume(
    sprint_config: SprintConfigOption = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    backend: BackendOption = None,
    ray_address: RayAddressOption = None,
    concurrency: ConcurrencyOption = None,
) -> None:
    """Go on with the last `sprint run` here: its interrupted or blocked story first (no finished stage,
    commit or model call is repeated), then the stories left."""
    from stepline.sprint import load_loop

    at = where(directory, project_root)
    _drive(at, config, sprint_config, load_loop(at.root), quiet, as_json, (backend, ray_address, concurrency),
           resumed=True)


@sprint_app.command("retry")
def retry(
    story: Annotated[str, typer.Argument(help="The deferred story (its key, or N-M).")],
    executor: Annotated[str | None, typer.Option("--executor", "-e", help="Who builds and reviews (cli-agent, "
                                                 "openai, anthropic, scripted, …).")] = None,
    sprint_config: SprintConfigOption = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    backend: BackendOption = None,
    ray_address: RayAddressOption = None,
    concurrency: ConcurrencyOption = None,
) -> None:
    """Take a deferred story again: a new run of it, from the integration branch as it is now (its deferred attempt
    is kept: the patch, or its worktree and branch moved to .stepline/sprint/deferred/ and sprint-deferred/…)."""
    from stepline.interfaces.cli._options import project_runs
    from stepline.sprint import LoopOptions, deferred_run

    at = where(directory, project_root)
    project, _ = _project(at, sprint_config)
    key, run_id = deferred_run(project, project_runs(at, config).store, story)
    _drive(at, config, sprint_config, LoopOptions(story=key, executor=executor, retry={key: run_id}), quiet, as_json,
           (backend, ray_address, concurrency))


@sprint_app.command("status")
def status(
    sprint_config: SprintConfigOption = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """The board: each story's status, the loop's stage and attempts, tokens/cost, last event; the questions the
    stories wait on; a story held back by a deferred dependency; whether the loop was killed."""
    from stepline.interfaces.cli._options import project_runs
    from stepline.interfaces.cli._render import print_table
    from stepline.sprint import board_rows, loop_state, waiting_on_board

    at = where(directory, project_root)
    project, _ = _project(at, sprint_config)
    store = project_runs(at, config).store
    rows = board_rows(project, store)
    asked = waiting_on_board(project, store)
    loop = loop_state(at.root)
    if as_json:
        print_json({"board": str(project.board_path), "loop": loop, "entries": rows,
                    "waiting": [{"key": w.key, "run_id": w.run_id, "gate_id": w.gate_id, "kind": w.kind,
                                 "question": w.question, "command": w.command} for w in asked]})
        return
    print_table(["key", "status", "loop", "stage", "builds", "tokens", "cost $", "last event"], [
        [row["key"], row["status"], row["state"] or (f"waits: {', '.join(row['waits_for'])} deferred"
                                                     if row["waits_for"] else ""),
         row["stage"] or "", str(row["attempts"] or ""), str(row["tokens"] or ""),
         f"{row['cost_usd']:.4f}" if row["cost_usd"] else "", row["last_event"] or ""] for row in rows],
        fit_last=True)
    if loop == "killed":
        err_console.print("the sprint loop is not running: it did not end and no process drives it (killed?); "
                          "`stepline sprint resume` goes on where it stopped", markup=False, soft_wrap=True)
    if held := [row for row in rows if row["waits_for"]]:
        console.print()
        for row in held:
            console.print(f"story {row['key']} waits for {', '.join(row['waits_for'])}, which was deferred: "
                          f"`stepline sprint retry {row['waits_for'][0]}` takes it again", markup=False, soft_wrap=True)
    if asked:
        console.print()
        for found in asked:
            console.print(found.line(), markup=False, soft_wrap=True)


def _money(usage: Usage) -> str:
    return f"{usage.tokens:.0f} tokens, ${usage.cost_usd or 0.0:.4f}"


def _budget_line(spent: Ledger, prices: PriceTable, limit: BudgetLimit) -> str:
    """What the loop has spent after a call, and what its limit (``budgets.run``) leaves."""
    total = spent.total(prices)
    left = ([f"{limit.tokens - total.tokens:,.0f} of {limit.tokens:,.0f} tokens left"] if limit.tokens else []) + (
        [f"${limit.cost_usd - (total.cost_usd or 0.0):.4f} of ${limit.cost_usd:.4f} left"] if limit.cost_usd else [])
    return f"loop budget: {total.tokens:,.0f} tokens, ${total.cost_usd or 0.0:.4f} spent" + "".join(
        f"; {part}" for part in left or ["no limit"])


def _loop_line(record: dict[str, Any]) -> str | None:
    """One line of `sprint watch` for a record of the loop's log (None: nothing to say)."""
    from stepline.executors import Usage

    when, event, key = str(record.get("time", ""))[11:19], record.get("event"), record.get("key")
    if event == "loop-started":
        return (f"{when} loop {record.get('sprint_id')} {'resumed' if record.get('resumed') else 'started'} "
                f"(process {record.get('pid')}): {', '.join(record.get('stories') or []) or 'no story to take'}")
    if event == "story-started":
        return f"{when} ── story {key}" + (f" (resuming run {record['run_id']})" if record.get("run_id") else "")
    if event == "story-run":
        return f"{when} ── story {key}: run {record.get('run_id')}"
    if event == "story-waiting":  # a story held back: a dependency not done, a file a running story changes
        return f"{when} ── story {key} waits: {record.get('reason')}"
    if event == "story-retried":
        return f"{when} ── story {key} taken again (deferred in run {record.get('run_id')}; kept: {record.get('kept')})"
    if event == "story-ended":
        said = f"{when} ── story {key} {record.get('outcome')}: {record.get('summary')}"
        if record.get("usage") is None:
            return said
        left = [f"{v:.0f} tokens left" if k == "tokens" else f"${v:.4f} left"
                for k, v in (record.get("loop_left") or {}).items() if v is not None]
        spent = Usage.from_record(record.get("loop_spent") or {"calls": 0})
        return (said + f"  [story: {_money(Usage.from_record(record['usage']))}; loop: {_money(spent)}"
                + "".join(f"; {x}" for x in left) + "]")
    if event == "loop-ended":
        return f"{when} loop ended: {record.get('outcome')}" + (f": {record['error']}" if record.get("error") else "")
    return None


@sprint_app.command("watch")
def watch(
    raw: Annotated[bool, typer.Option("--raw", help="An agent's lines as it printed them (its stream-JSON "
                                      "events unabridged), not said short.")] = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
) -> None:
    """Follow the sprint loop live, across its stories: each story's stages, checks with their output, the agent's
    output as it prints it, tokens and cost, the loop's budget as each call spends it. Ends when the loop ends, with
    its exit code (0 all done, 11 a story deferred, 9 waiting for a person, 8 failed); a loop that ended is shown
    whole."""
    import json
    import time as clock

    from stepline.errors import NotFoundError, RunStateError
    from stepline.executors import Ledger
    from stepline.interfaces.cli._logs import AgentLogs, log_line
    from stepline.interfaces.cli._options import project_runs
    from stepline.service import project_prices
    from stepline.sprint import load_sprint_config, loop_driver, loop_log_path
    from stepline.store import read_journal

    at = where(directory, project_root)
    project = project_runs(at, config)
    store = project.store
    spent = Ledger()  # the loop's calls so far, weighed as its budgets weigh them
    prices, limit = project_prices(project), load_sprint_config(at.root).budgets.run
    path = loop_log_path(at.root)
    if not path.is_file():
        raise NotFoundError(f"{path}: no sprint loop was started here", hint="start one with `stepline sprint run`")
    lines = path.read_text(encoding="utf-8").splitlines()
    # From the start of the last loop, its resumes included (`sprint run` starts a loop; a resume goes on with it).
    last = max((n for n, line in enumerate(lines) if '"event": "loop-started"' in line
                and '"resumed": false' in line), default=0)
    offset = sum(len(line.encode("utf-8")) + 1 for line in lines[:last])
    runs: dict[str, tuple[str, Any, AgentLogs]] = {}  # run id -> story, run dir, its agents' logs
    seen: dict[str, int] = {}
    ended: str | None = None
    undriven = 0
    while True:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]
        offset += len(complete)
        records = [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]
        shown = [(str(r.get("time")), said) for r in records if (said := _loop_line(r)) is not None]
        for record in records:
            # A retried story's record names its deferred run, an earlier loop's: not one this loop drives.
            if record.get("run_id") and record["run_id"] not in runs and record.get("event") != "story-retried":
                run_dir = store.open(record["run_id"])
                runs[record["run_id"]] = (str(record.get("key")), run_dir, AgentLogs(run_dir.path / "logs", raw=raw))
            if record.get("event") == "loop-started":
                ended = None
            if record.get("event") == "loop-ended":
                ended = str(record.get("outcome"))
        for run_id, (key, run_dir, agents) in runs.items():
            events = read_journal(run_dir.journal_path, run_id)
            journaled = []
            for event in events[seen.get(run_id, 0):]:
                if (line := log_line(event)) is not None:
                    journaled.append((str(event.time), line))
                if event.type == "CallRecorded" and spent.record(
                        run_id, event.step_id, str(event.data.get("key")), str(event.data.get("op")),
                        event.data.get("result")) is not None:
                    said = _budget_line(spent, prices, limit)
                    journaled.append((str(event.time), f"{str(event.time)[11:19]} {said}"))
            for when, line in journaled + agents.new_lines():  # "<time> <rest>": the story's key after the time
                clock_time, _, rest = line.partition(" ")
                shown.append((when, f"{clock_time} {key:<10} {rest}"))
            seen[run_id] = len(events)
        for _, said in sorted(shown, key=lambda item: item[0]):
            print(said, flush=True)
        if ended is not None:
            raise typer.Exit(_EXIT.get(ended, 1))
        undriven = 0 if loop_driver(at.root) is not None else undriven + 1
        if undriven == 2:  # twice, 0.3 s apart: not a resume between one loop's end and the next one's start
            raise RunStateError("the sprint loop is not running: it did not end and no process drives it (killed?)",
                                hint="`stepline sprint resume` goes on where it stopped")
        clock.sleep(0.3)
