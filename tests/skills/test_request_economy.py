"""The prompt economy of every step-file skill of v6.11.0 (SPEC R-X7), run with a model executor against the fake
servers: a run's requests start with the same bytes (the tools, then the system text: the protocol, the skill's
standing instructions and configuration), long enough for a provider to cache; a step's request carries none of
the control prose the runtime owns; the anthropic executor marks its cache breakpoint at the end of that prefix.
The ratio against the same workflow run as prompts is measured by bench/prompt_economy.py, not asserted here."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

from fakes import fake_anthropic, fake_openai
from fakes.policy import Policy, read_request
from stepline import Engine
from stepline.executors import NOTES_HEADING
from stepline.families import load_workflow, workflows_of_kind
from stepline.stepchain._lean_text import lean_step_text


def _skills(installed: Path) -> list[Path]:
    """The step-file skills, as `stepline validate` counts them (all five of v6.11.0, none left out silently)."""
    found = workflows_of_kind(installed / "_bmad", "bmad-skill/step-files")
    assert len(found) == 5, found
    return [path.relative_to(installed) for path in found]


def _run(installed: Path, skill: Path, where: Path, provider: str, server: Any, responder: Any) -> list[Any]:
    """``skill`` run in #yolo with ``provider`` against ``server`` in a fresh copy of the installed project; the
    requests the server got."""
    return _run_with_engine(installed, skill, where, provider, server, responder)[2]


def _run_with_engine(installed: Path, skill: Path, where: Path, provider: str, server: Any,
                     responder: Any) -> tuple[Engine, Any, list[Any]]:
    project = where / skill.name
    shutil.copytree(installed, project)
    server.responder = responder(Policy())
    engine = Engine(project_root=project, executor=provider, mode="yolo",
                    executor_options={"base_url": server.base_url, "api_key": "test", "model": "fake"})
    run = asyncio.run(engine.start(load_workflow(project / skill, project_root=project)))
    assert run.status.value == "completed", (skill, run.error)
    requests = list(server.requests)
    server.requests.clear()
    return engine, run, requests


def _user(request: dict[str, Any]) -> str:
    content = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return content if isinstance(content, str) else "".join(block["text"] for block in content)


def test_every_request_of_a_skill_run_starts_with_the_same_cacheable_prefix(_corpus_install: Path, tmp_path: Path,
                                                                          prompt_economy: ModuleType) -> None:
    """Each of the five skills: every request's tools and system text are the same bytes, and every request after
    the first shares with an earlier one a prefix a provider caches (at least its minimum, in its steps)."""
    bench = prompt_economy
    with fake_openai.FakeOpenAI().running() as server:
        for skill in _skills(_corpus_install):
            requests = _run(_corpus_install, skill, tmp_path, "openai", server, fake_openai.responder)
            heads = {json.dumps([r["tools"], r["messages"][0]], sort_keys=True) for r in requests}
            assert len(heads) == 1, f"{skill.name}: the tools or the system text differ between requests"
            assert requests[0]["messages"][0]["role"] == "system"
            assert "## Standing instructions of this workflow" in requests[0]["messages"][0]["content"]
            prompts = [bench._text(r) for r in requests]
            assert len(prompts) >= 3
            served = [bench.cached_prefix(prompts, index) for index in range(1, len(prompts))]
            assert min(served) >= bench.CACHE_MIN_CHARS, (skill.name, served)


def test_a_step_request_holds_none_of_the_control_prose_the_runtime_owns(_corpus_install: Path,
                                                                        tmp_path: Path) -> None:
    """Each step request (of every skill): no section the runtime owns (the step file's menu, its NEXT, its
    completion note), and none of the run's standing text again; each skill's run has step requests to check."""
    with fake_openai.FakeOpenAI().running() as server:
        for skill in _skills(_corpus_install):
            requests = _run(_corpus_install, skill, tmp_path, "openai", server, fake_openai.responder)
            system = requests[0]["messages"][0]["content"]
            standing = system.split("## Standing instructions of this workflow (for every step)\n", 1)[1]
            checked = 0  # sections the runtime owns that its step requests could have held
            for request in requests:
                user = _user(request)
                for block in standing.split("\n\n"):  # the standing text is not restated in a step's own part
                    assert len(block) < 60 or block not in user, (skill.name, block)
                step_file = json.loads(read_request(user).parts.get("Context", "{}")).get("step_file")
                if step_file is None or read_request(user).title.startswith("subagent: "):
                    continue
                lean = lean_step_text((tmp_path / skill.name / step_file).read_text(encoding="utf-8"))
                for heading in lean.sections:
                    assert not re.search(rf"(?m)^#+\s+{re.escape(heading)}\s*$", user), (step_file, heading)
                checked += len(lean.sections)
            assert checked >= 2, f"{skill.name}: too few sections the runtime owns were there to be left out"


def test_the_repeated_rules_of_a_skill_s_step_files_go_once_in_the_system_text(_corpus_install: Path,
                                                                                tmp_path: Path) -> None:
    """create-epics-and-stories restates its Universal Rules in its step files: every request's system text holds
    them once; the step requests whose file says them word for word do not (the two whose rules differ keep their
    own), and those steps' hand-overs journal them as shared."""
    skill = next(s for s in _skills(_corpus_install) if s.name == "bmad-create-epics-and-stories")
    with fake_openai.FakeOpenAI().running() as server:
        engine, run, requests = _run_with_engine(_corpus_install, skill, tmp_path, "openai", server,
                                                 fake_openai.responder)
    assert all(r["messages"][0]["content"].count("### Universal Rules:") == 1 for r in requests)
    steps = {read_request(_user(r)).step_id: _user(r) for r in requests}
    assert "Process epics sequentially" in steps["step-03-create-stories"]  # its own rules, not the shared ones
    assert "### Universal Rules:" not in steps["step-01-validate-prerequisites"] + steps["step-02-design-epics"]
    shared = {e.data["args"]["path"].rsplit("/", 1)[-1]: e.data["result"]["left_out"]["shared"]
              for e in engine.store.open(run.run_id).events()
              if e.type == "CallRecorded" and e.data["op"] == "handover" and e.data["result"].get("role") == "step"}
    assert shared["step-01-validate-prerequisites.md"] == shared["step-02-design-epics.md"] == ["Universal Rules:"]
    assert shared["step-03-create-stories.md"] == []


def test_anthropic_marks_its_cache_breakpoint_at_the_end_of_the_shared_prefix(_corpus_install: Path, tmp_path: Path,
                                                                              prompt_economy: ModuleType) -> None:
    """A skill with subagents (code-review) run with the anthropic executor: each layer's subagent is one request;
    every request sends the same tools and the same one system block, which carries the run's first cache
    breakpoint; what the breakpoint caches (the tools and the system text) is at least a provider's minimum. A
    request whose step's text another request of the step sends again (the turns of its plan, the continuation after
    its subagent layers) marks a second breakpoint at the end of that text: the marked text is the same bytes in
    each request of the step (the first writes it to the cache, the others read it), the runtime's notes to one
    request after it; no other request marks one."""
    bench = prompt_economy
    skill = next(s for s in _skills(_corpus_install) if s.name == "bmad-code-review")
    with fake_anthropic.FakeAnthropic().running() as server:
        requests = _run(_corpus_install, skill, tmp_path, "anthropic", server, fake_anthropic.responder)
    subagents = [read_request(_user(r)).title for r in requests if "# Step step-02-review: subagent: " in _user(r)]
    assert len(subagents) == len(set(subagents)) >= 3  # each layer once, though the step names its token twice
    assert len({json.dumps([r["tools"], r["system"]], sort_keys=True) for r in requests}) == 1
    (block,) = requests[0]["system"]
    assert block["cache_control"] == {"type": "ephemeral"} and "## Standing instructions" in block["text"]
    assert len(json.dumps(requests[0]["tools"], sort_keys=True)) + len(block["text"]) >= bench.CACHE_MIN_CHARS
    assert not any("cache_control" in tool for tool in requests[0]["tools"])
    marked: dict[str, list[str]] = {}  # per step: the user message up to its breakpoint, in each request
    for request in requests:
        first, *rest = request["messages"]
        assert "cache_control" not in json.dumps(rest)  # the model's turns and the tool results carry none
        if isinstance(first["content"], str):
            continue
        head, tail = first["content"]
        assert head["cache_control"] == {"type": "ephemeral"} and "cache_control" not in tail
        assert tail["text"].startswith(f"\n\n{NOTES_HEADING}\n")  # this request's notes follow the step's text
        marked.setdefault(read_request(head["text"]).step_id, []).append(head["text"])
    # step-01's and step-04's turns, step-02's continuation after its layers
    assert {step for step, texts in marked.items() if len(texts) > 1} >= {
        "step-01-gather-context", "step-02-review", "step-04-present"}, marked.keys()
    assert all(len(set(texts)) == 1 for texts in marked.values()), {
        step: [text[:300] for text in texts] for step, texts in marked.items() if len(set(texts)) > 1}
    continued = [text for text in map(_user, requests)
                 if text.startswith("# Step step-02-review: ") and "## After the subagents" in text]
    assert continued and all(text.startswith(marked["step-02-review"][0]) for text in continued)


def test_a_subagent_gets_the_project_files_its_instruction_says_to_read(tmp_path: Path) -> None:
    """``Read `x.md` ``: a file in the project comes with the instruction, under its heading; one outside the
    project (a path or a symlink), missing, a folder or not UTF-8 is left to the subagent, which reports it."""
    from stepline.skills._subagents import FILES_HEADING, with_files_read

    root = tmp_path / "shop"
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "hunter.md").write_text("# Hunter\n\nFind edge cases.\n", encoding="utf-8")
    (root / "prompts" / "binary.md").write_bytes(b"\xff\xfe bad")
    (tmp_path / "secret.md").write_text("outside", encoding="utf-8")
    (root / "prompts" / "link.md").symlink_to(tmp_path / "secret.md")
    given = ("Read `prompts/hunter.md` completely and follow it. Then read `prompts/hunter.md` again, and "
             f"Read `../secret.md`, Read `prompts/link.md`, Read `prompts/none.md`, Read `prompts`, "
             f"Read `prompts/binary.md`, Read `{root}/prompts/hunter.md`.")
    sent = with_files_read(root, given)
    assert sent == f"{given}\n\n{FILES_HEADING}\n### `prompts/hunter.md`\n# Hunter\n\nFind edge cases."  # once
    assert "outside" not in sent
    assert with_files_read(root, "Review the diff.") == "Review the diff."
