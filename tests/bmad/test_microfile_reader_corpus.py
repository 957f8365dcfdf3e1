"""Tests for the BMAD micro-file reader against every micro-file workflow of the real corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepline.bmad import install_bmad
from stepline.bmad._microfile import lint_bmad_microfile, load_bmad_microfile, read_progress, resume_step_id
from stepline.formats._diagnostics import Diagnostic
from stepline.formats._frontmatter import read_frontmatter_file
from stepline.model import WorkflowSpec
from stepline.stepchain._state import mark_step_completed

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.0.0-alpha.23"
SAMPLES = CORPUS / "samples" / "sample-custom-modules"

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not CORPUS.is_dir(), reason="shared/corpus is not available"),
]


def _module_code(folder: Path) -> str:
    for line in (folder / "module.yaml").read_text(encoding="utf-8").splitlines():
        if line.startswith("code:"):
            return line.split(":", 1)[1].strip()
    return folder.name


def _installed_workflows() -> list[str]:
    """Paths, relative to ``_bmad/``, of every corpus ``workflow.md`` once installed."""
    if not CORPUS.is_dir():
        return []
    found = []
    for source in sorted(CORPUS.rglob("workflow.md")):
        rel = source.relative_to(CORPUS)
        if {"data", "templates"} & set(rel.parts):
            continue
        if rel.parts[:2] == ("src", "core"):
            found.append(str(Path("core", *rel.parts[2:])))
        elif rel.parts[:2] == ("src", "modules"):
            found.append(str(Path(*rel.parts[2:])))
        else:
            sample = SAMPLES / rel.relative_to(SAMPLES.relative_to(CORPUS)).parts[0]
            found.append(str(Path(_module_code(sample), *source.relative_to(sample).parts)))
    return found


WORKFLOWS = _installed_workflows()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with every corpus module (and the sample modules) installed under ``_bmad/``."""
    root = tmp_path_factory.mktemp("project")
    install_bmad(CORPUS, root)
    for sample in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
        install_bmad(sample, root)
    return root.resolve()


def load(project: Path, rel: str, mode: str | None = None) -> WorkflowSpec:
    return load_bmad_microfile(project / "_bmad" / rel, project_root=project, mode=mode)


def lint(project: Path, rel: str) -> list[Diagnostic]:
    return lint_bmad_microfile(project / "_bmad" / rel, project)


def test_corpus_has_the_micro_file_workflows() -> None:
    """The corpus holds the 20 micro-file workflow.md files (the other workflow*.md are templates/data)."""
    assert len(WORKFLOWS) == 20


@pytest.mark.parametrize("rel", WORKFLOWS)
def test_every_workflow_loads(project: Path, rel: str) -> None:
    """Each workflow loads, keeps no step body, points at real step files and survives a JSON round trip."""
    spec = load(project, rel)
    assert spec.format == "bmad-microfile"
    assert spec.steps
    assert all(s.body == "" and Path(s.meta["file"]).is_file() for s in spec.steps)
    assert spec.meta["first_step"] is not None or spec.meta["router"] is not None
    assert WorkflowSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize("rel", WORKFLOWS)
def test_every_mode_loads(project: Path, rel: str) -> None:
    """Each router option loads on its own and starts at its entry, or its missing entry is a broken chain."""
    router = load(project, rel).meta["router"]
    for option in router["options"] if router else []:
        spec = load(project, rel, mode=option["mode"])
        assert spec.meta["mode"] == option["mode"]
        if option["entry"] is not None:
            assert spec.meta["first_step"] == option["entry"]
            assert option["entry"] in {s.id for s in spec.steps}
        else:
            codes = {d["code"] for d in spec.meta["diagnostics"]}
            assert "broken-chain" in codes


@pytest.mark.parametrize("rel", WORKFLOWS)
def test_every_workflow_lints(project: Path, rel: str) -> None:
    """Lint runs on each workflow and every finding names an existing file and a plausible line."""
    for diagnostic in lint(project, rel):
        assert Path(diagnostic.path).is_file(), diagnostic
        assert diagnostic.line is None or diagnostic.line >= 1
        assert diagnostic.severity in ("error", "warning", "info")


def test_product_brief_chain(project: Path) -> None:
    """create-product-brief's chain is discovered as steps 1..6 in order, with 01b as the continuation."""
    spec = load(project, "bmm/workflows/1-analysis/create-product-brief/workflow.md")
    files = {s.meta["file"]: s for s in spec.steps}
    chain = [spec.step(spec.meta["first_step"])]
    while chain[-1].meta["next"] is not None:
        chain.append(files[chain[-1].meta["next"]])
    assert [s.id[:7] for s in chain] == [f"step-0{n}" for n in range(1, 7)]
    assert spec.meta["continuation_step"] == "step-01b-continue"
    assert spec.meta["router"] is None
    assert Path(spec.meta["template"]).is_file()
    assert spec.meta["output_file"].startswith(f"{project}/_bmad-output/planning-artifacts/product-brief-")


def test_product_brief_bodies_not_embedded(project: Path) -> None:
    """No line of any step body ends up in the loaded spec (just-in-time loading)."""
    spec = load(project, "bmm/workflows/1-analysis/create-product-brief/workflow.md")
    dumped = spec.model_dump_json()
    for step in spec.steps:
        body = read_frontmatter_file(Path(step.meta["file"])).body
        longest = max(body.splitlines(), key=len)
        assert json.dumps(longest)[1:-1] not in dumped


def test_product_brief_continuation(project: Path, tmp_path: Path) -> None:
    """A document made from the workflow's template and marked by the writer resumes at the right step."""
    spec = load(project, "bmm/workflows/1-analysis/create-product-brief/workflow.md")
    doc = tmp_path / "brief.md"
    text = Path(spec.meta["template"]).read_text(encoding="utf-8")
    doc.write_text(mark_step_completed(mark_step_completed(text, 1), 2), encoding="utf-8")
    assert read_progress(doc).steps_completed == (1, 2)
    assert resume_step_id(read_progress(doc), spec) == "step-03-users"


def test_prd_modes(project: Path) -> None:
    """The PRD tri-modal router offers C/V/E and each flag selects its own first step."""
    rel = "bmm/workflows/2-plan-workflows/prd/workflow.md"
    options = load(project, rel).meta["router"]["options"]
    assert [(o["mode"], o["key"]) for o in options] == [("create", "C"), ("validate", "V"), ("edit", "E")]
    assert load(project, rel, mode="-v").meta["first_step"] == "step-v-01-discovery"
    assert load(project, rel, mode="-e").meta["first_step"] == "step-e-01-discovery"
    assert load(project, rel, mode="-c").meta["first_step"] == "step-01-init"


def test_quick_dev_mode_branches(project: Path) -> None:
    """quick-dev's first step branches through nextStepFile_modeA/B instead of a single next."""
    step = load(project, "bmm/workflows/bmad-quick-flow/quick-dev/workflow.md").steps[0]
    assert step.meta["next"] is None
    assert set(step.meta["branches"]) == {"nextStepFile_modeA", "nextStepFile_modeB"}


def test_prose_only_chain(project: Path) -> None:
    """create-ux-design's steps have no frontmatter; the chain comes from their prose and reaches step 14."""
    spec = load(project, "bmm/workflows/2-plan-workflows/create-ux-design/workflow.md")
    files = {s.meta["file"]: s for s in spec.steps}
    step = spec.step(spec.meta["first_step"])
    seen = [step.id]
    while step.meta["next"] is not None:
        step = files[step.meta["next"]]
        seen.append(step.id)
    assert len(seen) == 14
    assert seen[-1].startswith("step-14")


def test_known_upstream_defects_are_reported(project: Path) -> None:
    """Defects present in the corpus are each reported with their code at the right file:line."""
    found = set()
    for rel in WORKFLOWS:
        for d in lint(project, rel):
            parts = Path(d.path).parts
            found.add((d.code, "/".join(parts[parts.index("_bmad") + 1 :]), d.line))
    expected = {
        ("yaml-syntax", "bmb/workflows/agent/steps-c/step-08-celebrate.md", 8),
        ("yaml-syntax", "bmm/workflows/2-plan-workflows/prd/steps-v/step-v-07-implementation-leakage-validation.md", 3),
        ("yaml-syntax", "bmb/workflows/workflow/steps-v/step-01-validate-max-mode.md", 5),
        ("self-loop", "bmad-custom/workflows/quiz-master/steps/step-04-q3.md", 10),
        ("unreachable-step", "bmad-custom/workflows/quiz-master/steps/step-05-q4.md", 1),
        ("unreachable-step", "bmm/workflows/1-analysis/research/market-steps/step-02-customer-behavior.md", 1),
        ("broken-chain", "bmb/workflows/module/workflow.md", 52),
        ("missing-file", "bmb/workflows/module/steps-b/step-13-review.md", 6),
        (
            "missing-file",
            "bmm/workflows/3-solutioning/check-implementation-readiness/steps/step-01-document-discovery.md",
            6,
        ),
        ("unknown-variable", "bmb/workflows/module/steps-c/step-06-workflows.md", 7),
    }
    assert expected <= found
    # workflow.md names only step-02 (`Load step:` in a late section), but step-01 leads to it: the chain starts
    # there (issue 25), so step-01 is not unreachable
    assert ("unreachable-step", "core/workflows/party-mode/steps/step-01-agent-loading.md", 1) not in found
    # the sample names its config as alpha.1x did ({project-root}/.bmad/mwm/config.yaml): installed, it names
    # _bmad, as BMAD's installer rewrites it (issue 25), so the config is found
    assert ("missing-config", "mwm/workflows/daily-checkin/workflow.md", 39) not in found
