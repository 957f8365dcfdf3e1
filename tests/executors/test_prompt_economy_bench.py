"""bench/prompt_economy.py's simulated prompt-run (issue 21): the subagents a step launches are fresh conversations
of their own (the instruction the skill gives, the files it names), not left out and not more than that."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from stepline.executors import StepRequest
from stepline.executors._llm import build_prompt


def _sent(request: StepRequest) -> dict[str, object]:
    system, user = build_prompt(request)
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


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
    launched = {"step-04-review": bench.Subagents(["Read `rp/hunter.md`. Go.", "Review CONTENT. Go."], "R1 R2")}
    bare = bench.prompt_run([entry], "SYSTEM", "TOOLS", [step], ["review written"])
    prompts = bench.prompt_run([entry], "SYSTEM", "TOOLS", [step], ["review written"], launched, tmp_path)
    # one request launches them (their results come back into the conversation), the hunter reads its file
    # then returns, the other has nothing to read: 1 + 2 + 1 more than without them
    assert len(prompts) == len(bare) + 4
    fresh = [p for p in prompts if not p.startswith("TOOLSSYSTEM\nRun the workflow")]
    assert fresh == ["TOOLSSYSTEM\nRead `rp/hunter.md`. Go.",
                     "TOOLSSYSTEM\nRead `rp/hunter.md`. Go.[read hunter.md]\n" + "HUNTER PROMPT " * 20,
                     "TOOLSSYSTEM\nReview CONTENT. Go."]
    assert "[the subagents returned]\nR1 R2" in prompts[-1] and "[launch a subagent]\nReview CONTENT." in prompts[-1]


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
    assert reads == [prompt_economy._text(hunter) + "[read hunter.md]\nHUNTER PROMPT"]
