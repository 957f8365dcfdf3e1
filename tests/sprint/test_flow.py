"""Which stage comes next (pure), what the agents' calls cost, and how a reviewer's report is triaged."""

from __future__ import annotations

import pytest

from stepline.executors import Price, PriceTable
from stepline.model import Run, RunStatus, StepStatus, WorkflowSpec
from stepline.sprint._driver import story_workflow
from stepline.sprint._flow import Budget, SprintFlow, next_stage, visit
from stepline.sprint._review import parse_findings
from stepline.sprint._usage import Usage, over_limit, usage_of_calls


def _run(*done: tuple[str, str]) -> Run:
    run = Run(run_id="r", workflow=WorkflowSpec(id="w", format="sprint"), status=RunStatus.RUNNING,
              project_root=".", created_at="", updated_at="")
    for sid, choice in done:
        step = run.step(sid)
        step.status, step.choice = StepStatus.COMPLETED, choice or None
    return run


BUDGET = Budget(builds=3, reviews=2, merge=False)


@pytest.mark.parametrize(("done", "expected"), [
    ((), "baseline"),
    ((("baseline", "recorded"),), "build"),
    ((("baseline", "recorded"), ("build", "built")), "verify"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "fail")), "build@2"),
    ((("baseline", "recorded"), ("build", "failed"), ("verify", "fail"), ("build@2", "built"), ("verify@2", "fail"),
      ("build@3", "built"), ("verify@3", "fail")), "defer"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass")), "review"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "patch")), "build@2"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "patch"), ("build@2", "built"),
      ("verify@2", "pass")), "review@2"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "patch"), ("build@2", "built"),
      ("verify@2", "pass"), ("review@2", "patch")), "defer"),  # out of review rounds
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "defer")), "defer"),
    # verify-final failed: the rebuild is reviewed and verified again, under visits of their own
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean"), ("verify-final", "fail"),
      ("build@2", "built"), ("verify@2", "pass")), "review@2"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean"), ("verify-final", "fail"),
      ("build@2", "built"), ("verify@2", "pass"), ("review@2", "clean")), "verify-final@2"),
    ((("baseline", "recorded"), ("build", "over-budget")), "defer"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean")), "verify-final"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean"),
      ("verify-final", "fail")), "build@2"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean"),
      ("verify-final", "pass")), "commit"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean"),
      ("verify-final", "pass"), ("commit", "committed")), "advance"),
    ((("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean"),
      ("verify-final", "pass"), ("commit", "committed"), ("advance", "done")), None),
    ((("baseline", "recorded"), ("defer", "deferred")), "build"),  # only the walk's stages count
    ((("baseline", "committed-before"),), "advance"),  # a person said the story's commit found is it
    ((("baseline", "recorded"), ("build", "defer")), "defer"),  # a person deferred it (its agent could not work)
    ((("baseline", "recorded"), ("build", "built"), ("verify", "defer")), "defer"),  # deferred at a resume
])
def test_the_next_stage_follows_the_finished_stages_choices(done: tuple[tuple[str, str], ...],
                                                             expected: str | None) -> None:
    assert next_stage(_run(*done), BUDGET) == expected


def test_checkpoints_and_merge_sit_where_the_config_puts_them() -> None:
    gated = Budget(builds=1, reviews=1, merge=True, plan_gate=True, commit_gate=True)
    assert next_stage(_run(("baseline", "recorded")), gated) == "checkpoint-plan"
    assert next_stage(_run(("baseline", "recorded"), ("checkpoint-plan", "")), gated) == "defer"  # rejected
    approved = (("baseline", "recorded"), ("checkpoint-plan", "approved"), ("build", "built"), ("verify", "pass"),
                ("review", "clean"), ("verify-final", "pass"), ("commit", "committed"))
    assert next_stage(_run(*approved), gated) == "checkpoint-commit"
    assert next_stage(_run(*approved, ("checkpoint-commit", "approved")), gated) == "merge"
    assert next_stage(_run(*approved, ("checkpoint-commit", "approved"), ("merge", "merged")), gated) == "advance"
    ids = [s.id for s in story_workflow("1-1-x", builds=1, reviews=1, merge=True, plan_gate=True).steps]
    assert ids == ["baseline", "checkpoint-plan", "build", "verify", "review", "verify-final", "commit", "merge",
                   "advance", "defer"]
    assert story_workflow("k", builds=1, reviews=1, merge=False, plan_gate=True).step("checkpoint-plan").human_gate \
        == "required"


def test_a_merge_that_cannot_land_visits_build_to_merge_again_with_the_budgets_of_a_new_base() -> None:
    merging = Budget(builds=2, reviews=1, merge=True)
    first = (("baseline", "recorded"), ("build", "built"), ("verify", "pass"), ("review", "clean"),
             ("verify-final", "pass"), ("commit", "committed"), ("merge", "rebuild"))
    assert next_stage(_run(*first), merging) == "build@2"
    again = (*first, ("build@2", "built"), ("verify@2", "pass"), ("review@2", "clean"), ("verify-final@2", "pass"),
             ("commit@2", "committed"))
    assert next_stage(_run(*first, ("build@2", "built"), ("verify@2", "pass")), merging) == "review@2"
    assert next_stage(_run(*again), merging) == "merge@2"
    assert next_stage(_run(*again, ("merge@2", "merged")), merging) == "advance"
    # Another story landed first again: the conflict alone never spends the story's builds or review rounds.
    third = (*again, ("merge@2", "rebuild"))
    assert next_stage(_run(*third), merging) == "build@3"
    assert next_stage(_run(*third, ("build@3", "built"), ("verify@3", "fail")), merging) == "build@4"
    assert next_stage(_run(*third, ("build@3", "built"), ("verify@3", "fail"), ("build@4", "built"),
                           ("verify@4", "fail")), merging) == "defer"  # the new base's two builds failed


def test_a_story_its_merge_sends_back_is_built_again_however_often_and_never_deferred_for_it() -> None:
    """Each send-back follows another story's landing (see stepline.sprint._merge): at -j 8 a story may be sent back
    seven times, and the conflicts alone never set it aside."""
    merging = Budget(builds=1, reviews=1, merge=True)
    done: list[tuple[str, str]] = [("baseline", "recorded")]
    for number in range(1, 9):
        assert next_stage(_run(*done), merging) == visit("build", number)
        done += [(visit(stage, number), choice) for stage, choice in (
            ("build", "built"), ("verify", "pass"), ("review", "clean"), ("verify-final", "pass"),
            ("commit", "committed"), ("merge", "rebuild"))]
    assert next_stage(_run(*done), merging) == "build@9"
    assert next_stage(_run(*done[:-1], ("merge@8", "merged")), merging) == "advance"


def test_the_flow_stops_at_a_stage_that_did_not_complete() -> None:
    run = _run(("baseline", "recorded"))
    flow = SprintFlow(run, BUDGET)
    assert flow.take_ready(1) == ["build"]
    run.step("build").status = StepStatus.BLOCKED
    flow.finished("build", StepStatus.BLOCKED)
    assert flow.take_ready(1) == []


def test_usage_is_summed_and_weighed_by_price_when_no_cost_is_reported() -> None:
    prices = PriceTable(fallback=Price(3.0, 15.0, 0.3))
    records = [
        {"op": "memo:cli-agent:claude", "result": {"usage": {"input_tokens": 11000, "output_tokens": 100,
                                                             "cache_read_tokens": 10000, "cache_write_tokens": 0}}},
        {"op": "memo:cli-agent:claude", "result": {"usage": {"input_tokens": 5, "output_tokens": 5,
                                                             "cost_usd": 0.5}}},
        # a record of an older run: codex's cache reads apart from its input tokens
        {"op": "memo:cli-agent:codex", "result": {"usage": {"input_tokens": 500, "cached_input_tokens": 1500,
                                                            "output_tokens": 0}}},
        {"op": "read", "result": {"usage": {"input_tokens": 99}}},  # not a model call
    ]
    usage = usage_of_calls([{"key": f"s/1/1/{n}", **r} for n, r in enumerate(records)], prices)
    assert usage.calls == 3 and usage.cache_read_tokens == 11500 and usage.input_tokens == 11005 + 2000
    expected = (1000 * 3 + 100 * 15 + 10000 * 0.3) / 1e6 + 0.5 + (500 * 3 + 1500 * 0.3) / 1e6
    assert usage.cost_usd == pytest.approx(expected)
    assert over_limit(usage, 10000, None) == "13110 tokens > the limit of 10000"
    assert over_limit(usage, None, 0.1) is not None and over_limit(usage, 1e9, 10) is None
    assert Usage.from_record(usage.to_record()) == usage


def test_a_reviewers_report_is_triaged_line_by_line() -> None:
    report = ("- patch: sub() returns a float for ints\n* [defer] - logging is missing\nescalate: which rounding?\n"
              "intent_gap: the story never says what 0 means\nLooks fine otherwise.\nnone")
    assert parse_findings(report) == [
        {"triage": "patch", "text": "sub() returns a float for ints"},
        {"triage": "defer", "text": "logging is missing"},
        {"triage": "escalate", "text": "which rounding?"},
        {"triage": "escalate", "text": "the story never says what 0 means"}]
