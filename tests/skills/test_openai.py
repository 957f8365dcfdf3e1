"""bmad-build (step files) and bmad-prd (sections) end to end with the openai executor against the local fake
OpenAI server, and bmad-prd killed with SIGKILL at three points and resumed: its memlog.py calls happen once."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import fake_openai
from fakes.policy import Call, Policy, Request, read_request
from stepline import Engine
from stepline.families import load_workflow, register_drivers
from stepline.model import Event
from stepline.skills._subagents import FILES_HEADING
from stepline.store import read_journal

from .conftest import CORPUS_V611

pytestmark = [pytest.mark.corpus,
              pytest.mark.skipif(not CORPUS_V611.is_dir(), reason="shared/corpus/bmad/v6.11.0 is not available")]

register_drivers()

CHILD = Path(__file__).with_name("crash_child.py")
WORKSPACE = "_bmad-output/planning-artifacts/prds/prd-by-fake-model"
MEMLOG = "_bmad/scripts/memlog.py"
BUILD = Path("_bmad/bmm/ship/bmad-build")
#: bmad-prd's steps in #yolo: Finalize ends the run (its "Common next: …; invoke `bmad-help` for authoritative
#: routing" suggests what the person may run next: no hand-over)
PRD_STEPS = ["activate", "on-activation", "intent", "section-discovery", "section-finalize"]
PRD = Path("_bmad/bmm/plan/bmad-prd")


class SkillPolicy(Policy):
    """The fake model, doing what a skill's step says about its memlog: ``memlog.py init`` once where the step
    says to seed it, ``memlog.py append`` where the step says to record something (with the runScript tool)."""

    def _first(self, request: Request, tools: dict[str, dict[str, Any]]) -> list[Call]:
        calls = super()._first(request, tools)
        text = request.parts.get("Step instructions", "")
        if request.kind != "work" or "call_tool" not in tools or "Do this step's work up to" in text:
            return calls  # a turn up to one of the step's points: the memlog is the step's last request's
        if "memlog.py init" in text:
            calls += [("set_var", {"name": "doc_workspace", "value": WORKSPACE}),
                      ("call_tool", {"name": "runScript", "args": {"script": MEMLOG, "args": [
                          "init", "--workspace", WORKSPACE, "--field", "topic=Fake product"]}})]
        elif "memlog.py append" in text:
            calls.append(("call_tool", {"name": "runScript", "args": {"script": MEMLOG, "args": [
                "append", "--workspace", WORKSPACE, "--type", "event", "--text", f"{request.step_id} done"]}}))
        return calls


@pytest.fixture(scope="module")
def server() -> Iterator[fake_openai.FakeOpenAI]:
    """The fake OpenAI server, started once for the module."""
    with fake_openai.FakeOpenAI().running() as running:
        yield running


def _use(server: fake_openai.FakeOpenAI) -> SkillPolicy:
    server.reset()
    policy = SkillPolicy()
    server.responder = fake_openai.responder(policy)
    return policy


def _events(project: Path, run_id: str) -> list[Event]:
    return list(read_journal(project / ".stepline" / "runs" / run_id / "journal.jsonl"))


def _run(project: Path, skill: Path, server: fake_openai.FakeOpenAI) -> tuple[str, list[Event]]:
    engine = Engine(project_root=project, executor="openai", mode="yolo",
                    executor_options={"base_url": server.base_url, "api_key": "test", "model": "fake"})
    run = asyncio.run(engine.start(load_workflow(project / skill, project_root=project)))
    assert run.status.value == "completed", run.error
    return run.run_id, _events(project, run.run_id)


#: A turn of a step's plan says where it stops in its notes after the step's text (its title is the step's own).
_TURN = re.compile(r"^## This request\nA turn, (up to line \d+|at line \d+ again)", re.M)


def _turn(request: Request) -> str | None:
    """Where a turn of the step's plan stops (``up to line N``), or None for the step's own request."""
    found = _TURN.search(request.parts.get("Step instructions", ""))
    return found[1] if found else None


def _brief(request: Request) -> tuple[str, str]:
    """A request in short: its step and its title's end (a step file) or its turn's stop (``up to line N``), an
    answer its line."""
    asked = re.fullmatch(r"answer as the user: [\w.-]+\.md:(\d+)", request.title)
    return request.step_id, f"answer line {asked[1]}" if asked else _turn(request) or request.title.split(" — ")[-1]


def _titles_by_invocation(events: list[Event], step_id: str) -> list[str]:
    """The titles of a step's executor requests in the order the runtime numbered them (journal keys
    ``<step>/<attempt>/<invocation>/<call>``), read from each request's first model turn as journaled."""
    first: dict[int, str] = {}
    for event in events:
        if event.type == "CallRecorded" and event.step_id == step_id and event.data["op"] == "memo:openai":
            invocation = int(event.data["key"].split("/")[2])
            prompt = event.data["args"]["payload"]["prompt"]["messages"][0]["content"]
            request = read_request(prompt)
            first.setdefault(invocation, " — ".join(filter(None, [request.title, _turn(request)])))
    return [first[n] for n in sorted(first)]


def _handovers_in_turn(events: list[Event]) -> list[str]:
    """The step files handed over, checking each is handed over by its own step, after that step started."""
    started: set[str] = set()
    handed: list[str] = []
    for event in events:
        if event.type == "WorkflowStepStarted":
            started.add(str(event.step_id))
        if event.type == "CallRecorded" and event.data["op"] == "handover" and event.data["args"]["role"] == "step":
            name = Path(event.data["args"]["path"]).stem
            assert name in started and str(event.step_id).split("@")[0] == name, f"{name} handed over before its turn"
            if not handed or handed[-1] != name:  # a step continued after a route it took is handed over again
                handed.append(name)
    return handed


def test_bmad_build_with_the_openai_executor(v611: Path, server: fake_openai.FakeOpenAI) -> None:
    """Every step file of the default chain reaches the model in its turn, routes are the model's decides, and
    the journal holds the customization used."""
    policy = _use(server)
    _, events = _run(v611, BUILD, server)
    assert _handovers_in_turn(events) == ["step-01-clarify-and-route", "step-02-plan", "step-03-implement",
                                          "step-04-review", "step-05-present"]
    assert policy.errors == []
    # The requests in order (the activation is all runtime mechanics: no request). Each step file's plan is followed
    # first: a turn up to the next point that applies, the points under a condition before it offered in the same
    # turn (one turn per stop; the fake model, taking the first choice, says none of those conditions holds); a
    # route it takes (compile-epic-context.md, sync-sprint-status.md) runs as the next step, then the step goes on
    # after it (a visit ``@2`` in the journal, its requests under the step's own id, as the first visit's: the
    # provider's cache serves the step's text); a question is answered as the user (#yolo) in the finish of the turn
    # that stops at it (step-05's offer to push: no answer request). Then the step's own request: step-02's
    # checkpoint choice acted on, step-04's three review layers as subagents and its continuation. Issue 21: the
    # prose conditions of the checkpoints, the [A]/[E] checkpoint answered as the user and step-01's three other
    # routes and step-04's two loops back are all said in the finish of the step's own request: no decide.
    briefs = [_brief(r) for r in policy.requests]
    layered = [i for i, (_, title) in enumerate(briefs) if title.startswith("subagent:")]  # sent at once: any order
    briefs[layered[0]:layered[-1] + 1] = sorted(briefs[layered[0]:layered[-1] + 1])
    assert briefs == [
        ("step-01-clarify-and-route", "up to line 32"),
        ("route-compile-epic-context", "compile-epic-context.md (routed to)"),
        ("step-01-clarify-and-route", "up to line 64"),
        ("step-01-clarify-and-route", "step-01-clarify-and-route.md"),
        ("step-02-plan", "up to line 14"), ("step-02-plan", "step-02-plan.md"),
        ("step-02-plan", "[A] Approve at step-02-plan.md:38"),
        ("step-03-implement", "up to line 15"), ("route-sync-sprint-status", "sync-sprint-status.md (routed to)"),
        ("step-03-implement", "up to line 45"), ("step-03-implement", "step-03-implement.md"),
        ("step-04-review", "up to line 25"), ("step-04-review", "step-04-review.md"),
        ("step-04-review", "subagent: Blind Hunter"), ("step-04-review", "subagent: Edge Case Hunter"),
        ("step-04-review", "subagent: Verification Gap Reviewer"), ("step-04-review", "step-04-review.md"),
        ("step-05-present", "up to line 55"), ("route-sync-sprint-status", "sync-sprint-status.md (routed to)"),
        ("step-05-present", "up to line 67"), ("step-05-present", "step-05-present.md")]
    points = [(e.data["key"].split("/")[0], e.data["args"]["line"], e.data["result"]) for e in events
              if e.type == "CallRecorded" and e.data["op"] == "point"]
    assert points == [("step-05-present@2", 67, {"answer": "[Y] Yes", "by": "executor"})]  # journaled as before
    recorded = [(e.data["op"], e.data["key"].split("/")[0].split("@")[0], e.data["result"]) for e in events
                if e.type == "CallRecorded" and e.data["op"] in ("checkpoint-condition", "checkpoint")]
    # the step's own requests (not its turns up to the points of its plan)
    own = [r for r in policy.requests if r.kind == "work" and _turn(r) is None]
    assert [(op, step, r.get("holds", r.get("choice")), r["by"]) for op, step, r in recorded] == [
        ("checkpoint-condition", "step-01-clarify-and-route", False, "executor"),
        ("checkpoint-condition", "step-02-plan", False, "executor"), ("checkpoint", "step-02-plan", "A", "executor")]
    assert "named a later stop ('line 38: [A]')" in recorded[1][2]["reason"]  # step-02's first stop: the [A]/[E]
    assert recorded[2][2]["asked"] == "in the finish of the step's work"
    plan = next(r for r in own if r.step_id == "step-02-plan")
    assert plan.choices == ["line 38: [A]", "line 38: [E]", "line 17: [S]", "line 17: [K]"] and not plan.menu
    routes = {e.data["key"].split("/")[0].split("@")[0]: e.data["result"] for e in events
              if e.type == "CallRecorded" and e.data["op"] == "route"}
    assert routes["step-01-clarify-and-route"]["by"] == routes["step-04-review"]["by"] == "executor"
    assert "chose the step's NEXT" in routes["step-04-review"]["reason"]
    offered = [r for r in own if "Where this step leaves" in r.parts["Step instructions"]]
    assert [(r.step_id, r.choices) for r in offered] == [
        ("step-01-clarify-and-route", ["next", "step-03-implement.md", "step-04-review.md", "step-oneshot.md",
                                       "line 85: [S]", "line 85: [K]"]),
        ("step-04-review", ["next", "step-02-plan.md", "step-03-implement.md"])]
    activation = next(e.data for e in events if e.type == "CallRecorded" and e.data["op"] == "handover"
                      and e.data["result"]["role"] == "activation")["result"]
    assert activation["requested"] is False and len(activation["left_out"]["runtime"]) == 3
    custom = next(e.data for e in events if e.type == "CallRecorded" and e.data["op"] == "customization")
    assert [layer["id"] for layer in custom["result"]["values"]["review_layers"]] == [
        "blind-hunter", "edge-case-hunter", "verification-gap"]
    layers = ["subagent: Blind Hunter", "subagent: Edge Case Hunter", "subagent: Verification Gap Reviewer"]
    # The layers' requests are sent at once (parallel subagents): the order they reach the model is the scheduler's
    # and not checked. What is deterministic: they come between the step's request and its continuation, and they
    # are numbered in the layers' order (the journal's keys, the same on a resume), their results in that order.
    review = [r for r in own if r.step_id == "step-04-review"]
    assert [review[0].title, sorted(r.title for r in review[1:-1]), review[-1].title] == [
        "step-04-review.md", layers, "step-04-review.md"]
    assert _titles_by_invocation(events, "step-04-review") == [
        "step-04-review.md — up to line 25", "step-04-review.md", *layers, "step-04-review.md"]
    # the continuation repeats the step's request word for word (a cache hit), the layers' results after it
    after = review[-1].parts["Step instructions"]
    assert after.startswith(review[0].parts["Step instructions"]) and "## After the subagents" in after
    assert re.findall(r"^#### (.+?) \(`[^`]+`\) — its subagent returned:$", after, re.M) == [
        layer.removeprefix("subagent: ") for layer in layers]
    # the layer's instruction from customize.toml, rendered
    hunter = next(r for r in review if r.title == "subagent: Edge Case Hunter").parts["Step instructions"]
    # the path as the model's tools take it: relative to the project root (issue 21), nowhere absolute
    assert "Read `_bmad/bmm/ship/bmad-build/review-prompts/edge-case-hunter.md`" in hunter
    # the file it says to read comes with it, as the project holds it: no round trip to read it
    named = "_bmad/bmm/ship/bmad-build/review-prompts/edge-case-hunter.md"
    said = (v611 / named).read_text(encoding="utf-8").strip()
    assert hunter.endswith(f"\n\n{FILES_HEADING}\n### `{named}`\n{said}")
    assert not [r.step_id for r in policy.requests if str(v611) in json.dumps(r.parts)]
    assert "diff_output by the fake model" in hunter  # the value the step set for its layers
    assert "# Step 5" not in review[0].parts["Step instructions"] + review[-1].parts["Step instructions"]


def test_bmad_prd_with_the_openai_executor(v611: Path, server: fake_openai.FakeOpenAI) -> None:
    """bmad-prd's sections run as steps: Create decided from the empty disk, the memlog seeded and appended to
    through runScript by the model, in the format memlog.py writes."""
    policy = _use(server)
    _, events = _run(v611, PRD, server)
    done = [e.step_id for e in events if e.type == "WorkflowStepCompleted"]
    assert done == PRD_STEPS
    assert policy.errors == []
    contexts = [json.loads(r.parts["Context"]) for r in policy.requests if r.kind == "work" and ":" not in r.step_id]
    named = {str(c.get("headless_reference")) for c in contexts}  # #yolo is headless: the skill's own reference
    assert len(named) == 1 and named.pop().endswith(str(PRD / "references" / "headless.md"))
    memlog = (v611 / WORKSPACE / ".memlog.md").read_text(encoding="utf-8")
    assert memlog.startswith("---\ntopic: Fake product\nupdated: ")
    assert memlog.endswith("\n---\n\n- (event) section-finalize done\n")


def _child(project: Path, server: fake_openai.FakeOpenAI, pattern: str, n: int, *args: str
           ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test",
           "STEPLINE_OPENAI_MODEL": "fake"}
    return subprocess.run([sys.executable, str(CHILD), pattern, str(n), "--", *args, "-C", str(project), "-q"],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.slow
@pytest.mark.parametrize(("pattern", "n", "where"), [
    ('"name":"runScript"', 2, "just after memlog init's result was journaled"),
    ('"step_id":"section-finalize"', 1, "as Finalize starts, before its memlog append"),
    ('"name":"runScript"', 4, "just after the append's result was journaled, before Finalize completed"),
])
def test_sigkill_then_resume_runs_each_script_once(v611: Path, server: fake_openai.FakeOpenAI, pattern: str,
                                                   n: int, where: str) -> None:
    """Killed at each point, `stepline resume` finishes the run; memlog.py's init and append ran once each."""
    _use(server)
    first = _child(v611, server, pattern, n, "run", str(PRD), "--executor", "openai", "--yolo")
    assert first.returncode == -signal.SIGKILL, (where, first.stdout, first.stderr)
    runs = [p.name for p in (v611 / ".stepline" / "runs").iterdir() if p.is_dir() and p.name.startswith("run-")]
    assert len(runs) == 1, runs
    run_id = runs[0]
    resumed = _child(v611, server, "-", 0, "resume", run_id)
    assert resumed.returncode == 0, (where, resumed.returncode, resumed.stdout, resumed.stderr,
                                     [(e.type, e.step_id, e.data) for e in _events(v611, run_id)[-4:]])
    events = _events(v611, run_id)
    assert events[-1].type == "WorkflowCompleted"
    scripts = [json.dumps(e.data["args"]["args"]["args"][:1]) for e in events
               if e.type == "CallStarted" and e.data["args"]["name"] == "runScript"]
    assert scripts == ['["init"]', '["append"]'], where
    memlog = (v611 / WORKSPACE / ".memlog.md").read_text(encoding="utf-8")
    assert memlog.count("- (event) section-finalize done") == 1 and memlog.count("topic: Fake product") == 1
    completed = [e.step_id for e in events if e.type == "WorkflowStepCompleted"]
    assert completed == PRD_STEPS, where
