"""Rendering helpers shared by commands: the console, progress lines, tables, a run's errors and secrets, JSON."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from stepline.service import one_line, secrets_in_artifacts

if TYPE_CHECKING:
    from rich.console import Console

    from stepline.model import Event, Run
    from stepline.store import Diagnosis

__all__ = [
    "console",
    "err_console",
    "paged",
    "print_contexts",
    "print_diagnosis",
    "print_errors",
    "print_json",
    "print_secrets",
    "print_secrets_in_artifacts",
    "print_table",
    "progress_listener",
    "run_exit_code",
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
        #: A resumed run: the first step it starts is said ("resuming at STEP").
        self.resumed = False

    def __call__(self, event: Event) -> None:
        if self.quiet:
            return
        kind = event.type
        if self.tty and self.live_allowed:
            self._live(event)
        if kind == "WorkflowResumed":
            self.resumed = True
        elif kind == "WorkflowStepStarted" and self.resumed:
            self.resumed = False
            name = one_line(event.data.get("name"))
            self._say(f"resuming at {event.step_id}" + (f" ({name})" if name and name != event.step_id else ""))
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

    def _say(self, line: str) -> None:
        """A line of the runtime's own on stderr (above the live line on a terminal)."""
        if not self.tty:
            sys.stderr.write(line + "\n")
            return
        from rich.text import Text

        err_console.print(Text(line))

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


def print_errors(errors: Sequence[Sequence[str]]) -> None:
    """Each error of :func:`run_errors` whole, never cut: stepline does not wrap its lines, the terminal does."""
    if not errors:
        return
    lines = ["errors:"]
    for step_id, error in errors:
        first, *rest = error.splitlines() or [""]
        lines += [f"  {step_id}: {first}", *(f"    {line}" for line in rest)]
    sys.stdout.write("\n".join(lines) + "\n")


def print_contexts(contexts: Sequence[Sequence[str]]) -> None:
    """The lines of :func:`context_lines` under a heading, as written."""
    if contexts:
        sys.stdout.write("\n".join(["context (TELIS):", *(line for lines in contexts for line in lines)]) + "\n")


def run_exit_code(run: Run) -> int:
    """0 completed, 8 failed, 9 blocked."""
    from stepline.interfaces.cli._options import EXIT_BLOCKED, EXIT_FAILED

    return {"completed": 0, "failed": EXIT_FAILED, "blocked": EXIT_BLOCKED}.get(run.status.value, 1)


def print_json(value: Any) -> None:
    """Print JSON to stdout."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def print_diagnosis(found: Diagnosis) -> None:
    """The doctor's report, line by line (plain text: paths and messages are not rich markup)."""
    from rich.text import Text

    for line in found.report():
        style = "red" if line.startswith("verdict") and found.damaged else None
        console.print(Text(line, style=style or ""), soft_wrap=True)
