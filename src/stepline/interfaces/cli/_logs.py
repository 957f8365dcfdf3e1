"""``stepline logs``: a run's timeline as it happens, and the agents' own lines (``sprint watch`` shows them too)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from stepline.interfaces.cli._options import ConfigOption, Directory, ProjectRoot, app, project_runs, where

__all__ = ["AgentLogs", "log_line"]


def log_line(event: Any) -> str | None:
    """One line of ``stepline logs`` for a journal record (None: nothing to say)."""
    data: dict[str, Any] = event.data
    step = event.step_id or "-"
    when = str(event.time)[11:19]
    if event.type == "CallRecorded":
        op, result = str(data.get("op", "")), data.get("result")
        if op.startswith("memo:") and isinstance(result, dict):  # an agent's (or model's) call ended
            text = " ".join(str(result.get("text") or "").split())[:300]
            usage = result.get("usage") or {}
            stopped = f"  STOPPED: {result['stopped']}" if result.get("stopped") else ""
            return (f"{when} {step:<14} {op[5:]}: {text or '(no text)'}  "
                    f"[{usage.get('input_tokens', 0):.0f} in / {usage.get('output_tokens', 0):.0f} out]{stopped}")
        if op.startswith("sprint:check/") and isinstance(result, dict):
            mark = "ok" if result.get("ok") else "FAILED"
            output = str(result.get("output") or "").strip()
            tail = ("\n    " + "\n    ".join(output.splitlines()[-15:])) if output and not result.get("ok") else ""
            return f"{when} {step:<14} check {op[13:]}: {mark} {result.get('detail', '')}{tail}"
        if op.startswith("sprint:") and isinstance(result, dict):
            return f"{when} {step:<14} {op[7:]}: {', '.join(f'{k}={v}' for k, v in result.items())[:300]}"
        return None
    if event.type in ("CallStarted", "CursorMoved", "VariableSet"):
        return None
    detail = " ".join(str(data.get("error") or data.get("reason") or data.get("summary") or data.get("gate_id")
                          or "").split())
    return f"{when} {step:<14} {event.type}{': ' + detail[:400] if detail else ''}"


class AgentLogs:
    """What running agents printed (the run's ``logs/<step>.log`` files), read on from where it stopped last."""

    def __init__(self, folder: Path, *, raw: bool) -> None:
        self.folder = folder
        self.raw = raw
        self.read_to: dict[Path, int] = {}

    def new_lines(self) -> list[tuple[str, str]]:
        """(time, line to print) for each complete line appended since the last call."""
        found: list[tuple[str, str]] = []
        for path in sorted(self.folder.glob("*.log")) if self.folder.is_dir() else []:
            with path.open("rb") as handle:
                handle.seek(self.read_to.get(path, 0))
                data = handle.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
            self.read_to[path] = self.read_to.get(path, 0) + len(complete)
            for raw in complete.decode("utf-8", "replace").splitlines():
                stamp, _, rest = raw.partition(" ")  # "<time> <agent>#<call> <out|err|--->| <line>"
                head, _, text = rest.partition("| ")
                if not self.raw and head.endswith(" out"):
                    from stepline.executors.cli_agents import describe_output

                    text = describe_output(text)
                text = text if len(text) <= 400 else text[:400] + "…"
                found.append((stamp, f"{stamp[11:19]} {path.stem:<14} {head}| {text}"))
        return found


RawOption = Annotated[bool, typer.Option("--raw", help="An agent's lines as it printed them (its stream-JSON "
                                        "events unabridged), not said short.")]


@app.command("logs")
def logs(
    run_id: Annotated[str, typer.Argument(help="The run (a sprint story's run id, as `sprint status` shows).")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as the run goes on, until it "
                                         "ends (Ctrl-C to stop watching; the run goes on).")] = False,
    raw: RawOption = False,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
) -> None:
    """A run's timeline as it happens: stages and steps, checks with their output, gates, each agent call's
    text and tokens when it ends, and the lines a running CLI agent prints (stdout `out|`, its stream-JSON events
    said short unless --raw; stderr `err|`) as it prints them. With -f, follow a run another process drives until
    it ends."""
    import time as clock

    from stepline.errors import RunStateError
    from stepline.store import read_journal

    runs = project_runs(where(directory, project_root), config)
    run_dir = runs.store.open(run_id)
    agents = AgentLogs(run_dir.path / "logs", raw=raw)
    seen = 0
    undriven = 0  # polls in a row that found the run unfinished and no process driving it
    while True:
        events = read_journal(run_dir.journal_path, run_dir.run_id)
        lines = [(str(event.time), line) for event in events[seen:] if (line := log_line(event)) is not None]
        for _, line in sorted(lines + agents.new_lines(), key=lambda item: item[0]):
            print(line, flush=True)
        seen = len(events)
        ended = bool(events) and events[-1].type in ("WorkflowCompleted", "WorkflowFailed", "WorkflowBlocked")
        driven = run_dir.holder() is not None
        if not follow or (ended and not driven):
            return
        undriven = 0 if ended or driven else undriven + 1
        if undriven == 2:  # twice, 0.3 s apart: not a resume between releasing the lock and taking it
            raise RunStateError(f"run {run_dir.run_id} is not running: it did not finish and no process drives it "
                                "(killed?)", hint=f"`{runs.resume_command(run_dir)}` goes on where it stopped")
        clock.sleep(0.3)
