"""`stepline show` and `status` use the terminal's width (COLUMNS here) and print a failed step's whole error
below the table, never cut (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stepline.interfaces.cli._app import run_cli

OUTPUT = "reports/long-output-name.json"
PROBLEM = f"{OUTPUT}:1:2: [json] Expecting property name enclosed in double quotes"


@pytest.fixture
def failed_run(project: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A run whose step wrote broken JSON: its error is two lines, the second near 90 characters."""
    (project / "flow.yaml").write_text(yaml.safe_dump({"id": "broken", "steps": [{"id": "a", "outputs": [OUTPUT]}]}))
    (project / "script.yaml").write_text(yaml.safe_dump({"steps": {"a": [
        {"write_output": {"content": "{not json"}}, {"finish": {"summary": "wrote it"}}]}}))
    assert run_cli(["run", "flow.yaml", "--script", "script.yaml", "-C", str(project), "-q"]) == 8
    capsys.readouterr()
    return next((project / ".stepline" / "runs").iterdir()).name


def _show(project: Path, run_id: str, columns: int, command: str, capsys: pytest.CaptureFixture[str],
          monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """The table's lines and the lines below it (from 'errors:' on)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    assert run_cli([command, run_id, "-C", str(project)]) == 0
    lines = capsys.readouterr().out.splitlines()
    split = lines.index("errors:")
    return lines[:split], lines[split:]


def test_show_on_a_wide_terminal_uses_its_width(project: Path, failed_run: str, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """COLUMNS=200: the failed step's row holds the whole error on one line, far past 80 characters."""
    table, below = _show(project, failed_run, 200, "show", capsys, monkeypatch)
    [row] = [line for line in table if "WorkflowStepFailed" in line]
    assert row.rstrip().endswith(PROBLEM) and len(row.rstrip()) > 150 and len(f"    {PROBLEM}") > 80
    assert all(len(line) <= 200 for line in table)
    assert below == ["errors:", "  a: validation failed: json: 1 problem(s)", f"    {PROBLEM}"]


def test_show_on_a_narrow_terminal_shortens_the_row_but_never_the_error(
        project: Path, failed_run: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """COLUMNS=80: the table fits in 80 columns (a long detail ends in '…', other columns whole); the error
    below is whole, its long line not wrapped or cut by stepline."""
    table, below = _show(project, failed_run, 80, "show", capsys, monkeypatch)
    assert all(len(line) <= 80 for line in table)
    [row] = [line for line in table if "WorkflowStepFailed" in line]
    assert row.rstrip().endswith("…")
    assert row.split()[2:4] == ["a", "WorkflowStepFailed"]
    assert below == ["errors:", "  a: validation failed: json: 1 problem(s)", f"    {PROBLEM}"]


@pytest.mark.parametrize("columns", [80, 200])
def test_status_shows_the_whole_error_below_its_table(project: Path, failed_run: str, columns: int,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` too: no cut at 80 characters in the table on a wide terminal, the whole error below."""
    table, below = _show(project, failed_run, columns, "status", capsys, monkeypatch)
    assert all(len(line) <= columns for line in table)
    [row] = [line for line in table if line.split()[:1] == ["a"]]
    assert row.rstrip().endswith(PROBLEM if columns == 200 else "…")
    assert below == ["errors:", "  a: validation failed: json: 1 problem(s)", f"    {PROBLEM}"]


def test_an_error_with_brackets_is_printed_as_written(project: Path, failed_run: str,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """'[json]' in an error is text, not console markup (it used to vanish)."""
    _, below = _show(project, failed_run, 120, "show", capsys, monkeypatch)
    assert "[json]" in below[-1]
