"""End to end: corpus BMAD workflows run to completion with the ``openai`` and ``anthropic`` executors in #yolo,
against the local fake servers whose deterministic fake model (``fakes.policy``) reads each request from the
prompt and answers with the step protocol's tool calls — the documents are written by those calls."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the shared fakes package

from conftest import CORPUS
from fakes import fake_anthropic, fake_openai
from fakes._script import Script
from fakes.policy import Policy
from fakes.runs import memo_records, run_dir
from stepline import Engine
from stepline.bmad import install_bmad
from stepline.engine import build_timeline
from stepline.families import load_workflow
from stepline.formats._frontmatter import read_frontmatter
from stepline.model import Run

BMAD = CORPUS / "bmad" / "v6.0.0-alpha.23"
EXTRAS = CORPUS / "bmad" / "extras"
CREATE_STORY = Path("_bmad/bmm/workflows/4-implementation/create-story/workflow.yaml")
BRIEF = Path("_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md")
#: The template sections create-story generates, in order.
STORY_SECTIONS = ["story_header", "story_requirements", "developer_context_section", "technical_requirements",
                  "architecture_compliance", "library_framework_requirements", "file_structure_requirements",
                  "testing_requirements", "project_context_reference", "story_completion_status"]
BRIEF_STEPS = ["step-01-init", "step-02-vision", "step-03-users", "step-04-metrics", "step-05-scope",
               "step-06-complete"]

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason="the corpus is not present")]


@dataclass(frozen=True)
class Provider:
    """One executor and its fake server: how the fake model is plugged in, and the usage each reply reports."""

    name: str
    server: Script
    base_url: str
    responder: Callable[..., Any]
    usage: tuple[int, int]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Provider]]:
    """Both fake servers, started once for the module."""
    with fake_openai.FakeOpenAI().running() as openai, fake_anthropic.FakeAnthropic().running() as anthropic:
        yield {"openai": Provider("openai", openai, openai.base_url, fake_openai.responder, (100, 20)),
               "anthropic": Provider("anthropic", anthropic, anthropic.base_url, fake_anthropic.responder, (120, 30))}


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest, servers: dict[str, Provider]) -> Provider:
    """Each executor in turn, its fake server reset."""
    chosen = servers[request.param]
    chosen.server.reset()
    return chosen


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus installed once (with the extra ``validate-workflow.xml`` task create-story invokes)."""
    root = tmp_path_factory.mktemp("installed") / "shop"
    install_bmad(BMAD, root, {"user_name": "Ada"})
    tasks = root / "_bmad" / "core" / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    shutil.copy2(EXTRAS / "validate-workflow.xml", tasks / "validate-workflow.xml")
    return root


@pytest.fixture
def project(installed: Path, tmp_path: Path) -> Path:
    """A private copy of the installed project."""
    root = tmp_path / "shop"
    shutil.copytree(installed, root)
    return root.resolve()


def run_with_fake_model(project: Path, workflow: Path, provider: Provider) -> tuple[Engine, Run, Policy]:
    """Run ``workflow`` in #yolo with the provider's executor, every model request answered by a fresh policy."""
    policy = Policy()
    provider.server.responder = provider.responder(policy, usage=provider.usage)
    engine = Engine(project_root=project, executor=provider.name, mode="yolo",
                    executor_options={"base_url": provider.base_url, "api_key": "test", "model": "fake"})
    run = asyncio.run(engine.start(load_workflow(project / workflow, project_root=project)))
    assert run.status.value == "completed", run.error
    assert policy.errors == []
    return engine, run, policy


def assert_usage_journaled(engine: Engine, run: Run, provider: Provider) -> None:
    """Every request the server answered is one ``memo:<provider>`` record with its usage; the timeline sums them."""
    requests = len(provider.server.requests)
    records = memo_records(engine, run, provider.name)
    assert len(records) == requests > 0
    input_tokens, output_tokens = provider.usage
    assert all(r["result"]["usage"]["input_tokens"] == input_tokens and r["result"]["usage"]["model"] == "fake"
               for r in records)
    usage = build_timeline(run_dir(engine, run))["usage"]
    assert sum(u["calls"] for u in usage.values()) == requests
    assert sum(u["input_tokens"] for u in usage.values()) == requests * input_tokens
    assert sum(u["output_tokens"] for u in usage.values()) == requests * output_tokens


def test_legacy_create_story_writes_its_story_through_model_tool_calls(project: Path, provider: Provider) -> None:
    """create-story (a legacy workflow.yaml with a template) completes: the model's answers fill the template's
    placeholders, its write_output calls fill the ten sections in order, and its usage is journaled."""
    engine, run, policy = run_with_fake_model(project, CREATE_STORY, provider)
    kinds = policy.kinds()
    assert kinds["generate"] == len(STORY_SECTIONS) and kinds["decide"] > 0 and kinds["answer"] > 0
    document = project / run.cursor["output"]
    assert document.name == "story_key-by-fake-model.md"  # the model's answer named the output file
    text = document.read_text(encoding="utf-8")
    assert "{{" not in text and "}}" not in text
    assert text.startswith("# Story epic_num-by-fake-model.story_num-by-fake-model")
    assert "As a role-by-fake-model,\nI want action-by-fake-model,\nso that benefit-by-fake-model." in text
    written = {name: f"{name} by the fake model: text for step step-5." for name in STORY_SECTIONS}
    positions = [text.index(section) for section in written.values()]
    assert positions == sorted(positions)
    rel = run.cursor["output"]
    assert {name: run.cursor[f"section:{rel}:{name}"] for name in STORY_SECTIONS} == written  # as sections
    assert_usage_journaled(engine, run, provider)


def test_microfile_product_brief_is_built_by_model_tool_calls(project: Path, provider: Provider) -> None:
    """create-product-brief (micro-file) completes: each step's write_output appends its section, each menu is
    answered with [C], stepsCompleted covers all six steps, and the usage is journaled. step-01-init's text hands
    the person one real question in a fresh run (``Confirm what you have found with the user … Only after this
    confirmation will you proceed``): its work up to it is one request, whose finish gives the model's answer as
    the user (#yolo: no answer request; journaled as the executor's answer, as one was), and the rest of the step
    is another; its route to step-01b-continue is only for a continuation, never taken."""
    engine, run, policy = run_with_fake_model(project, BRIEF, provider)
    assert [(r.step_id, r.kind) for r in policy.requests] == [
        ("step-01-init", "work"), *[(step, "work") for step in BRIEF_STEPS]]
    assert "set `choice` to `line 101: <the user's answer>`" in policy.requests[0].parts["Step instructions"]
    points = [e.data for e in run_dir(engine, run).events() if e.type == "CallRecorded" and e.data["op"] == "point"]
    assert [(p["args"]["line"], p["result"]) for p in points] == [
        (101, {"answer": "yes, as the fake model would answer", "by": "executor"})]
    assert run.steps["step-01b-continue"].status.value == "skipped"
    (document,) = (project / "_bmad-output" / "planning-artifacts").glob("product-brief-*.md")
    text = document.read_text(encoding="utf-8")
    front = read_frontmatter(text).data
    assert front["stepsCompleted"] == [1, 2, 3, 4, 5, 6] and front["lastStep"] == 6
    # the fake model writes a section in each work request, the turn up to step-01-init's question too (under the
    # step's own title: a step's requests share it and the step's text, for the provider's cache; the turn's stop
    # is in its notes after them)
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        "## step-01-init", *[f"## {s}" for s in BRIEF_STEPS]]
    assert "\n\n## This request\nA turn, up to line 101: " in policy.requests[0].parts["Step instructions"]
    for step in BRIEF_STEPS:
        assert f"Written by the fake model for step {step}." in text
    menus = [r.step_id for r in policy.requests if r.menu]
    assert menus and all(run.steps[step].choice == "C" for step in menus)
    assert_usage_journaled(engine, run, provider)
