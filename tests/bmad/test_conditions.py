"""Tests for the BMAD condition classifier (which prose conditions the runtime can decide by itself)."""

from __future__ import annotations

import pytest

from stepline.bmad._conditions import ParsedCondition, classify


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("workflow_mode != deep_dive",
         {"kind": "compare", "variable": "workflow_mode", "op": "!=", "operand": "deep_dive"}),
        ("{{new_status}} == 'done'", {"kind": "compare", "variable": "new_status", "op": "==", "operand": "done"}),
        ("{{prev_epic_num}} >= 1", {"kind": "compare", "variable": "prev_epic_num", "op": ">=", "operand": 1}),
        ("total_issues_found lt 3", {"kind": "compare", "variable": "total_issues_found", "op": "<", "operand": 3}),
        ("resume_mode == false", {"kind": "compare", "variable": "resume_mode", "op": "==", "operand": False}),
        ("warning != ''", {"kind": "compare", "variable": "warning", "op": "!=", "operand": ""}),
        ("{{story_path}} is provided", {"kind": "provided", "variable": "story_path"}),
        ("{{items}} is not empty", {"kind": "empty", "variable": "items", "negated": True}),
        ("{{sprint_status}} file exists", {"kind": "file-exists", "variable": "sprint_status"}),
        ("{sprint_status} file does NOT exist", {"kind": "file-exists", "variable": "sprint_status", "negated": True}),
        ("{output_folder}/index.md does not exist", {"kind": "file-exists", "operand": "{output_folder}/index.md",
                                                     "negated": True}),
        ("user chooses '2'", {"kind": "choice", "choices": ["2"]}),
        ("user selects 'm' (move)", {"kind": "choice", "choices": ["m"]}),
        ("user selects option 1 (generate incomplete)", {"kind": "choice", "choices": ["1"]}),
        ("selection is 2 or 4", {"kind": "choice", "choices": ["2", "4"]}),
        ("n", {"kind": "choice", "choices": ["n"]}),
        ("user says no", {"kind": "choice", "choices": ["n", "no"]}),
        ("{user_name} confirms", {"kind": "choice", "choices": ["y", "yes"]}),
    ],
)
def test_decidable_conditions(text: str, expected: dict[str, object]) -> None:
    """Each deterministic shape is classified into its structured form."""
    parsed = classify(text)
    assert parsed is not None
    assert parsed.to_dict() == expected


@pytest.mark.parametrize(
    "text",
    ["ALL requirements clear", "user says maybe", "state file age >= 24 hours", "user selects finalize (option 4 or 5)",
     "index.md exists", "", "template-workflow", "user selects 1 OR user presses enter"],
)
def test_judgement_conditions_are_none(text: str) -> None:
    """Conditions that need judgement are left to the executor."""
    assert classify(text) is None


def test_compound_conditions() -> None:
    """AND / OR of decidable parts become all / any with their parts."""
    parsed = classify("{sprint_status} file exists AND {{status}} != 'none'")
    assert parsed is not None and parsed.kind == "all"
    assert [p.kind for p in parsed.parts] == ["file-exists", "compare"]
    either = classify("scan_level == deep OR scan_level == exhaustive")
    assert either is not None and either.kind == "any" and len(either.parts) == 2


def test_selection_attribute_is_a_menu_answer() -> None:
    """``<if selection="2 or ai writes…">`` is the answer '2', whatever the prose after it."""
    parsed = classify("2 or ai writes the next draft", attribute="selection")
    assert parsed == ParsedCondition(kind="choice", choices=("2",))


def test_round_trip() -> None:
    """to_dict/from_dict restore the same condition, parts included."""
    parsed = classify("mode == data OR {{path}} is provided")
    assert parsed is not None
    assert ParsedCondition.from_dict(parsed.to_dict()) == parsed
