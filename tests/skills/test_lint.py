"""Reading and linting skills: the step graph, the kinds, and every structural problem with file:line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stepline.families import detect_format, lint_tree, load_workflow
from stepline.interfaces.cli._app import run_cli
from stepline.skills import lint_skill
from stepline.skills._skill import read_skill_files

from .conftest import CORPUS_V611, FIXTURE

MINI = FIXTURE / "mini-skills"


def test_a_skill_folder_its_skill_md_and_its_workflow_md_are_skills() -> None:
    """All three paths name the skill; a plain workflow.md elsewhere stays micro-file."""
    build = MINI / "tiny-build"
    assert {detect_format(p) for p in (build, build / "SKILL.md", build / "workflow.md")} == {"bmad-skill"}


def test_step_graph_of_a_step_file_skill() -> None:
    """The chain starts at workflow.md's FIRST STEP link; NEXT is the default, other links are routes."""
    files = read_skill_files(MINI / "tiny-build")
    assert files.kind == "step-files" and files.first_step == "step-01-route.md"
    first = files.steps["step-01-route.md"]
    assert first.next == "step-02-plan.md"
    assert {r.target for r in first.routes} == {"step-03-do.md", "step-04-review.md"}
    assert first.status_routes == (("draft", "step-02-plan.md", 12), ("approved", "step-03-do.md", 12),
                                   ("in-review", "step-04-review.md", 12))
    review = files.steps["step-04-review.md"]
    assert review.next is None and [r.target for r in review.routes] == ["step-03-do.md"]


def test_sections_skill_modes_and_shim() -> None:
    """Intent modes name their sections; a 'forwards to X (create intent)' description makes a shim."""
    doc = read_skill_files(MINI / "tiny-doc")
    assert doc.kind == "sections"
    assert [(m.name, m.sections) for m in doc.modes] == [
        ("Create", ("Drafting", "Finish")), ("Update", ("Finish",)), ("Validate", ())]
    shim = read_skill_files(MINI / "v6-shims" / "tiny-old")
    assert (shim.kind, shim.forward_to, shim.forward_intent) == ("shim", "tiny-doc", "create")


def test_the_spec_lists_activation_instructions_and_steps(mini: Path) -> None:
    """prepend/append entries of the customization are steps of their own, between activate and the chain."""
    (mini / "_bmad" / "custom" / "tiny-build.toml").write_text(
        '[workflow]\nactivation_steps_prepend = ["Check the branch."]\n'
        'activation_steps_append = ["Say hi.", "Wait."]\n', encoding="utf-8")
    spec = load_workflow(mini / "_bmad" / "mini" / "tiny-build", project_root=mini)
    chain = [s.id for s in spec.steps if s.meta.get("role") != "route"]  # a file a step routes to is a step too
    assert chain == ["activate", "prepend-1", "on-activation", "append-1", "append-2",
                     "step-01-route", "step-02-plan", "step-03-do", "step-04-review"]
    assert spec.format == "bmad-skill" and spec.step("append-2").meta["text"] == "Wait."


def _broken_copy(tmp_path: Path) -> Path:
    skill = tmp_path / "mini-skills" / "tiny-build"
    shutil.copytree(MINI / "tiny-build", skill)
    shutil.copy(MINI / "module.yaml", skill.parent / "module.yaml")
    plan = skill / "step-02-plan.md"
    plan.write_text(plan.read_text(encoding="utf-8").replace("step-03-do.md]]", "step-03-dox.md]]"), encoding="utf-8")
    review = skill / "step-04-review.md"
    review.write_text(review.read_text(encoding="utf-8").replace("{workflow.checks}", "{workflow.chekcs}")
                      .replace("references/guide.md", "references/gide.md"), encoding="utf-8")
    (skill / "step-09-orphan.md").write_text("# Orphan\n", encoding="utf-8")
    do = skill / "step-03-do.md"
    do.write_text(do.read_text(encoding="utf-8").replace("scripts/note.py", "scripts/nope.py"), encoding="utf-8")
    toml = skill / "customize.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('on_complete = ""', 'on_complete = ""\ntemplate = '
                                                             '"references/missing.md"'), encoding="utf-8")
    return skill


def test_lint_names_every_defect_with_file_and_line(tmp_path: Path) -> None:
    """Broken snapshot link, missing reference, unknown field, missing script, unreachable step, missing file."""
    skill = _broken_copy(tmp_path)
    diagnostics = lint_skill(skill, tmp_path)
    assert {d.code for d in diagnostics if d.severity == "warning"} == {"unreachable-step"}  # dead, not broken
    found = {(d.code, Path(d.path).name, d.line) for d in diagnostics}
    assert found == {
        ("broken-snapshot-link", "step-02-plan.md", 16),
        ("missing-file", "step-04-review.md", 3),
        ("unknown-field", "step-04-review.md", 5),
        ("missing-script", "step-03-do.md", 3),
        ("unreachable-step", "step-09-orphan.md", 1),
        ("missing-file", "customize.toml", 13),
        ("missing-script", "SKILL.md", 6),  # no _bmad/scripts here and no scripts/ folder in this tree
    }


def test_the_fixture_and_its_install_are_clean(mini: Path) -> None:
    """The installed mini module lints clean, and validate counts each kind."""
    diagnostics, counts = lint_tree(mini / "_bmad", project_root=mini)
    assert diagnostics == []
    assert counts == {"bmad-skill/sections": 1, "bmad-skill/shim": 1, "bmad-skill/step-files": 1}


def test_validate_cli_counts_and_fails_on_an_empty_tree(mini: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`stepline validate` prints what it checked; a folder with no workflow is an error (exit 10)."""
    assert run_cli(["validate", str(mini / "_bmad"), "--project-root", str(mini)]) == 0
    out = capsys.readouterr().out
    assert "checked 3 workflow(s): 1 bmad-skill/sections, 1 bmad-skill/shim, 1 bmad-skill/step-files" in out
    (tmp_path / "empty").mkdir()
    assert run_cli(["validate", str(tmp_path / "empty")]) == 10
    out = capsys.readouterr().out
    assert "no workflow found here" in out and "checked 0 workflow(s)" in out


@pytest.mark.corpus
def test_corpus_validates(v611: Path) -> None:
    """Every v6.11.0 skill, installed, lints without error; 49 skills of the three kinds are counted."""
    diagnostics, counts = lint_tree(v611 / "_bmad", project_root=v611)
    assert [str(d) for d in diagnostics if d.severity == "error"] == []
    assert counts == {"bmad-skill/sections": 26, "bmad-skill/shim": 18, "bmad-skill/step-files": 5}
    assert CORPUS_V611.is_dir()


def test_a_link_relative_to_the_skill_root_from_a_step_folder_is_followed(tmp_path: Path) -> None:
    """`./steps/step-02.md` written inside steps/step-01.md names the skill's steps/step-02.md (some releases
    write links from the skill root); frontmatter nextStepFile/altStepFile are links; a markdown link or a quoted
    path to an output document is not a link."""
    skill = tmp_path / "quick"
    (skill / "steps").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: quick\ndescription: d\n---\nFollow `./steps/step-01-a.md`.\n",
                                    encoding="utf-8")
    (skill / "steps" / "step-01-a.md").write_text(
        "# A\n\nSee [the overview](./overview.md) and \"./index.md\".\n\n## NEXT\n\nRead fully and follow "
        "`./steps/step-02-b.md`\n", encoding="utf-8")
    (skill / "steps" / "step-02-b.md").write_text("---\nnextStepFile: './step-03-c.md'\naltStepFile: "
                                                  "'./step-04-d.md'\n---\n# B\n", encoding="utf-8")
    (skill / "steps" / "step-03-c.md").write_text("# C\n", encoding="utf-8")
    (skill / "steps" / "step-04-d.md").write_text("# D\n", encoding="utf-8")
    files = read_skill_files(skill)
    assert files.steps["steps/step-01-a.md"].next == "steps/step-02-b.md"
    second = files.steps["steps/step-02-b.md"]  # frontmatter links, the micro-file way
    assert second.next == "steps/step-03-c.md" and [r.target for r in second.routes] == ["steps/step-04-d.md"]
    assert lint_skill(skill, tmp_path) == []


def test_a_path_in_a_reference_documents_prose_is_not_a_missing_file(tmp_path: Path) -> None:
    """Issue 25 (BMAD's TEA module): a knowledge document that mentions another workflow's step file
    (`step-05-gate-decision.md`, `src/workflows/x/steps-c/step-05.md`) is prose, not a file of the skill; a
    document the skill runs that names a missing file, or a reference that links `./` to one, still is."""
    skill = tmp_path / "tiny-ref"
    (skill / "resources" / "knowledge").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: tiny-ref\ndescription: A skill with knowledge.\n---\n\n"
                                    "## Work\n\nLoad `resources/knowledge/gates.md` and `resources/checklist.md`.\n",
                                    encoding="utf-8")
    (skill / "resources" / "knowledge" / "gates.md").write_text(
        "# Gates\n\nThe executed gate is `src/workflows/trace/steps-c/step-05-gate-decision.md`; see also\n"
        "`step-05-gate-decision.md` and a convention key in `step-02-discover-tests.md`.\n"
        "Then go on with `./step-09-next.md`.\n", encoding="utf-8")
    found = [(Path(d.path).name, d.line, d.message) for d in lint_skill(skill, tmp_path) if d.code == "missing-file"]
    assert found == [("SKILL.md", 8, "resources/checklist.md does not exist in the skill"),
                     ("gates.md", 5, "resources/knowledge/step-09-next.md does not exist in the skill")]
