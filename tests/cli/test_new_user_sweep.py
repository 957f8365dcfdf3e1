"""A new user's mistakes with BMAD v6.11.0 skills, through the CLI: one line ``error: …`` naming the file:line or
the thing and the fix, the README's exit code, no traceback, and no run created for what could be refused first.

Each case is one a user makes: a skill whose step file or ``[[bmad-snapshot:…]]`` target is gone, a SKILL.md whose
frontmatter is not YAML, a ``--mode`` the skill does not have, ``bmad install`` with a bad ``--set`` or ``--extras``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from stepline.bmad import install_bmad
from stepline.interfaces.cli._app import run_cli

CORPUS_V611 = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.11.0"
BUILD = "_bmad/bmm/ship/bmad-build"


@pytest.fixture(scope="module")
def _installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not CORPUS_V611.is_dir():
        pytest.skip("shared/corpus/bmad/v6.11.0 is not available")
    project = tmp_path_factory.mktemp("v611") / "project"
    install_bmad(CORPUS_V611, project, {})
    return project


@pytest.fixture
def project(_installed: Path, tmp_path: Path) -> Path:
    """A project with BMAD v6.11.0 installed (a fresh copy per test)."""
    copy = tmp_path / "project"
    shutil.copytree(_installed, copy)
    return copy


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run the CLI; it must print exactly one ``error:`` line on stderr and no traceback."""
    code = run_cli(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    return code, err[0]


def _run(project: Path, skill: str, *extra: str) -> list[str]:
    return ["run", skill, "--executor", "dry-run", "--yolo", "-q", "-C", str(project), *extra]


def _no_run(project: Path) -> bool:
    runs = project / ".stepline" / "runs"
    return not runs.is_dir() or not any(p.name.startswith("run-") for p in runs.iterdir())


def test_the_installed_skill_runs(project: Path) -> None:
    """The fixture is sound: bmad-build runs to completion as installed."""
    assert run_cli(_run(project, BUILD)) == 0


def test_a_missing_step_file_is_refused_not_skipped(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """step-02-plan.md deleted: the run used to end after step 01 as 'completed'; now it is refused at load,
    naming the first link to the missing file (as BMAD's render_skill.py refuses the skill)."""
    (project / BUILD / "step-02-plan.md").unlink()
    code, line = _refused(_run(project, BUILD), capsys)
    assert code == 4
    assert "step-01-clarify-and-route.md:" in line and "[[bmad-snapshot:step-02-plan.md]] names no file" in line
    assert "stepline validate" in line
    assert _no_run(project)


def test_a_snapshot_link_to_a_missing_file_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in a [[bmad-snapshot:…]] target (not a step file) in a step file is refused with its file:line."""
    step = project / BUILD / "step-01-clarify-and-route.md"
    text = step.read_text(encoding="utf-8")
    line_no = next(n for n, ln in enumerate(text.splitlines(), start=1) if "compile-epic-context.md]]" in ln)
    step.write_text(text.replace("compile-epic-context.md]]", "compile-epic-contxt.md]]"), encoding="utf-8")
    code, line = _refused(_run(project, BUILD), capsys)
    assert code == 4 and f"step-01-clarify-and-route.md:{line_no}: [[bmad-snapshot:compile-epic-contxt.md]]" in line
    assert _no_run(project)


def test_a_broken_snapshot_in_any_rendered_source_is_refused(project: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """render_skill.py resolves the [[bmad-snapshot:…]] links of every Markdown file of a skill with workflow.md
    (a review prompt, a reference): one to no file is refused with its file:line, as BMAD refuses it."""
    prompt = project / BUILD / "review-prompts" / "edge-case-hunter.md"
    prompt.write_text(prompt.read_text(encoding="utf-8") + "\nSee [[bmad-snapshot:nope.md]].\n", encoding="utf-8")
    lines = len(prompt.read_text(encoding="utf-8").splitlines())
    code, line = _refused(_run(project, BUILD), capsys)
    assert code == 4 and f"edge-case-hunter.md:{lines}: [[bmad-snapshot:nope.md]] names no file" in line
    assert _no_run(project)


def test_a_missing_workflow_md_is_refused_and_linted(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SKILL.md renders workflow.md with render_skill.py; without workflow.md the skill used to run SKILL.md's
    render command as its only step."""
    (project / BUILD / "workflow.md").unlink()
    code, line = _refused(_run(project, BUILD), capsys)
    assert code == 4 and "SKILL.md:" in line and "workflow.md" in line and "does not exist" in line
    assert _no_run(project)
    assert run_cli(["validate", BUILD, "-C", str(project)]) == 10
    assert "renders the skill's workflow.md" in capsys.readouterr().out


def test_skill_md_frontmatter_not_yaml(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`name: [unclosed` used to run under the name '[unclosed' and validate only warned about the name."""
    skill = project / BUILD / "SKILL.md"
    lines = skill.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = "name: [unclosed\n"
    skill.write_text("".join(lines), encoding="utf-8")
    code, line = _refused(_run(project, BUILD), capsys)
    assert code == 4 and re.search(r"SKILL\.md:[23]: frontmatter key 'name' is not valid YAML", line)  # where
    assert _no_run(project)  # PyYAML noticed it
    assert run_cli(["validate", BUILD, "-C", str(project)]) == 10
    assert re.search(r"SKILL\.md:[23]: error: frontmatter key 'name' is not valid YAML", capsys.readouterr().out)


def test_a_step_files_broken_frontmatter_is_linted(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A step file's frontmatter that is not YAML is an error of `stepline validate`, with its line."""
    step = project / BUILD / "step-03-implement.md"
    step.write_text("---\nfoo: [bad\n---\n" + step.read_text(encoding="utf-8"), encoding="utf-8")
    assert run_cli(["validate", BUILD, "-C", str(project)]) == 10
    out = capsys.readouterr().out
    assert re.search(r"step-03-implement\.md:[23]: error: frontmatter key 'foo' is not valid YAML", out)


def test_an_unknown_mode_is_a_usage_error_before_any_run(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--mode bogus` used to create a run that failed at its intent step (exit 8, 'resume' offered)."""
    code, line = _refused(_run(project, "_bmad/bmm/plan/bmad-prd", "--mode", "bogus"), capsys)
    assert code == 2 and "--mode bogus" in line and "bmad-prd" in line and "--mode validate" in line
    code, line = _refused(_run(project, "_bmad/bmm/v6-shims/bmad-create-prd", "--mode", "edit"), capsys)
    assert code == 2 and "bmad-prd" in line  # a shim's target's modes
    assert _no_run(project)


def test_var_intent_is_checked_like_mode(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--var intent=bogus` used to fail the run at its intent step (exit 8); with `--mode validate` beside it,
    the --var silently won. bmad-build (no intent modes) keeps an `intent` variable of its own."""
    code, line = _refused(_run(project, "_bmad/bmm/plan/bmad-prd", "--var", "intent=bogus"), capsys)
    assert code == 2 and "--var intent=bogus: skill 'bmad-prd' has no intent mode 'bogus'" in line
    code, line = _refused(_run(project, "_bmad/bmm/plan/bmad-prd", "--var", "intent=bogus", "--mode", "validate"),
                          capsys)
    assert code == 2 and "--mode validate and --var intent=bogus disagree" in line
    assert _no_run(project)
    assert run_cli(_run(project, BUILD, "--var", "intent=fix the login bug")) == 0


def test_mode_for_a_skill_without_modes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--mode validate` on bmad-build (step files, no intent modes) used to be ignored silently."""
    code, line = _refused(_run(project, BUILD, "--mode", "validate"), capsys)
    assert code == 2 and "has no intent modes" in line and "without --mode" in line
    assert _no_run(project)


def test_a_known_mode_in_any_case_still_runs(project: Path) -> None:
    assert run_cli(_run(project, "_bmad/bmm/plan/bmad-prd", "--mode", "Validate")) == 0


def test_install_set_names_its_own_flag_and_takes_module_keys(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`--set foo` used to say '--var expects NAME=VALUE'; `--set bmm.user_skill_level=expert` (the documented
    MODULE.KEY form) used to be refused."""
    if not CORPUS_V611.is_dir():
        pytest.skip("shared/corpus/bmad/v6.11.0 is not available")
    target = tmp_path / "p"
    code, line = _refused(["bmad", "install", str(CORPUS_V611), "--project", str(target), "--set", "foo"], capsys)
    assert code == 2 and line.startswith("error: --set expects KEY=VALUE") and not target.exists()
    assert run_cli(["bmad", "install", str(CORPUS_V611), "--project", str(target), "--set",
                    "bmm.user_skill_level=expert"]) == 0
    assert 'user_skill_level = "expert"' in (target / "_bmad" / "config.user.toml").read_text(encoding="utf-8")


def test_install_with_missing_extras_installs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong --extras folder used to be found only after every module had been installed."""
    if not CORPUS_V611.is_dir():
        pytest.skip("shared/corpus/bmad/v6.11.0 is not available")
    target = tmp_path / "p"
    code, line = _refused(["bmad", "install", str(CORPUS_V611), "--project", str(target), "--extras",
                           str(tmp_path / "nope")], capsys)
    assert code == 3 and "nope: no such folder" in line
    assert not (target / "_bmad").exists()


def test_resume_after_a_step_file_vanished(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A skill run blocked at a checkpoint, its next step file deleted, then resumed: the step fails saying the
    file is gone since the run started and how to go on; restored, the same run resumes to completion."""
    base = ["-C", str(project), "-q"]
    assert run_cli(["run", BUILD, "--executor", "dry-run", "--non-interactive", *base]) == 9
    run_id = next(p.name for p in (project / ".stepline" / "runs").iterdir() if p.name.startswith("run-"))
    gates = project / ".stepline" / "runs" / run_id / "gates.json"
    for _ in range(20):  # the questions the step files' plans ask before step-02's checkpoint
        (gate,) = [g for g in json.loads(gates.read_text(encoding="utf-8")) if g["status"] == "pending"]
        if "/checkpoint/" in gate["gate_id"]:
            break
        answer = gate["choices"][0]["key"] if gate.get("choices") else "nothing to add"
        assert run_cli(["answer", run_id, answer, "-C", str(project)]) == 0
        assert run_cli(["resume", run_id, "--executor", "dry-run", *base]) == 9
    assert run_cli(["answer", run_id, "A", "-C", str(project)]) == 0
    step = project / BUILD / "step-03-implement.md"
    kept = step.read_bytes()
    step.unlink()
    capsys.readouterr()
    assert run_cli(["resume", run_id, "--executor", "dry-run", *base]) == 8
    assert run_cli(["status", run_id, "-C", str(project)]) == 0
    out = capsys.readouterr().out
    assert "step-03-implement.md: this step file is gone (the skill changed after the run started)" in out
    assert "restore it, then resume the run" in out
    step.write_bytes(kept)
    # step-03 runs, on to step-05's offer to push (a question of its plan)
    assert run_cli(["resume", run_id, "--executor", "dry-run", *base]) == 9
    (gate,) = [g for g in json.loads(gates.read_text(encoding="utf-8")) if g["status"] == "pending"]
    assert gate["step_id"] == "step-05-present@2"


def test_an_override_of_the_wrong_type_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`review_layers = "oops"` in _bmad/custom/bmad-build.toml (an array of tables in customize.toml) used to
    run silently; BMAD's renderer refuses it. Refused at load and by validate, naming the override's line."""
    custom = project / "_bmad" / "custom" / "bmad-build.toml"
    custom.parent.mkdir(parents=True, exist_ok=True)
    custom.write_text('[workflow]\n# the team\'s layers\nreview_layers = "oops"\n', encoding="utf-8")
    code, line = _refused(_run(project, BUILD), capsys)
    assert code == 4 and "custom/bmad-build.toml:3: workflow.review_layers is a string here, but an array of " \
                         "tables in the skill's customize.toml" in line
    assert _no_run(project)
    assert run_cli(["validate", BUILD, "-C", str(project)]) == 10
    custom.write_text('[workflow]\nactivation_steps_append = ["Say hi."]\n[[workflow.review_layers]]\nid = "x"\n'
                      'name = "X"\ninstruction = "Look."\n', encoding="utf-8")  # the right types still merge
    assert run_cli(_run(project, BUILD)) == 0


def test_a_skill_whose_skill_md_is_misnamed_is_not_a_micro_file_workflow(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SKILL.md renamed skill.md: the folder's workflow.md used to run as a 2-step micro-file workflow (exit 0)
    and validate to pass; a customize.toml without SKILL.md was skipped by `validate _bmad`."""
    (project / BUILD / "SKILL.md").rename(project / BUILD / "skill.md")
    orphan = project / "_bmad" / "bmm" / "ship" / "orphan"
    orphan.mkdir()
    (orphan / "customize.toml").write_text("[workflow]\n", encoding="utf-8")
    for target in (BUILD, BUILD + "/workflow.md"):
        code, line = _refused(_run(project, target), capsys)
        assert code == 4 and "bmad-build: the skill's file is skill.md, not SKILL.md (rename it SKILL.md" in line
    code, line = _refused(_run(project, "_bmad/bmm/ship/orphan"), capsys)
    assert code == 4 and "orphan: customize.toml but no SKILL.md" in line
    assert _no_run(project)
    assert run_cli(["validate", "_bmad", "-C", str(project)]) == 10
    out = capsys.readouterr().out
    assert "bmad-build: error: the skill's file is skill.md" in out and "orphan: error: customize.toml" in out
    assert "2 unreadable;" in out  # (and the shims forwarding to bmad-build name it missing)


# ----------------------------------------------------------------------------------- outside this sweep's area
# Found by the sweep in the sprint loop's CLI (interfaces/cli/_sprint.py, sprint/_plan.py), left to their owners.

BOARD = """development_status:
  epic-1: in-progress
  1-1-first-story: ready-for-dev
  1-2-second: backlog
"""


@pytest.fixture
def sprint_project(project: Path) -> Path:
    artifacts = project / "_bmad-output" / "implementation-artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / "sprint-status.yaml").write_text(BOARD, encoding="utf-8")
    (artifacts / "1-1-first-story.md").write_text("# Story 1.1\n\nStatus: ready-for-dev\n", encoding="utf-8")
    return project


def test_the_sprint_fixture_plans(sprint_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The board is sound: the plan lists the ready story (so the cases below fail for their own reason)."""
    assert run_cli(["sprint", "run", "--dry-run", "-C", str(sprint_project)]) == 0
    assert "1. 1-1-first-story" in capsys.readouterr().out


def test_sprint_story_that_is_not_ready(sprint_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, line = _refused(["sprint", "run", "--story", "1-2", "--dry-run", "-C", str(sprint_project)], capsys)
    assert code != 0 and "1-2-second" in line and "backlog" in line


def test_sprint_outside_a_bmad_project_or_without_a_board_is_not_found(
        sprint_project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Outside a BMAD project the loop says so (it used to say only 'no sprint board here', exit 4); a project
    without its sprint-status.yaml is 'not found' too (3), naming the file and sprint planning."""
    (tmp_path / "plain").mkdir()
    code, line = _refused(["sprint", "run", "--dry-run", "-C", str(tmp_path / "plain")], capsys)
    assert code == 3 and "not a BMAD project (no _bmad/ folder)" in line
    next(sprint_project.rglob("sprint-status.yaml")).unlink()
    code, line = _refused(["sprint", "status", "-C", str(sprint_project)], capsys)
    assert code == 3 and "sprint-status.yaml: no sprint board here" in line and "sprint planning" in line


def test_sprint_dry_run_checks_the_backend(sprint_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, line = _refused(["sprint", "run", "--dry-run", "--backend", "nope", "-C", str(sprint_project)], capsys)
    assert code == 2 and "backend 'nope'" in line


def test_sprint_dry_run_checks_the_executor(sprint_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, line = _refused(["sprint", "run", "--dry-run", "--executor", "nope", "-C", str(sprint_project)], capsys)
    assert code == 3 and "executor 'nope'" in line


def test_run_script_of_a_missing_script_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """runScript of a script that does not exist used to fail as 'command exited with code 2'; it is refused
    naming the script and where it was looked for (and so is never started)."""
    (tmp_path / "flow.yaml").write_text("id: tools\nsteps:\n  - id: s1\n    body: run a script\n", encoding="utf-8")
    (tmp_path / "script.yaml").write_text("steps:\n  s1:\n    - call_tool: {name: runScript, args: {script: "
                                          "_bmad/scripts/memlg.py}}\n    - finish: {summary: done}\n",
                                          encoding="utf-8")
    assert run_cli(["run", "flow.yaml", "--script", "script.yaml", "--yolo", "-q", "-C", str(tmp_path)]) == 8
    run_id = next(p.name for p in (tmp_path / ".stepline" / "runs").iterdir() if p.name.startswith("run-"))
    capsys.readouterr()
    assert run_cli(["status", run_id, "-C", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"refused: script _bmad/scripts/memlg.py does not exist ({tmp_path}/_bmad/scripts/memlg.py)" in out


def test_install_over_an_earlier_release_says_what_it_left(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """v6.11.0 installed over a v6.0.0-alpha.23 project used to merge silently: the old workflows stayed beside
    the skills (and still ran). The install says so per module; installing a release again says nothing."""
    alpha = CORPUS_V611.parent / "v6.0.0-alpha.23"
    if not (CORPUS_V611.is_dir() and alpha.is_dir()):
        pytest.skip("the BMAD corpus is not available")
    target = str(tmp_path / "p")
    assert run_cli(["bmad", "install", str(alpha), "--project", target, "--extras",
                    str(CORPUS_V611.parent / "extras")]) == 0
    assert run_cli(["bmad", "install", str(alpha), "--project", target, "--extras",
                    str(CORPUS_V611.parent / "extras")]) == 0
    assert "warning" not in capsys.readouterr().err  # the same release again (its extras and configs are its own)
    assert run_cli(["bmad", "install", str(CORPUS_V611), "--project", target]) == 0
    warnings = [" ".join(w.split()) for w in capsys.readouterr().err.split("warning: ")[1:]]
    assert any(w.startswith(f"{target}/_bmad/bmm keeps ") and "this release does not ship" in w and
               "remove the folder and install again" in w for w in warnings), warnings


def test_logs_follow_of_a_killed_run_ends(tmp_path: Path) -> None:
    """`stepline logs RUN -f` of a run whose process was killed (no lock holder, no end event) used to wait
    forever; it says the run is not running and how to go on, exit 5."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    stepline = str(Path(sys.executable).parent / "stepline")
    (tmp_path / "flow.yaml").write_text("id: slow\nsteps:\n  - id: s1\n    body: run slow.py\n", encoding="utf-8")
    (tmp_path / "slow.py").write_text("import os, pathlib, time\npathlib.Path('slow.pid').write_text(str(os.getpid()))"
                                      "\ntime.sleep(60)\n", encoding="utf-8")
    (tmp_path / "script.yaml").write_text("steps:\n  s1:\n    - call_tool: {name: runScript, args: {script: slow.py}}"
                                          "\n    - finish: {summary: done}\n", encoding="utf-8")
    runs = tmp_path / ".stepline" / "runs"
    driver = subprocess.Popen([stepline, "run", "flow.yaml", "--script", "script.yaml", "--yolo", "-q"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                "ToolStarted" in p.read_text(encoding="utf-8", errors="replace")
                for p in runs.glob("run-*/journal*") if p.is_file()):
            time.sleep(0.2)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the run's process, as a crash would
        driver.wait()
    run_id = next(p.name for p in runs.iterdir() if p.name.startswith("run-"))
    try:
        done = subprocess.run([stepline, "logs", run_id, "-f"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=15)
    finally:  # the script runs in a session of its own (it outlives the killed run): stop it
        pid = tmp_path / "slow.pid"
        if pid.is_file():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid.read_text()), signal.SIGKILL)
    assert done.returncode == 5 and f"stepline resume {run_id}" in done.stderr


def test_validate_says_a_broken_central_config_once(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A _bmad/config.toml that does not parse used to be printed once per skill (49 identical lines)."""
    config = project / "_bmad" / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + "[core\n", encoding="utf-8")
    assert run_cli(["validate", "_bmad", "-C", str(project)]) == 10
    out = capsys.readouterr().out.splitlines()
    assert sum("config.toml:" in line and "TOML does not parse" in line for line in out) == 1
    assert out[-1].endswith("1 error(s), 0 warning(s)")


def test_install_into_what_is_not_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A project whose _bmad is a file (or a path that cannot be made) used to end in a NotADirectoryError
    traceback; it is one line naming the path and the cause."""
    if not CORPUS_V611.is_dir():
        pytest.skip("shared/corpus/bmad/v6.11.0 is not available")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "_bmad").write_text("not a folder\n", encoding="utf-8")
    code, line = _refused(["bmad", "install", str(CORPUS_V611), "--project", str(tmp_path / "p")], capsys)
    assert code == 1 and f"cannot write {tmp_path}/p/_bmad/core: Not a directory" in line
    assert "_bmad/ must be folders you can write" in line


def test_a_workflow_block_that_is_not_a_table(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`workflow = 1` in customize.toml used to pass validate and crash a step with an AttributeError."""
    custom = project / BUILD / "customize.toml"
    custom.write_text("# defaults\nworkflow = 1\n", encoding="utf-8")
    code, line = _refused(_run(project, BUILD), capsys)
    assert code == 4 and "customize.toml:2: workflow is a number, not a table" in line and "[workflow]" in line
    assert _no_run(project)
    assert run_cli(["validate", BUILD, "-C", str(project)]) == 10
    assert "customize.toml:2: error: workflow is a number, not a table" in capsys.readouterr().out


def test_a_skill_of_another_project(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A skill under another project's _bmad (run from elsewhere, or from inside _bmad/bmm) used to run without
    that project's config: its {{.implementation_artifacts}} and other values left unresolved."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, line = _refused(_run(elsewhere, str(project / BUILD)), capsys)
    assert code == 2 and f"is installed in the project {project}, not in {elsewhere}" in line
    assert f"run it from {project}, or with -C {project}" in line
    code, line = _refused(_run(project / "_bmad" / "bmm", "ship/bmad-build"), capsys)
    assert code == 2 and f"not in {project}/_bmad/bmm" in line
    assert not (elsewhere / ".stepline").exists() and _no_run(project)
    assert run_cli(_run(project, str(project / BUILD))) == 0  # from its own project, by any path
