"""Tests for the tolerant BMAD instructions parser (R-F2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepline.bmad._instructions import (
    Action,
    Anchor,
    Ask,
    Check,
    Checkpoint,
    Example,
    Goto,
    InvokeProtocol,
    InvokeTask,
    InvokeWorkflow,
    Output,
    Step,
    TemplateOutput,
    Text,
    node_from_dict,
    parse_instructions,
    walk,
)

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
BMAD = CORPUS / "bmad" / "v6.0.0-alpha.23"

_PIECES = st.sampled_from([
    "<step n=\"1\" goal=\"g\">", "</step>", "<action>", "</action>", "<action if=\"x > 1\">", "<check if='a'>",
    "</check>", "<ask response=\"v\">", "</ask>", "<goto step=\"2\"/>", "<anchor id=\"a\" />", "<workflow>",
    "</workflow>", "<template-output>", "</template-output>", "<output>", "</output>", "<example>", "```",
    "```xml", "`", "<!--", "-->", "<", ">", "</", "/>", "\"", "'", "\n", " ", "text", "GOTO step 2a", "{{v}}",
    "<if selection=\"1\">", "</if>", "<invoke-workflow path=\"p\">", "<param>k: v</param>", "</invoke-workflow>",
    "<unknown a=b>", "</unknown>", "<step n=\"1\"", "<critical>", "</critical>",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=60).map("".join))
def test_never_crashes_on_tag_soup(text: str) -> None:
    """Any mix of tag fragments parses, lines stay inside the text, and the tree round-trips through JSON."""
    result = parse_instructions(text, path="soup.md")
    last_line = text.count("\n") + 1
    for node in walk(result.nodes):
        assert 1 <= node.line <= last_line
        assert node_from_dict(json.loads(json.dumps(node.to_dict()))).to_dict() == node.to_dict()
    for diag in result.diagnostics:
        assert diag.path == "soup.md" and diag.line is not None and 1 <= diag.line <= last_line


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_never_crashes_on_arbitrary_text(text: str) -> None:
    """Arbitrary unicode parses without raising."""
    parse_instructions(text)


def test_step_attributes_and_children() -> None:
    """A step keeps n as a label and every documented attribute; children are typed nodes with lines."""
    text = """<workflow>
<critical>Rules</critical>
<step n="0.5" goal="Prepare" optional="true" if="mode == x" repeat="3" for-each="item" tag="t" id="s1" elicit="true">
  Some prose.
  <action>Do it</action>
  <output if="verbose">Hello {{name}}</output>
</step>
</workflow>"""
    result = parse_instructions(text)
    [step] = result.steps()
    assert (step.n, step.goal, step.optional, step.if_, step.repeat, step.for_each, step.tag, step.id) == (
        "0.5", "Prepare", True, "mode == x", "3", "item", "t", "s1")
    assert step.attrs == {"elicit": "true"} and step.line == 3 and step.end_line == 7
    assert [type(c) for c in step.children] == [Text, Action, Output]
    assert step.children[1].line == 5
    assert isinstance(result.nodes[0], Step) is False
    data = step.to_dict()
    assert data["if"] == "mode == x" and data["for-each"] == "item"
    assert data["parsed"] == {"kind": "compare", "variable": "mode", "op": "==", "operand": "x"}
    assert result.diagnostics == []


def test_check_if_blocks_and_selection_handlers() -> None:
    """<check if> and <if selection|response> are conditional blocks; conditions may contain < and >."""
    result = parse_instructions(
        '<check if="{{n}} >= 1"><action>A</action></check>\n<if selection="2 or more">\n<action>B</action>\n</if>'
    )
    first, second = result.nodes
    assert isinstance(first, Check) and first.condition == "{{n}} >= 1" and first.attribute == "if"
    assert isinstance(second, Check) and second.tag == "if" and second.attribute == "selection"
    assert second.to_dict()["parsed"] == {"kind": "choice", "choices": ["2"]}


def test_gotos_anchors_and_prose_jumps() -> None:
    """goto step=/anchor=, goto with a text body, and prose 'GOTO step 2a' / 'Skip to Step 5' all become Goto."""
    result = parse_instructions(
        '<goto anchor="here" />\n<goto step="6">Completion</goto>\n<anchor id="here" />\n'
        "<action>GOTO step 2a</action>\n<action>Skip to Step 5</action>\n"
        '<action if="done">Continue to step 3 now</action>\n<goto>step 4</goto>'
    )
    nodes = result.nodes
    assert isinstance(nodes[0], Goto) and nodes[0].anchor == "here"
    assert isinstance(nodes[1], Goto) and (nodes[1].step, nodes[1].text) == ("6", "Completion")
    assert isinstance(nodes[2], Anchor) and nodes[2].id == "here"
    assert isinstance(nodes[3], Goto) and nodes[3].step == "2a" and nodes[3].prose
    assert isinstance(nodes[4], Goto) and nodes[4].step == "5"
    assert isinstance(nodes[5], Action) and nodes[5].if_ == "done"
    assert isinstance(nodes[5].children[0], Goto) and nodes[5].children[0].step == "3"
    assert isinstance(nodes[6], Goto) and nodes[6].step == "4"


def test_invocations_and_template_output() -> None:
    """invoke-workflow params, invoke-task paths, invoke-protocol names and template-output variables are read."""
    result = parse_instructions(
        '<invoke-workflow path="{project-root}/wf">\n  <param>mode: data</param>\n  <param>x: 1</param>\n'
        "</invoke-workflow>\n"
        "<invoke-task>Validate {installed_path}/checklist.md using _bmad/core/tasks/validate.xml</invoke-task>\n"
        '<invoke-protocol\n   name="discover_inputs" />\n'
        '<template-output file="{out}">\n  a, b</template-output>'
    )
    wf, task, protocol, output = result.nodes
    assert isinstance(wf, InvokeWorkflow) and wf.path == "{project-root}/wf"
    assert wf.params == {"mode": "data", "x": "1"}
    assert isinstance(task, InvokeTask) and task.path == "_bmad/core/tasks/validate.xml"
    assert isinstance(protocol, InvokeProtocol) and protocol.name == "discover_inputs" and protocol.line == 6
    assert isinstance(output, TemplateOutput) and output.variables == ["a", "b"] and output.file == "{out}"


def test_ask_with_answer_handlers() -> None:
    """An ask keeps its text, the response variable and nested <if response> handlers."""
    result = parse_instructions('<ask response="choice">Pick [a] or [c] <if response="a"><action>A</action></if></ask>')
    [ask] = result.nodes
    assert isinstance(ask, Ask) and ask.response == "choice" and ask.text == "Pick [a] or [c]"
    assert isinstance(ask.children[0], Check) and ask.children[0].condition == "a"


def test_text_regions_are_not_parsed() -> None:
    """Tags in code fences, inline code, comments, examples and unknown tags stay text."""
    result = parse_instructions(
        "```\n<action>not me</action>\n```\nUse `<step>` here.\n<!-- <action>no</action> -->\n"
        "<example><action>shown only</action></example>\n<LoginForm />\n<energy-checkpoint>Breathe</energy-checkpoint>"
    )
    kinds = [type(n) for n in result.nodes]
    assert Action not in kinds
    assert isinstance(result.nodes[1], Example) and "<action>" in result.nodes[1].text
    assert isinstance(result.nodes[-1], Checkpoint) and result.nodes[-1].text == "Breathe"
    assert result.diagnostics == []


def test_xml_fence_is_markup() -> None:
    """A ```xml block holds instruction markup and is parsed."""
    text = '# T\n\n```xml\n<workflow>\n<step n="1" goal="g"><action>A</action></step>\n</workflow>\n```\n'
    result = parse_instructions(text)
    assert [s.n for s in result.steps()] == ["1"]


def test_unclosed_step_is_repaired_with_a_diagnostic() -> None:
    """A step left open is closed at the next step, with a warning on the right line."""
    result = parse_instructions('<step n="1" goal="a">\n<action>x</action>\n<step n="2" goal="b">\n</step>\n')
    assert [s.n for s in result.steps()] == ["1", "2"]
    [diag] = result.diagnostics
    assert diag.code == "unclosed-tag" and diag.line == 3 and "line 1" in diag.message


def test_misnested_and_stray_tags() -> None:
    """A check closed by </step> and a stray </check> are both repaired and reported with lines."""
    result = parse_instructions('<step n="1">\n<check if="a">\n<action>x</action>\n</step>\n</check>\n')
    codes = [(d.code, d.line) for d in result.diagnostics]
    assert codes == [("misnested-tag", 4), ("stray-close-tag", 5)]
    [step] = result.steps()
    assert isinstance(step.children[0], Check)


def test_unclosed_leaf_ends_at_line() -> None:
    """An <output> without its closing tag ends at the end of its line, not at the end of the file."""
    result = parse_instructions('<step n="1">\n<output>Hi there\n<action>next</action>\n</step>')
    [step] = result.steps()
    assert isinstance(step.children[0], Output) and step.children[0].text == "Hi there"
    assert isinstance(step.children[1], Action)
    assert result.diagnostics[0].code == "unclosed-tag" and result.diagnostics[0].line == 2


def test_action_if_may_wrap_actions() -> None:
    """<action if> used as a block keeps nested actions; an action with text then another action is unclosed."""
    block = parse_instructions('<action if="x">\n  <action>a</action>\n  <action>b</action>\n</action>')
    [outer] = block.nodes
    assert isinstance(outer, Action) and [c.text for c in outer.children if isinstance(c, Action)] == ["a", "b"]
    assert block.diagnostics == []
    inline = parse_instructions('<action>first\n<action>second</action>')
    assert [n.text for n in inline.nodes if isinstance(n, Action)] == ["first", "second"]


def test_nested_steps_kept_when_balanced() -> None:
    """A step wrapping sub-steps with matching closing tags keeps them nested."""
    result = parse_instructions('<step n="13" if="m">\n<step n="13a"></step>\n<step n="13b"></step>\n</step>')
    [outer] = result.steps()
    assert [c.n for c in outer.children if isinstance(c, Step)] == ["13a", "13b"]
    assert result.diagnostics == []


def test_first_line_offset() -> None:
    """first_line shifts every node and diagnostic line."""
    result = parse_instructions("\n<action>x</action>\n<output>y", first_line=10)
    assert result.nodes[0].line == 11 and result.diagnostics[0].line == 12


def _corpus_instruction_files() -> list[Path]:
    if not BMAD.is_dir():
        return []
    return sorted(p for p in BMAD.rglob("*instructions*") if p.suffix in (".md", ".xml"))


@pytest.mark.corpus
def test_parses_every_corpus_instructions_file() -> None:
    """Every instructions file of the corpus parses; the tagged ones yield steps."""
    files = _corpus_instruction_files()
    if not files:
        pytest.skip("shared corpus not available")
    with_steps = 0
    for path in files:
        result = parse_instructions(path.read_text(encoding="utf-8"), path=str(path))
        with_steps += bool(result.steps())
    assert with_steps >= 20


@pytest.mark.corpus
def test_dev_story_structure() -> None:
    """dev-story: ten steps, the task_check anchor, gotos to it and to steps 5, 6 and 9."""
    path = BMAD / "src/modules/bmm/workflows/4-implementation/dev-story/instructions.xml"
    if not path.is_file():
        pytest.skip("shared corpus not available")
    result = parse_instructions(path.read_text(encoding="utf-8"), path=str(path))
    assert [s.n for s in result.steps()] == [str(i) for i in range(1, 11)]
    nodes = list(walk(result.nodes))
    assert [n.id for n in nodes if isinstance(n, Anchor)] == ["task_check"]
    gotos = {(n.step, n.anchor) for n in nodes if isinstance(n, Goto)}
    assert {("6", None), ("5", None), ("9", None), (None, "task_check")} <= gotos
    assert result.diagnostics == []
