"""Prompt caching (issue 21.1, R-X7): a run's requests share a byte-identical prefix, the Anthropic request marks
its cache breakpoint, and the cached tokens the providers report are recorded, priced and shown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fakes import fake_anthropic, fake_openai
from fakes.policy import Policy
from fakes.runs import memo_records
from stepline import Engine
from stepline.engine import build_timeline
from stepline.executors import STANDING_HINT, MenuOption, StepRequest
from stepline.executors._llm import build_prompt, protocol_tools
from stepline.interfaces.cli._app import run_cli
from stepline.model import StepSpec, WorkflowSpec


def _workflow() -> WorkflowSpec:
    return WorkflowSpec(id="notes", name="Notes", format="native", variables={"topic": "caching", "other": "x"},
                        steps=[StepSpec(id=f"s{n}", name=f"Section {n}", outputs=[f"out/s{n}.md"],
                                        body=f"Write section {n} about {{{{topic}}}}.") for n in range(1, 4)])


def test_the_shared_prefix_does_not_change_with_the_step() -> None:
    """Two requests of one run that differ in their step's text, kind, menu and variables: tools and the system
    text (protocol, the run's line, the run's standing instructions) are the same bytes; the step's part comes
    after them, in the user message."""
    standing = {STANDING_HINT: "**Goal:** notes that a reader trusts.\n\n## Configuration\n- user_name: Ada"}
    first = StepRequest(kind="work", run_id="r", step_id="a", title="A", content="Write about {topic}.",
                        workflow_id="wf", mode="yolo", variables={"topic": "t"},
                        hints={"outputs": ["out/a.md"], **standing})
    second = StepRequest(kind="choose", run_id="r", step_id="b", title="B", content="A much longer text " * 50,
                         workflow_id="wf", mode="yolo", menu=[MenuOption("C", "Continue")],
                         variables={"topic": "t", "more": "u"}, hints=standing)
    (system_a, user_a), (system_b, user_b) = build_prompt(first), build_prompt(second)
    assert system_a == system_b and "Workflow: wf." in system_a and "notes that a reader trusts" in system_a
    assert "- user_name: Ada" in system_a and "notes that a reader trusts" not in user_a
    assert user_a.startswith("# Step a: A") and user_b.startswith("# Step b: B")
    # a request without the standing text (a fresh context) still shares the protocol and the run's line
    bare = StepRequest(kind="work", run_id="r", step_id="c", title="C", workflow_id="wf", mode="yolo")
    assert system_a.startswith(build_prompt(bare)[0] + "\n\n")
    assert json.dumps(protocol_tools(), sort_keys=True) == json.dumps(protocol_tools(), sort_keys=True)


def test_only_the_variables_a_step_names_are_sent() -> None:
    """A variable is named as a placeholder, in code, or (a name that is no plain word) as a word; a plain word in
    prose (``name``, ``description``) is not the variable: its value stays out, its name is listed."""
    request = StepRequest(kind="work", run_id="r", step_id="a", title="A", workflow_id="wf",
                          content="Ask the user for a name and a description. Greet {user_name}; set `date`; "
                                  "write to output_folder.",
                          variables={"name": "wf-name", "description": "a long description " * 20,
                                     "user_name": "Ada", "date": "2026-01-01", "output_folder": "out",
                                     "spec_file": "x"})
    _, user = build_prompt(request)
    assert '"user_name": "Ada"' in user and '"date": "2026-01-01"' in user and '"output_folder": "out"' in user
    assert "a long description" not in user and "wf-name" not in user
    assert "Others set: description, name, spec_file" in user
    # the names the run's standing configuration shows are not named again
    configured = StepRequest(**{**request.to_dict(), "menu": [],
                                "hints": {STANDING_HINT: "Rules.\n\n## Configuration\n- name: wf-name\n- x: 1"}})
    assert "Others set: description, spec_file" in build_prompt(configured)[1]


def _run(tmp_path: Path, provider: str, server: Any, responder: Any, prices: dict[str, Any]) -> tuple[Engine, Any]:
    server.responder = responder(Policy())
    server.caching = True
    engine = Engine(project_root=tmp_path, executor=provider, mode="yolo",
                    executor_options={"base_url": server.base_url, "api_key": "test", "model": "fake",
                                      "prices": {"fake": prices}})
    run = asyncio.run(engine.start(_workflow()))
    assert run.status.value == "completed", run.error
    return engine, run


def test_anthropic_marks_its_cache_breakpoint_and_cached_tokens_are_recorded_and_priced(tmp_path: Path) -> None:
    with fake_anthropic.FakeAnthropic().running() as server:
        prices = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}
        engine, run = _run(tmp_path, "anthropic", server, fake_anthropic.responder, prices)
        requests = list(server.requests)
    assert all(r["system"][-1]["cache_control"] == {"type": "ephemeral"} for r in requests)
    usages = [record["result"]["usage"] for record in memo_records(engine, run, "anthropic")]
    assert usages[0]["cache_write_tokens"] > 0 and usages[0]["cache_read_tokens"] == 0
    assert all(u["cache_read_tokens"] > 0 and u["cache_write_tokens"] == 0 for u in usages[1:])
    assert all(u["input_tokens"] == 120 for u in usages)  # the whole prompt: the fake's, cached part included
    u = usages[1]
    uncached = u["input_tokens"] - u["cache_read_tokens"]
    expected = (uncached * 3.0 + u["output_tokens"] * 15.0 + u["cache_read_tokens"] * 0.3) / 1e6
    assert u["cost_usd"] == round(expected, 8)
    totals = build_timeline(engine.store.open(run.run_id))["usage"]
    assert sum(b["cache_read_tokens"] for b in totals.values()) == sum(u["cache_read_tokens"] for u in usages)


def test_openai_passes_the_run_as_cache_key_and_records_cached_tokens(tmp_path: Path, capsys: Any,
                                                                      monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with fake_openai.FakeOpenAI().running() as server:
        engine, run = _run(tmp_path, "openai", server, fake_openai.responder, {"input": 1.0, "output": 2.0})
        requests = list(server.requests)
    assert {r["prompt_cache_key"] for r in requests} == {run.run_id}
    usages = [record["result"]["usage"] for record in memo_records(engine, run, "openai")]
    assert usages[0]["cache_read_tokens"] == 0 and all(u["cache_read_tokens"] > 0 for u in usages[1:])
    assert all(u["input_tokens"] == 100 for u in usages)  # the fake's prompt_tokens: the whole prompt
    assert run_cli(["show", run.run_id, "-C", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cache read" in out and "cache write" in out


def test_show_prompt_prints_exactly_what_a_step_sent(tmp_path: Path, capsys: Any) -> None:
    """`stepline show RUN --prompt STEP` prints each of the step's requests: the system text and the messages as
    sent (the journal holds them, secrets redacted); an unknown step is one line, exit 3."""
    with fake_openai.FakeOpenAI().running() as server:
        _, run = _run(tmp_path, "openai", server, fake_openai.responder, {"input": 1.0, "output": 2.0})
        sent = [r for r in server.requests if "# Step s2:" in r["messages"][1]["content"]]
    assert run_cli(["show", run.run_id, "--prompt", "s2", "-C", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("=== request ") == len(sent) >= 1
    assert sent[0]["messages"][0]["content"] in out and sent[0]["messages"][1]["content"] in out
    assert run_cli(["show", run.run_id, "--prompt", "s2", "-C", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed[0]["messages"] == sent[0]["messages"][1:]
    assert printed[0]["system"] == sent[0]["messages"][0]["content"]
    assert run_cli(["show", run.run_id, "--prompt", "nope", "-C", str(tmp_path)]) == 3


CORPUS_ALPHA = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "bmad" / "v6.0.0-alpha.23"


def test_a_micro_file_run_sends_its_standing_text_once_per_request_in_the_shared_prefix(tmp_path: Path) -> None:
    """create-product-brief with the openai executor: every request's system message is the same bytes and holds
    workflow.md's goal and role, the rules every step file repeats and the run's configuration; no step's own part
    restates those rules, and each hand-over journals them as shared (left out of the step's text)."""
    import pytest

    from stepline.bmad import install_bmad
    from stepline.families import load_workflow

    if not CORPUS_ALPHA.is_dir():
        pytest.skip("shared/corpus is not available")
    project = (tmp_path / "shop").resolve()
    install_bmad(CORPUS_ALPHA, project, {"user_name": "Ada"})
    workflow = project / "_bmad/bmm/workflows/1-analysis/create-product-brief/workflow.md"
    with fake_openai.FakeOpenAI().running() as server:
        server.responder = fake_openai.responder(Policy())
        engine = Engine(project_root=project, executor="openai", mode="yolo",
                        executor_options={"base_url": server.base_url, "api_key": "test", "model": "fake"})
        run = asyncio.run(engine.start(load_workflow(workflow, project_root=project)))
        requests = list(server.requests)
    assert run.status.value == "completed", run.error
    systems = {m["content"] for r in requests for m in r["messages"] if m["role"] == "system"}
    assert len(requests) >= 6 and len(systems) == 1
    (system,) = systems
    assert "**Goal:** Create comprehensive product briefs" in system and "### Universal Rules:" in system
    assert "### Role Reinforcement:" in system and "- user_name: Ada" in system
    assert "WORKFLOW ARCHITECTURE" not in system and "INITIALIZATION" not in system  # the runtime's
    users = [m["content"] for r in requests for m in r["messages"] if m["role"] == "user"]
    assert not any("### Universal Rules:" in text for text in users)
    # step-06's own Role Reinforcement differs from the one the others repeat ("completion tone"): it stays its own
    assert [text for text in users if "### Role Reinforcement:" in text] == [
        text for text in users if "Maintain collaborative completion tone" in text]
    assert "Maintain collaborative discovery tone" in system
    handovers = [e.data["result"] for e in engine.store.open(run.run_id).events()
                 if e.type == "CallRecorded" and e.data["op"] == "handover" and e.data["result"].get("role") == "step"]
    assert handovers and all("Universal Rules:" in h["left_out"]["shared"] for h in handovers)


def test_paths_under_the_project_root_are_sent_relative_to_it() -> None:
    """The model is sent project-relative paths (the tools take them, commands run in the root): in the step's
    text, its context and the run's standing configuration; the root itself reads ``.``, a sibling folder and a
    path that merely contains the root's text keep theirs."""
    root = "/home/ada/shop"
    request = StepRequest(kind="work", run_id="r", step_id="a", title="A", workflow_id="wf",
                          content=f"Read `{root}/_bmad/x/spec-template.md`, then run `uv run {root}/scripts/m.py`. "
                                  f"Not `{root}-old/notes.md` nor `/mnt{root}/y.md`.",
                          context={"project_root": root, "step_file": f"{root}/_bmad/x/step-01.md"},
                          hints={STANDING_HINT: f"## Configuration\n- output_folder: {root}/_bmad-output\n"
                                                f"- project-root: {root}"})
    system, user = build_prompt(request)
    assert "Read `_bmad/x/spec-template.md`, then run `uv run scripts/m.py`" in user
    assert f"`{root}-old/notes.md`" in user and f"`/mnt{root}/y.md`" in user
    assert '"step_file": "_bmad/x/step-01.md"' in user
    assert "- output_folder: _bmad-output\n- project-root: ." in system and "relative to the project root" in system
    assert (system + user).count(root) == 2  # the sibling and the /mnt path only



def test_a_step_visited_again_sends_its_text_under_the_same_header() -> None:
    """The runtime's visit id (``step-01@2``) stays out of the prompt: the second visit's request starts with the
    same bytes as the first's, which a provider serves from its cache."""
    first = StepRequest(kind="work", run_id="r", step_id="step-01", title="step-01.md", content="Do it.",
                        workflow_id="wf", mode="yolo")
    again = StepRequest(**{**first.to_dict(), "menu": [], "step_id": "step-01@2"})
    assert build_prompt(first) == build_prompt(again)
    assert build_prompt(again)[1].startswith("# Step step-01: step-01.md\n")
