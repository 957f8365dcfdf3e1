"""A step's TELIS request: its telis_* inputs checked, variables put in, config defaults and rules applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepline._placeholders import substitute
from stepline.context import TelisConfig, TelisInputRule, request_for_step
from stepline.errors import ConfigError


def _request(inputs: dict[str, Any], config: TelisConfig | None = None, *, fmt: str = "native",
             variables: dict[str, Any] | None = None, project: Path = Path(".")) -> Any:
    step = {"id": "s", "name": "Build the login form", "description": "", "inputs": inputs, "meta": {}}
    values = variables or {}
    return request_for_step(step, {"id": "w", "format": fmt, "meta": {}}, values, config or TelisConfig(),
                            render=lambda text: substitute(text, values, nested=True), project_root=project)


def test_a_step_without_telis_inputs_and_no_rule_asks_for_nothing() -> None:
    """No telis_* input and no rule: None (the engine does nothing for the step)."""
    assert _request({"other": 1}) is None


def test_inputs_are_checked_rendered_and_defaulted() -> None:
    """Variables are put into texts; numbers may be strings; tiers may be one comma-separated text."""
    config = TelisConfig(shard_limit=7, budget_tokens=900)
    request = _request({"telis_query": "release {{version}}", "telis_line": "4", "telis_document_path": "a.py",
                        "telis_phase_tiers": "micro, full", "telis_min_score": "1.5"}, config,
                       variables={"version": "2.0"})
    assert request.query == "release 2.0" and request.line == 4 and request.character == 0
    assert request.phase_tiers == ["micro", "full"] and request.min_score == 1.5
    assert request.shard_limit == 7 and request.budget_tokens == 900 and request.wants_lsp


@pytest.mark.parametrize(("inputs", "message"), [
    ({"telis_qurey": "x"}, "step 's': unknown TELIS input 'telis_qurey'"),
    ({"telis_method": "definition"}, "step 's': telis_method must be hover or signatureHelp, not 'definition'"),
    ({"telis_phase_tiers": ["nano", "huge"]}, "step 's': telis_phase_tiers must list tiers of nano, micro, full"),
    ({"telis_shard_limit": True}, "step 's': telis_shard_limit must be an integer, not True"),
])
def test_a_wrong_input_is_a_config_error_naming_the_step_and_the_input(inputs: dict[str, Any], message: str) -> None:
    """Typos and wrong kinds are one clear error, never ignored."""
    with pytest.raises(ConfigError) as caught:
        _request(inputs)
    assert caught.value.message.startswith(message)


def test_a_rule_fills_what_the_step_leaves_out_and_the_step_wins(tmp_path: Path) -> None:
    """A rule for the workflow's format gives query, documents and set values; the step's own inputs win."""
    (tmp_path / "task.json").write_text('{"title": "Login", "context": {"focus_paths": ["src/ui"]}}',
                                        encoding="utf-8")
    rule = TelisInputRule(formats=["ccw"], load="step.inputs.task", query=["file.title", "step.name"],
                          documents=["file.context.focus_paths"], set={"telis_shard_limit": 2, "telis_max_phase": 1})
    config = TelisConfig(inputs=[rule])
    mapped = _request({"task": "task.json"}, config, fmt="ccw", project=tmp_path)
    assert mapped.query == "Login Build the login form" and mapped.documents == ["src/ui"]
    assert mapped.shard_limit == 2 and mapped.max_phase == 1
    own = _request({"task": "task.json", "telis_query": "mine", "telis_shard_limit": 9}, config, fmt="ccw",
                   project=tmp_path)
    assert own.query == "mine" and own.shard_limit == 9
    assert _request({"task": "task.json"}, config, fmt="native", project=tmp_path) is None
