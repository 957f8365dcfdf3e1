"""The result of a headless run (issue 16.5): the shape a skill's headless reference shows, filled from the
run's facts over the executor's own status, written to the run folder's result.json."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.executors import StepRequest, StepSession
from stepline.families import load_workflow, register_drivers
from stepline.skills._headless import ResultFacts, ResultShape, executor_status, fill_result, pick_shape, result_shapes

from .conftest import CORPUS_V611, Recorder

register_drivers()

TINY = Path("_bmad") / "mini" / "tiny-doc"
WORKSPACE = "out/work/docs/doc-1"


def _facts(tmp_path: Path, reported: dict[str, Any] | None = None, **variables: Any) -> ResultFacts:
    def render(text: str) -> str:
        for name, value in variables.items():
            text = text.replace("{" + name + "}", str(value))
        return text

    return ResultFacts(intent="create", render=render, exists=lambda p: (tmp_path / p).exists(), files=["a.md"],
                       reported=reported or {}, variables=variables)


SHAPE = ResultShape("Create", Path("headless.md"), 1, {
    "status": "complete", "intent": "create", "doc": "{doc_workspace}/doc.md", "memlog": "{doc_workspace}/.memlog.md",
    "findings": {"high": 0}, "offer_to_update": True, "open_questions": [], "assumptions": []})


def test_artifacts_on_disk_are_named_and_absent_ones_omitted(tmp_path: Path) -> None:
    """A path key is kept only when its file exists; lists default to empty, booleans stay, judgement fields the
    executor did not give are omitted; with nothing open the status is complete."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "doc.md").write_text("x", encoding="utf-8")
    result = fill_result(SHAPE, _facts(tmp_path, doc_workspace="ws"))
    assert result == {"status": "complete", "intent": "create", "doc": "ws/doc.md", "offer_to_update": True,
                      "open_questions": [], "assumptions": []}


def test_open_questions_make_it_partial_and_nothing_produced_blocked(tmp_path: Path) -> None:
    """The executor's open questions and counts are kept (partial); a run that produced none of the artifacts is
    blocked with a reason, whatever the executor claimed."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "doc.md").write_text("x", encoding="utf-8")
    reported = {"status": "complete", "open_questions": ["pricing?"], "findings": {"high": 2}, "doc": "/etc/passwd"}
    result = fill_result(SHAPE, _facts(tmp_path, reported, doc_workspace="ws"))
    assert result["status"] == "partial" and result["open_questions"] == ["pricing?"]
    assert result["findings"] == {"high": 2} and result["doc"] == "ws/doc.md"  # the path is the runtime's
    nothing = fill_result(SHAPE, _facts(tmp_path, {"status": "complete"}, doc_workspace="elsewhere"))
    assert nothing == {"status": "blocked", "intent": "create",
                       "reason": "the run produced none of the artifacts the headless reference names"}
    unresolved = fill_result(SHAPE, _facts(tmp_path))  # {doc_workspace} never set: no path can be named
    assert unresolved["status"] == "blocked"


def test_the_executors_status_is_the_last_json_object_it_gave() -> None:
    """A JSON object with a status inside the executor's prose is found; the last one counts."""
    texts = ["did it", 'Done. {"status": "partial", "assumptions": ["a"]} and {"x": 1}', None,
             '```json\n{"status": "blocked", "reason": "no topic"}\n```']
    assert executor_status(texts) == {"status": "blocked", "reason": "no topic"}
    assert executor_status(["no json {here"]) == {}


@pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_shapes_of_the_corpus_headless_references() -> None:
    """Shapes come from references/headless.md, the schema file it names, or SKILL.md's headless section; the
    shape is picked by the heading or the intent it shows."""
    src = CORPUS_V611 / "src"
    prd = result_shapes(src / "bmm-skills" / "plan" / "bmad-prd")
    assert [(s.heading, s.path.name) for s in prd] == [("Create", "headless-schemas.md"),
                                                       ("Update", "headless-schemas.md"),
                                                       ("Validate", "headless-schemas.md"),
                                                       ("Blocked", "headless-schemas.md")]
    assert pick_shape(prd, "update", False) is prd[1] and pick_shape(prd, "create", True) is prd[3]
    brief = result_shapes(src / "bmm-skills" / "plan" / "bmad-product-brief")
    assert [s.path.name for s in brief] == ["SKILL.md", "SKILL.md"]
    picked = pick_shape(brief, "validate", False)
    assert picked is not None and picked.template.get("offer_to_update") is True
    brainstorm = result_shapes(src / "core-skills" / "bmad-brainstorming")
    assert len(brainstorm) == 1 and brainstorm[0].template["intent"] == "brainstorm"
    assert result_shapes(src / "bmm-skills" / "ship" / "bmad-build") == []


class _Writer(Recorder):
    """Writes the document where Create binds it, and ends Finish with a JSON status, as the skill asks."""

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.kind == "work" and request.step_id == "section-drafting":
            await session.set_var("doc_workspace", WORKSPACE)
            await session.write_output("---\nstatus: draft\n---\n# Doc\n", path=f"{WORKSPACE}/doc.md", mode="replace")
        if request.kind == "work" and request.step_id == "section-finish":
            self.requests.append(request)
            await session.finish(summary='Finished. {"status": "complete", "open_questions": ["Who owns it?"], '
                                         '"assumptions": ["owner is the team"]}')
            return
        await super().perform(request, session)


@pytest.mark.parametrize("mode", ["yolo", "normal"])
def test_a_headless_run_writes_result_json(mini: Path, mode: str) -> None:
    """Unattended (#yolo), the end of tiny-doc writes result.json in the run folder in the Create shape of its
    references/headless.md, and journals it; a normal run (a person there) writes none."""
    engine = Engine(project_root=mini, executor=_Writer(), mode=mode)
    run = asyncio.run(engine.start(load_workflow(mini / TINY, project_root=mini)))
    assert run.status == "completed", run.error
    result_file = mini / ".stepline" / "runs" / run.run_id / "result.json"
    if mode == "normal":
        assert not result_file.exists()
        return
    result = json.loads(result_file.read_text(encoding="utf-8"))
    assert result == {"status": "partial", "intent": "create", "doc": f"{WORKSPACE}/doc.md",
                      "open_questions": ["Who owns it?"], "assumptions": ["owner is the team"]}
    journaled = [e.data for e in engine.store.open(run.run_id).events()
                 if e.type == "CallRecorded" and e.data["op"] == "result"]
    assert len(journaled) == 1 and journaled[0]["result"] == result
    assert journaled[0]["args"]["shape"].endswith("references/headless.md:7")


class _PrdWriter(Recorder):
    """Does what bmad-prd's Create asks that leaves files: binds the workspace, writes prd.md, seeds the memlog
    (runScript memlog.py init); reports no JSON status of its own."""

    async def perform(self, request: StepRequest, session: StepSession) -> None:
        if request.kind == "work" and request.step_id == "intent":
            await session.set_var("doc_workspace", PRD_WORKSPACE)
            await session.write_output("---\ntitle: Fake\nstatus: draft\n---\n# PRD\n", path=f"{PRD_WORKSPACE}/prd.md",
                                       mode="replace")
            await session.call_tool("runScript", {"script": "_bmad/scripts/memlog.py", "args": [
                "init", "--workspace", PRD_WORKSPACE, "--field", "topic=Fake"]})
        await super().perform(request, session)


PRD_WORKSPACE = "_bmad-output/planning-artifacts/prds/prd-fake"


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")
def test_bmad_prd_headless_result_in_its_create_shape(v611: Path) -> None:
    """bmad-prd unattended: result.json follows the Create shape of its assets/headless-schemas.md — the PRD and
    the memlog it produced, no addendum (not produced), empty judgement lists."""
    engine = Engine(project_root=v611, executor=_PrdWriter(), mode="yolo")
    run = asyncio.run(engine.start(load_workflow(v611 / "_bmad" / "bmm" / "plan" / "bmad-prd", project_root=v611)))
    assert run.status == "completed", run.error
    result = json.loads((v611 / ".stepline" / "runs" / run.run_id / "result.json").read_text(encoding="utf-8"))
    assert result == {"status": "complete", "intent": "create", "prd": f"{PRD_WORKSPACE}/prd.md",
                      "memlog": f"{PRD_WORKSPACE}/.memlog.md", "open_questions": [], "assumptions": [],
                      "external_handoffs": []}
