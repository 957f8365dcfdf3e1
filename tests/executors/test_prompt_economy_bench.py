"""bench/prompt_economy.py: each provider's billing as documented (Anthropic: breakpoints, 1.25x writes, 0.1x reads,
1x after the last breakpoint; OpenAI: any repeated prefix at 0.1x, no write premium), the simulated prompt-run (the
subagents a step launches are fresh conversations of their own, the files they name read, its last block the
moving breakpoint) and the captured Claude Code fixed part it can start from."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from stepline.executors import StepRequest
from stepline.executors._llm import build_prompt
from stepline.skills._subagents import with_files_read

BIG = "x" * 5000  # above the 4,096 characters (1,024 tokens) a provider caches from


def _sent(request: StepRequest) -> dict[str, object]:
    system, user = build_prompt(request)
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_anthropic_bills_the_prefix_up_to_its_breakpoint_and_reads_it_where_an_earlier_request_wrote_it(
        prompt_economy: ModuleType) -> None:
    bench = prompt_economy
    first = [(BIG, True), ("a" * 100, False)]
    second = [(BIG, True), ("b" * 300, False)]
    written: set[str] = set()
    assert bench.anthropic_cost(first, written) == (5000 * 1.25 + 100, 0, 5000)  # written, the rest at 1x
    assert bench.anthropic_cost(second, written) == (5000 * 0.1 + 300, 5000, 0)  # read
    # a breakpoint on a prefix below the minimum caches nothing: all of it at the base price
    assert bench.anthropic_cost([("c" * 100, True), ("d" * 50, False)], set()) == (150.0, 0, 0)
    # no breakpoint: nothing cached, however often the prefix repeats
    assert bench.anthropic_cost([(BIG, False)], written) == (5000.0, 0, 0)


def test_anthropic_finds_an_earlier_entry_up_to_20_blocks_before_a_breakpoint(prompt_economy: ModuleType) -> None:
    """A moving breakpoint at the conversation's end reads the previous request's entry when it added up to 20
    blocks, and writes only what came after it; further back nothing is found."""
    bench = prompt_economy
    written: set[str] = set()
    head = [(BIG, False)]
    bench.anthropic_cost([*head, ("turn 1", True)], written)
    grown = [*head, ("turn 1", False), *(("more", False),) * 19, ("last", True)]
    billed, read, wrote = bench.anthropic_cost(grown, set(written))
    assert (read, wrote) == (5006, 4 * 19 + 4) and billed == pytest.approx(5006 * 0.1 + 80 * 1.25)
    too_far = [*head, ("turn 1", False), *(("more", False),) * 20, ("last", True)]
    assert bench.anthropic_cost(too_far, set(written))[1] == 0


def test_openai_reads_any_repeated_prefix_in_steps_and_charges_no_write_premium(prompt_economy: ModuleType) -> None:
    bench = prompt_economy
    figures = bench.openai_figures([[(BIG, False), ("a", False)], [(BIG, False), ("b" * 99, False)]])
    read = 5000 - 5000 % bench.CACHE_STEP_CHARS  # in 128-token steps
    assert figures.cached == read
    assert figures.weighted == round(5001 + read * 0.1 + (5099 - read))


def test_the_subagents_stepline_ran_are_read_back_from_its_requests(tmp_path: Path, prompt_economy: ModuleType) -> None:
    bench = prompt_economy
    review = dict(run_id="r", step_id="step-04-review", workflow_id="wf", context={"project_root": str(tmp_path)})
    requests = [_sent(StepRequest(kind="work", title="step-04-review.md", content="Review the diff.", **review)),
                *[_sent(StepRequest(kind="work", title=f"subagent: {name}", content=f"Read `rp/{name}.md`. Go.",
                                    **review)) for name in ("hunter", "gap")],
                _sent(StepRequest(kind="work", title="step-04-review.md", **review,
                                  content="Review the diff.\n\n## After the subagents\n#### hunter: 3 findings"))]
    found = bench.subagents_of(requests)
    assert list(found) == ["step-04-review"]
    assert found["step-04-review"].instructions == ["Read `rp/hunter.md`. Go.", "Read `rp/gap.md`. Go."]
    assert found["step-04-review"].results == "#### hunter: 3 findings"


def test_each_subagent_is_a_fresh_conversation_with_the_files_its_instruction_names(tmp_path: Path,
                                                                                  prompt_economy: ModuleType) -> None:
    bench = prompt_economy
    (tmp_path / "rp").mkdir()
    (tmp_path / "rp" / "hunter.md").write_text("HUNTER PROMPT " * 20, encoding="utf-8")
    entry, step = tmp_path / "workflow.md", tmp_path / "step-04-review.md"
    entry.write_text("# Build\n", encoding="utf-8")
    step.write_text("# Step 4: Review\n", encoding="utf-8")
    head = bench.conservative_head("TOOLS", "SYSTEM")
    launched = {"step-04-review": bench.Subagents(["Read `rp/hunter.md`. Go.", "Review CONTENT. Go."], "R1 R2")}
    bare = bench.prompt_run([entry], head, [step], ["review written"])
    prompts = bench.prompt_run([entry], head, [step], ["review written"], launched, tmp_path)
    # one request launches them (their results come back into the conversation), the hunter reads its file
    # then returns, the other has nothing to read: 1 + 2 + 1 more than without them
    assert len(prompts) == len(bare) + 4
    fresh = [[text for text, _ in p[2:]] for p in prompts if not p[2][0].startswith("Run the workflow")]
    hunter = "Read `rp/hunter.md`. Go."
    assert fresh == [[hunter], [hunter, "[read hunter.md]\n" + "HUNTER PROMPT " * 20], ["Review CONTENT. Go."]]
    assert "[the subagents returned]\nR1 R2" in prompts[-1][-2][0]
    # every request: the head with its breakpoint, then the conversation, its last block the moving breakpoint
    assert all(p[:2] == [("TOOLS", False), ("SYSTEM", True)] and p[-1][1] and not any(m for _, m in p[2:-1])
               for p in prompts)


def test_a_stepline_subagent_reads_the_files_its_instruction_names_as_the_prompt_run_s_does(
        tmp_path: Path, prompt_economy: ModuleType) -> None:
    """The fake model reads nothing; a real subagent reads what its instruction names: the bench counts that read
    for stepline as it does for the prompt-run (its request again, with the files), and only for a subagent."""
    (tmp_path / "rp").mkdir()
    (tmp_path / "rp" / "hunter.md").write_text("HUNTER PROMPT", encoding="utf-8")
    review = dict(run_id="r", step_id="step-04-review", workflow_id="wf", context={"project_root": str(tmp_path)})
    step = _sent(StepRequest(kind="work", title="step-04-review.md", content="Read `rp/hunter.md`.", **review))
    hunter = _sent(StepRequest(kind="work", title="subagent: hunter", content="Read `rp/hunter.md`. Go.", **review))
    other = _sent(StepRequest(kind="work", title="subagent: gap", content="Review CONTENT. Go.", **review))
    reads = prompt_economy.subagent_reads([step, hunter, other], tmp_path)
    assert [prompt_economy._text(r) for r in reads] == [
        prompt_economy._text(hunter) + json.dumps({"content": "[read hunter.md]\nHUNTER PROMPT", "role": "user"})]
    # a file stepline sent with the instruction is not read again; the prompt-run's subagent gets the instruction alone
    given = _sent(StepRequest(kind="work", title="subagent: hunter",
                              content=with_files_read(tmp_path, "Read `rp/hunter.md`. Go."), **review))
    assert prompt_economy.subagent_reads([step, given, other], tmp_path) == []
    assert prompt_economy.subagents_of([step, given])["step-04-review"].instructions == ["Read `rp/hunter.md`. Go."]


def test_the_claude_code_head_has_the_captured_sizes_and_breakpoints(prompt_economy: ModuleType) -> None:
    """The fixed part stands in for the captured one block for block (sizes and breakpoints, no prompt text), and a
    prompt-run from it moves its last breakpoint to the end of the conversation, as the CLI did."""
    bench = prompt_economy
    captured = json.loads(bench.CLAUDE_CODE.read_text(encoding="utf-8"))
    assert captured["version"] and captured["conversation_breakpoint"]["second_request_last_block_marked"]
    head = bench.claude_code_head()
    want = [(b["chars"], b["breakpoint"]) for part in ("tools", "system", "before_prompt")
            for b in captured["blocks"][part]]
    assert [(len(text), marked) for text, marked in head.before] == want
    assert [(len(text), marked) for text, marked in head.after] == \
        [(b["chars"], b["breakpoint"]) for b in captured["blocks"]["after_prompt"]]
    assert sum(marked for _, marked in head.before) >= 1
