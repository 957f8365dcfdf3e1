"""Rendering helpers shared by commands: the console, progress lines, run summaries, JSON output."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from stepline.model import Event, Run

__all__ = [
    "console",
    "context_detail",
    "context_lines",
    "err_console",
    "one_line",
    "paged",
    "print_contexts",
    "print_errors",
    "print_json",
    "print_secrets",
    "print_secrets_in_artifacts",
    "print_table",
    "progress_listener",
    "run_errors",
    "run_exit_code",
    "run_summary",
    "secrets_in_artifacts",
    "table_width",
]


#: The width of a console that writes to a pipe or a file: no line is ever wrapped or cut.
_UNBOUNDED = 1_000_000


class _LazyConsole:
    """A rich Console created on first use: importing rich costs more than `stepline --help` may take."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def get(self) -> Console:
        """The console itself (what rich's Live must be given)."""
        if self._console is None:
            import os

            from rich.console import Console

            options = dict(self._options)
            stream = sys.stderr if options.get("stderr") else sys.stdout
            if not stream.isatty() and not os.environ.get("COLUMNS", "").isdigit():
                # A pipe or a file has no width: rich would wrap and cut at 80 columns. Lines go out whole;
                # tables take the width of their cells.
                options.update(width=_UNBOUNDED, soft_wrap=True)
            self._console = Console(**options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


# No emoji codes: a gate id such as `tool:shell:IMPL-1` must print as written, not as `tool🐚IMPL-1`. Markup
# stays for the runtime's own words; user data goes through print_table, plain print or rich Text.
console: Any = _LazyConsole(highlight=False, emoji=False)
err_console: Any = _LazyConsole(stderr=True, highlight=False, emoji=False)

_MARKS = {
    "WorkflowStepStarted": ("…", "cyan"),
    "WorkflowStepCompleted": ("✓", "green"),
    "WorkflowStepFailed": ("✗", "red"),
    "StepBlocked": ("⏸", "yellow"),
    "StepRetry": ("↻", "yellow"),
    "StepSkipped": ("–", "dim"),
    "HumanGateRequired": ("?", "yellow"),
    "ArtifactReady": ("📄", "blue"),
}


class _Progress:
    """The progress of a run on stderr, priced by who looks: when stderr is a terminal, a line for each step that
    ends and, below them, a live line (steps done, the step under way) unless a person may be asked something on
    this terminal (its redrawing would garble what they type); otherwise one plain line per step that ends,
    written as is (no rich: a 20,000-step run piped to a file pays a write a step, nothing more)."""

    def __init__(self, quiet: bool, live: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.live_allowed = live
        self.done = 0
        self.current = ""
        self.live: Any = None

    def __call__(self, event: Event) -> None:
        if self.quiet:
            return
        kind = event.type
        if self.tty and self.live_allowed:
            self._live(event)
        if kind not in _MARKS or kind == "WorkflowStepStarted":
            return
        data = event.data
        detail = one_line(data.get("error") or data.get("reason") or data.get("path") or data.get("summary")
                          or data.get("name"))
        if not data.get("error") and len(detail) > 160:  # an error is shown whole; a long summary is not
            detail = detail[:159] + "…"
        mark, style = _MARKS[kind]
        if not self.tty:
            sys.stderr.write(f"{mark} {event.step_id or ''} {detail}\n")
            return
        from rich.text import Text

        err_console.print(Text.assemble((mark, style), f" {event.step_id or ''} ", (detail, "dim")))

    def _live(self, event: Event) -> None:
        """Keep the live line: started with the run, counting ended steps, stopped when the run stops."""
        kind = event.type
        if kind in ("WorkflowStepCompleted", "StepSkipped"):
            self.done += 1
        elif kind == "WorkflowStepStarted":
            self.current = event.step_id or ""
        elif kind in ("WorkflowStarted", "WorkflowResumed") and self.live is None:
            import atexit

            from rich.live import Live

            # stdout is not redirected: it may be a file (`> out.json`) while stderr is the terminal.
            self.live = Live(self, console=err_console.get(), transient=True, refresh_per_second=4,
                             redirect_stdout=False)
            self.live.start()
            atexit.register(self.live.stop)  # an interrupted run must not leave the terminal's cursor hidden
        elif kind in ("WorkflowCompleted", "WorkflowFailed", "WorkflowBlocked") and self.live is not None:
            self.live.stop()
            self.live = None

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text.assemble(("… ", "cyan"), f"{self.done} step(s) done", (f"  {self.current}", "dim"))


def progress_listener(quiet: bool, *, live: bool = True) -> Any:
    """A listener that shows a run's progress on stderr (so ``--json`` stdout stays clean); see :class:`_Progress`.
    ``live=False``: no live line (a person may be asked on the terminal)."""
    return _Progress(quiet, live)


@contextlib.contextmanager
def paged(on: bool) -> Iterator[None]:
    """Send what is printed inside through the pager (``$PAGER``, else less) when ``on`` and stdout is a
    terminal: a table of 20,000 rows is read page by page, not scrolled past."""
    if not (on and sys.stdout.isatty()):
        yield
        return
    import io
    import pydoc

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    pydoc.pager(buffer.getvalue())


def table_width() -> int | None:
    """The width a table must fit: ``COLUMNS`` when set, else the terminal's; None when stdout is no terminal
    (a pipe or a file gets every row whole)."""
    import os
    import shutil

    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def print_table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, fit_last: bool = False,
                width: int | None = None) -> None:
    """Print rows under headers, each column as wide as its widest cell, as plain text (no markup: ids, paths and
    gate ids print as written). Nothing is cut but, with ``fit_last``, the last column (a detail, an error):
    shortened with '…' to what the others leave of ``width`` (:func:`table_width` when not given). Made for
    long tables: one pass to measure, one to print, about a microsecond a cell."""
    rows = [[one_line(cell) for cell in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in rows:
        for number, cell in enumerate(row[:-1] if fit_last else row):
            if len(cell) > widths[number]:
                widths[number] = len(cell)
    room = None
    if fit_last:
        width = table_width() if width is None else width
        used = sum(widths[:-1]) + 2 * (len(widths) - 1)
        room = None if width is None else max(width - used, 12)
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(widths[number]) for number, cell in enumerate(row[:-1])]
        last = row[-1]
        if room is not None and len(last) > room:
            last = last[: room - 1] + "…"
        lines.append("  ".join([*cells, last]).rstrip())
    sys.stdout.write("\n".join(lines) + "\n")


def run_summary(run: Run) -> dict[str, Any]:
    """The JSON shape of a run that ``--json`` prints."""
    return {
        "run_id": run.run_id,
        "workflow": run.workflow.id,
        "format": run.workflow.format,
        "status": run.status.value,
        "blocked_reason": run.blocked_reason,
        "error": run.error,
        "steps": [{"step_id": s.step_id, "name": s.name, "status": s.status.value, "attempts": s.attempts,
                   "error": s.error, "outputs": s.outputs} for s in run.steps.values()],
        "secrets_in_artifacts": secrets_in_artifacts(run),
    }


def secrets_in_artifacts(run: Run) -> list[dict[str, Any]]:
    """The files the run's steps wrote that hold a secret, from the steps' output guardrail reports:
    ``[{step_id, path, kinds: {kind: count}, redacted: False, blocked}]``; kinds and counts, never a secret."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for step in run.steps.values():
        for entry in step.guardrails:
            if entry.get("guardrail") != "secrets":
                continue
            for path, kinds in (entry.get("artifacts") or {}).items():  # the latest attempt's report wins
                found[(step.step_id, path)] = {"step_id": step.step_id, "path": path, "kinds": dict(kinds),
                                               "redacted": False, "blocked": bool(entry.get("blocking"))}
    return list(found.values())


def print_secrets_in_artifacts(run: Run) -> None:
    """Tell the user which file holds which kind of secret (never the secret): stepline does not rewrite them."""
    print_secrets(secrets_in_artifacts(run))


def print_secrets(found: list[dict[str, Any]]) -> None:
    """:func:`print_secrets_in_artifacts` of the files :func:`secrets_in_artifacts` found."""
    if not found:
        return
    from rich.text import Text

    from stepline.guardrails import describe_secrets

    console.print(Text("warning: secrets in files the steps wrote (NOT redacted: the files keep them)",
                       style="yellow"))
    for item in found:
        failed = "; the step failed" if item["blocked"] else ""
        console.print(Text(f"  {item['path']}: {describe_secrets(item['kinds'])} (step {item['step_id']}{failed})"),
                      soft_wrap=True)
    if not any(item["blocked"] for item in found):
        console.print(Text("  remove them from the files; `guardrails.secrets_in_artifacts: block` in "
                           "config/runtime.yaml fails such a step instead"), soft_wrap=True)


def one_line(text: Any) -> str:
    """``text`` on one line (a table cell the console shortens to its width; the whole text is printed apart)."""
    return " ".join(str(text or "").split())


def run_errors(run: Run) -> list[tuple[str, str]]:
    """Every failed step's whole error, and the run's when it is not one of them: ``[(step id or "run", error)]``."""
    errors = [(step.step_id, step.error) for step in run.steps.values()
              if step.status.value == "failed" and step.error]
    if run.error and not any(run.error.endswith(error) for _, error in errors):
        errors.append(("run", run.error))
    return errors


def print_errors(errors: Sequence[Sequence[str]]) -> None:
    """Each error of :func:`run_errors` whole, never cut: stepline does not wrap its lines, the terminal does."""
    if not errors:
        return
    lines = ["errors:"]
    for step_id, error in errors:
        first, *rest = error.splitlines() or [""]
        lines += [f"  {step_id}: {first}", *(f"    {line}" for line in rest)]
    sys.stdout.write("\n".join(lines) + "\n")


def context_detail(data: dict[str, Any]) -> str | None:
    """What ``show`` says of a TELIS event (a context resolved, a source drifted); None for any other event."""
    context = data.get("context")
    if isinstance(context, dict):
        lsp = context.get("lsp") or {}
        parts = [f"{len(context.get('shards') or [])} shard(s), phase {context.get('phase', 0)}, "
                 f"{context.get('tokens', 0)}/{(context.get('request') or {}).get('budget_tokens', '?')} tokens"]
        if lsp:
            parts.append(f"{lsp.get('method')} {lsp.get('document')}:{lsp.get('line')}:{lsp.get('character')}"
                         f" via {lsp.get('server') or 'no server'}")
        if context.get("warnings"):
            parts.append(f"{len(context['warnings'])} warning(s)")
        return "; ".join(parts) + f"; {str(context.get('fingerprint', ''))[:19]}"
    if isinstance(data.get("sources"), list) and "replayed" in data:
        changed = ", ".join(f"{s.get('source')} changed" + (f" (since {s['since']})" if s.get("since") else "")
                            for s in data["sources"] if isinstance(s, dict))
        return ("drift in the replayed context: " if data["replayed"] else "drift: ") + changed
    return None


def context_lines(run: Run) -> list[list[str]]:
    """Each step's TELIS context, a list of lines a step: its shards (tier, score, source), the language
    server's answer, warnings."""
    found = []
    for step in run.steps.values():
        context = step.telis_context
        if not context:
            continue
        lines = [f"  {step.step_id}: {context.get('fingerprint')}  {context.get('tokens', 0)} tokens, phase "
                 f"{context.get('phase', 0)} ({context.get('stopped')}); query: "
                 f"{(context.get('request') or {}).get('query') or '-'}"]
        for shard in context.get("shards") or []:
            lines.append(f"    [{shard.get('tier')}] {shard.get('title')} ({shard.get('source')}, score "
                         f"{shard.get('score')}, {shard.get('tokens')} tokens)")
        lsp = context.get("lsp")
        if lsp:
            result = lsp.get("result") or {}
            answer = result.get("text") or "; ".join(s.get("label", "") for s in result.get("signatures") or [])
            lines.append(f"    {lsp.get('method')} at {lsp.get('document')}:{lsp.get('line')}:{lsp.get('character')}"
                         f" ({lsp.get('server') or 'no server'}): {one_line(answer)[:160] or '-'}")
        lines += [f"    warning: {warning}" for warning in context.get("warnings") or []]
        found.append(lines)
    return found


def print_contexts(contexts: Sequence[Sequence[str]]) -> None:
    """The lines of :func:`context_lines` under a heading, as written."""
    if contexts:
        sys.stdout.write("\n".join(["context (TELIS):", *(line for lines in contexts for line in lines)]) + "\n")


def run_exit_code(run: Run) -> int:
    """0 completed, 8 failed, 9 blocked."""
    from stepline.interfaces.cli._app import EXIT_BLOCKED, EXIT_FAILED

    return {"completed": 0, "failed": EXIT_FAILED, "blocked": EXIT_BLOCKED}.get(run.status.value, 1)


def print_json(value: Any) -> None:
    """Print JSON to stdout."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")
