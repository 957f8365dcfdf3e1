"""Upstream XML that nests a tag wrongly (v6.0–v6.10 document-project: a ``<check>`` closed by ``</step>``) is
recovered as an HTML parser does: the open element closes at its parent's end, with a file:line warning, and the
workflow runs; ``validate`` and ``run`` agree it is a warning, and ``validate`` says the same for a relative and
an absolute ``-C``."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline.interfaces.cli._app import run_cli

WORKFLOW = """---
name: misnested
description: a check left open
---

<workflow>
<step n="1" goal="Look around">
<action>Check for the state file</action>
<check if="the state file exists">
  <action>Read the state file</action>
  <ask>Resume [1] or start over [2]?</ask>
</step>

<step n="2" goal="Write it down">
<action>Write the findings</action>
</step>
</workflow>
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "proj" / "skills" / "misnested"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(WORKFLOW, encoding="utf-8")
    return tmp_path / "proj"


def test_validate_warns_with_file_line_and_is_the_same_for_relative_and_absolute_c(
        project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project.parent)
    assert run_cli(["validate", "-C", "proj", "skills"]) == 0
    relative = capsys.readouterr()
    assert run_cli(["validate", "-C", str(project), "skills"]) == 0
    absolute = capsys.readouterr()
    assert "SKILL.md:12: warning: <check> opened on line 9 is closed by </step> on line 12" in relative.out
    assert relative.out.splitlines()[-1] == absolute.out.splitlines()[-1]
    assert "0 error(s)" in relative.out


def test_run_recovers_warns_and_reaches_the_question_inside_the_check(
        project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    code = run_cli(["run", "skills/misnested", "--executor", "dry-run", "--non-interactive"])
    out = capsys.readouterr()
    assert "SKILL.md:12: warning: <check> opened on line 9 is closed by </step> on line 12" in out.err
    assert code == 9 and "waiting for an answer" in out.out  # it ran to a person's turn, not refused
