"""``stepline ccw …``: list, execute, inspect, check and complete Claude-Code-Workflow sessions (R-E8)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stepline.interfaces.cli._options import (
    EXIT_INVALID,
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
    from stepline.ccw import PendingCompletions, SessionInfo

ccw_app = typer.Typer(name="ccw", help="Run Claude-Code-Workflow sessions (.workflow/active/WFS-*).",
                      no_args_is_help=True)
app.add_typer(ccw_app, name="ccw")

SessionArg = Annotated[str, typer.Argument(help="Session id (a unique part is enough) or a session folder "
                                                "(a relative one is taken from the current folder, or -C DIR).")]


def _session_dir(at: Where, session: str) -> Path:
    """A session folder from an id, a unique part of one, or a path."""
    from stepline.ccw import confined_session, find_session

    as_path = at.path(Path(session))
    if (as_path / "workflow-session.json").is_file() or (as_path / "TODO_LIST.md").is_file():
        return confined_session(as_path)
    return confined_session(find_session(at.root, session).path)


def _pending(at: Where, config: Path | None, session_dir: Path) -> PendingCompletions:
    """The completions the session's last run journaled that its files may not say yet (read, never written:
    these commands only read), told on stderr."""
    from stepline.ccw import pending_completions
    from stepline.interfaces.cli._options import project_runs

    pending = pending_completions(project_runs(at, config).store, session_dir)
    if pending.tasks:
        who = (f"process {pending.holder} is writing them now" if pending.holder is not None
               else "`stepline ccw execute` writes them")
        err_console.print(f"{session_dir.name}: {len(pending.tasks)} completion(s) journaled by its last run are "
                          f"not all in the session's files yet ({who}): {', '.join(pending.tasks)}",
                          markup=False, soft_wrap=True)
    return pending


def _info_json(info: SessionInfo) -> dict[str, Any]:
    return {"id": info.id, "project": info.project, "done": info.done, "total": info.total,
            "percent": info.percent, "layout": info.layout, "active": info.active, "status": info.status,
            "path": str(info.path)}


@ccw_app.command("sessions")
def sessions(
    include_all: Annotated[bool, typer.Option("--all", help="Also archived and inactive legacy sessions.")] = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
) -> None:
    """List the project's active sessions: id | project | done/total | %."""
    from rich.table import Table

    from stepline.ccw import discover_sessions

    at = where(directory, project_root)
    found = discover_sessions(at.root, include_inactive=include_all)
    for info in found:
        if info.active:
            _pending(at, config, info.path.resolve())
    if as_json:
        print_json([_info_json(info) for info in found])
        return
    table = Table("session", "project", "done/total", "%", box=None)
    for info in found:
        table.add_row(info.id, info.project, f"{info.done}/{info.total}", f"{info.percent}%")
    console.print(table)


def _choose(found: list[SessionInfo], take_first: bool) -> SessionInfo:
    """Seed 002 discovery: one session is taken; of several, the user picks by number, id or unique part."""
    from stepline.errors import UsageError

    if len(found) == 1 or take_first:
        return found[0]
    err_console.print("Multiple active workflow sessions detected. Please select one:\n")
    for number, info in enumerate(found, start=1):
        err_console.print(f"{number}. {info.format_line()}")
    if sys.stdin.isatty():
        answer = str(typer.prompt("\nWhich session do you want to execute?", err=True)).strip()
    else:  # a pipe may carry the answer; with none there is nobody to ask
        answer = sys.stdin.readline().strip()
        if not answer:
            raise UsageError(f"{len(found)} active sessions and no terminal to choose one of them",
                             hint="name one with --resume-session ID (`stepline ccw sessions` lists them), or "
                                  "take the first with -y")
    if answer.isdigit() and 1 <= int(answer) <= len(found):
        return found[int(answer) - 1]
    exact = [info for info in found if info.id == answer]
    partial = [info for info in found if answer and answer.lower() in info.id.lower()]
    if exact or len(partial) == 1:
        return (exact or partial)[0]
    names = ", ".join(info.id for info in partial) if partial else "none"
    raise UsageError(f"{answer!r} picks no single session (matches: {names})",
                     hint=f"answer 1-{len(found)}, a session id or a unique part of one")


@ccw_app.command("execute")
def execute(
    resume_session: Annotated[str | None, typer.Option("--resume-session", help="Run this session; skips "
                                                       "discovery.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-j", min=1, help="Tasks run at once. "
                                                    "Default: runtime.concurrency (4); with --backend ray, the "
                                                    "cluster's CPUs.")] = None,
    executor: Annotated[str | None, typer.Option("--executor", "-e", help="Who does the tasks (dry-run, "
                                                 "scripted, openai, anthropic, cli-agent, human, …).")] = None,
    script: Annotated[Path | None, typer.Option("--script", help="Script for the scripted executor.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Unattended (CCW v7's auto mode): of several active "
                                      "sessions take the first, run the plan's pre_analysis commands without "
                                      "approval (each allowance journaled), archive the session when every "
                                      "task is done.")] = False,
    complete: Annotated[bool | None, typer.Option("--complete/--no-complete", help="Archive the session when "
                                                  "every task is done (default: with -y).")] = None,
    with_commit: Annotated[bool, typer.Option("--with-commit", help="Commit each completed task's changed files "
                                              "(CCW v7: '{type}: {title} - {summary}').")] = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
    as_json: JsonOutput = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    backend: BackendOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Execute a session's tasks in dependency order, concurrently; resume it after an interruption."""
    from stepline.ccw import complete_session, confined_session, discover_sessions, execute_session
    from stepline.interfaces.cli._driving import build_engine, use_backend
    from stepline.interfaces.cli._render import print_secrets_in_artifacts, run_exit_code
    from stepline.service import run_summary

    at = where(directory, project_root)
    chosen = (_session_dir(at, resume_session) if resume_session
              else confined_session(_choose(discover_sessions(at.root), yes).path))
    if not quiet and not as_json and not resume_session:
        err_console.print(f"✓ Selected session: {chosen.name}")
    engine = build_engine(at, config, executor, script, "yolo" if yes else "normal", quiet or as_json)
    use_backend(engine, backend, ray_address, concurrency, quiet=quiet or as_json)
    complete = yes if complete is None else complete
    import asyncio  # here, not at the top: `stepline --help` imports every command module

    run = asyncio.run(execute_session(engine, chosen, with_commit=with_commit))
    archived = (complete_session(chosen, engine.store) if complete and run.status.value == "completed"
                else None)
    if as_json:
        print_json({**run_summary(run), "session": chosen.name, "archived": archived})
    else:
        done = sum(1 for step in run.steps.values() if step.status.value == "completed")
        console.print(f"session [bold]{chosen.name}[/bold] run {run.run_id} [bold]{run.status.value}[/bold]: "
                      f"{done}/{len(run.steps)} tasks completed")
        if run.error:
            console.print(f"  {run.error}", markup=False)  # an error's "[x]" is not markup
        if run.blocked_reason:
            console.print(f"  {run.blocked_reason}; approve, then `stepline ccw execute --resume-session "
                          f"{chosen.name}`", markup=False)
        if archived:
            console.print(f"  archived to {archived['archive_path']}")
        print_secrets_in_artifacts(run)
    raise typer.Exit(run_exit_code(run))


@ccw_app.command("status")
def status(session: SessionArg, directory: Directory = None, project_root: ProjectRoot = None,
           config: ConfigOption = None, as_json: JsonOutput = False) -> None:
    """Show a session's tasks: status, execution group, agent, dependencies. Completions the last run
    journaled whose files do not say so yet show as ``completing`` (nothing is written)."""
    from rich.table import Table

    from stepline.ccw import infer_agent, read_ccw_session

    at = where(directory, project_root)
    session_dir = _session_dir(at, session)
    in_flight = set(_pending(at, config, session_dir).tasks)
    found = read_ccw_session(session_dir)
    rows: list[dict[str, Any]] = [
        {"id": task_id, "title": ref.title,
         "status": "completing" if task_id in in_flight and found.status[task_id] != "completed"
         else found.status[task_id], "group": ref.execution_group,
         "agent": infer_agent(ref.agent, ref.type), "depends_on": list(ref.depends_on), "parent": ref.parent}
        for task_id, ref in found.tasks.items()]
    leaves = [row for row in rows if row["id"] not in found.children or not found.children[row["id"]]]
    done = sum(1 for row in leaves if row["status"] == "completed")
    if as_json:
        print_json({"session": found.session_id, "layout": found.layout, "status": found.session.get("status"),
                    "execution_model": found.strategy.model, "done": done, "total": len(leaves), "tasks": rows})
        return
    console.print(f"[bold]{found.session_id}[/bold]  {found.session.get('project', '')}  "
                  f"status: {found.session.get('status')}  model: {found.strategy.model or 'parallel'}  "
                  f"{done}/{len(leaves)} tasks")
    table = Table("task", "title", "status", "group", "agent", "depends on", box=None)
    for row in rows:
        table.add_row(row["id"], row["title"][:60], row["status"], row["group"] or "", row["agent"],
                      ", ".join(row["depends_on"]))
    console.print(table)


@ccw_app.command("complete")
def complete(session: SessionArg, directory: Directory = None, project_root: ProjectRoot = None,
             config: ConfigOption = None, as_json: JsonOutput = False) -> None:
    """Mark every task completed and archive the session to .workflow/archives/ (manifest.json appended).
    Refused while the session is being executed."""
    from stepline.ccw import complete_session
    from stepline.interfaces.cli._options import project_runs

    at = where(directory, project_root)
    entry = complete_session(_session_dir(at, session), project_runs(at, config).store)
    if as_json:
        print_json(entry)
    else:
        console.print(f"✓ Session {entry['session_id']} archived to {entry['archive_path']}")


@ccw_app.command("check")
def check(session: SessionArg,
          strict: Annotated[bool, typer.Option("--strict", help="A path a task names outside the project is an "
                                               "error, not a warning.")] = False,
          directory: Directory = None, project_root: ProjectRoot = None,
          config: ConfigOption = None, as_json: JsonOutput = False) -> None:
    """Report every problem of a session (R-E8b) with file:line; exit 10 when any is an error. Completions
    the last run journaled whose files do not say so yet are reported (nothing is written)."""
    from dataclasses import asdict

    from stepline.ccw import check_ccw_session

    at = where(directory, project_root)
    session_dir = _session_dir(at, session)
    _pending(at, config, session_dir)
    diagnostics = check_ccw_session(session_dir, project_root=at.root, strict=strict)
    errors = sum(1 for d in diagnostics if d.severity == "error")
    if as_json:
        print_json([asdict(d) for d in diagnostics])
    else:
        for diagnostic in diagnostics:  # plain lines, like `validate`: editors parse file:line
            print(diagnostic)
        console.print(f"{errors} error(s), {len(diagnostics) - errors} warning(s)")
    if errors:
        raise typer.Exit(EXIT_INVALID)
