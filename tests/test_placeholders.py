"""The placeholder language, the one module (stepline._placeholders): its tokens, each policy of the one
substitute function, and references resolved in dependency order."""

from __future__ import annotations

import pytest

from stepline._placeholders import (
    PROJECT_ROOT,
    VARIABLES,
    Kind,
    Placeholder,
    Unresolved,
    find,
    resolve,
    substitute,
    substitute_value,
    whole,
)

ALL = frozenset(Kind)


def test_every_kind_of_token_is_found_with_its_line() -> None:
    """Each token is one kind, named as its reader needs it, on the line it is on."""
    text = ("{project-root}/{{date}} {{ story key }}\n"
            "{{.user_name}} {{config.modules.bmm.lang}}\n"
            "{workflow.greeting} {agent.name} `[[bmad-snapshot:step-02.md]]` {{ spaced }}")
    assert [(p.kind, p.name, p.line) for p in find(text, ALL)] == [
        (Kind.VAR, "project-root", 1), (Kind.RUNTIME, "date", 1), (Kind.SLOT, "story key", 1),
        (Kind.CONFIG_KEY, "user_name", 2), (Kind.CONFIG_PATH, "modules.bmm.lang", 2),
        (Kind.CUSTOM, "workflow.greeting", 3), (Kind.CUSTOM, "agent.name", 3), (Kind.SNAPSHOT, "step-02.md", 3),
        (Kind.RUNTIME, "spaced", 3)]
    assert [p.text for p in find("a {x} b {{y}}")] == ["{x}", "{{y}}"]
    assert find("{{ story key }}") == []  # a slot is no variable


@pytest.mark.parametrize("text", [
    '{"key": "value", "n": {"a": 1}}',  # JSON
    "function f() {return x;} if (ok) { go(); }",  # code: `{return x;}` has no name alone in braces
    "echo ${HOME} ${story_key} && echo ${{ github.sha }}",  # shell, JavaScript and CI expressions
    "a {x y} b { x } c {1x}",  # not names
])
def test_braces_that_are_not_placeholders_are_left_alone(text: str) -> None:
    values = {"HOME": "/h", "story_key": "1-2", "github.sha": "abc", "return": "R", "x": "X"}
    assert find(text, ALL) == []
    assert substitute(text, values, nested=True) == text


def test_nested_braces() -> None:
    """``{{{x}}}`` holds the runtime variable ``{{x}}``; ``{{x}`` and ``{x}}`` hold no variable at all."""
    assert [(p.kind, p.name, p.start) for p in find("{{{x}}}")] == [(Kind.RUNTIME, "x", 1)]
    assert substitute("{{{x}}}", {"x": "1"}) == "{1}"
    assert find("{{x} and {x}}") == []
    assert substitute("{{x} and {x}}", {"x": "1"}) == "{{x} and {x}}"


def test_kinds_say_which_tokens_are_filled() -> None:
    """``{name}`` and ``{{name}}`` by default; one kind alone leaves the other as written."""
    values = {"a": "A", "b": "B"}
    assert substitute("{a} {{b}}", values) == "A B"
    assert substitute("{a} {{b}}", values, kinds={Kind.VAR}) == "A {{b}}"
    assert substitute("{a} {{ b }}", values, kinds={Kind.RUNTIME}) == "{a} B"


def test_unknown_tokens_stay_or_are_reported() -> None:
    """Unknown names stay as written; strict names every token left, after the known ones were filled."""
    assert substitute("{a}/{nope}/{{later}}", {"a": "A"}) == "A/{nope}/{{later}}"
    with pytest.raises(Unresolved) as info:
        substitute("{a}/{nope}/{{later}}", {"a": "A"}, strict=True)
    assert [t.text for t in info.value.tokens] == ["{nope}", "{{later}}"]
    assert str(info.value) == "no value for {nope}, {{later}}"
    assert substitute("{a}/{{later}}", {"a": "A"}, kinds={Kind.VAR}, strict=True) == "A/{{later}}"


def test_values_that_are_not_text() -> None:
    """Booleans read as YAML writes them, numbers as written; None, mappings and lists are never spliced."""
    values = {"t": True, "f": False, "n": 3, "none": None, "map": {"a": 1}, "list": [1]}
    assert substitute("{t} {f} {n} {none} {map} {{list}}", values) == "true false 3 {none} {map} {{list}}"


def test_a_value_holding_a_placeholder() -> None:
    """Not nested, a value goes in as it is (a config file keeps ``{project-root}``); nested, its own tokens are
    filled too, once: ``{project-root}/docs`` becomes the project's docs folder, never the root twice."""
    values = {PROJECT_ROOT: "/p", "output_folder": "{project-root}/docs", "story": "{output_folder}/s.md"}
    assert substitute("{output_folder}", values) == "{project-root}/docs"
    assert substitute("{story}", values, nested=True) == "/p/docs/s.md"
    assert substitute("{{story}}", values, nested=True) == "/p/docs/s.md"
    assert substitute("{output_folder}", values, nested=True, keep={PROJECT_ROOT}) == "{project-root}/docs"


def test_a_cycle_between_nested_values_ends() -> None:
    cycled = substitute("{a}", {"a": "{b}", "b": "{a}"}, nested=True)
    assert cycled in ("{a}", "{b}")
    assert substitute("{a}", {"a": "x{a}"}, nested=True) == "x" * 9 + "{a}"


def test_keep_names_stay() -> None:
    assert substitute("{{intro}} {{title}}", {"intro": "I", "title": "T"}, keep={"intro"}) == "{{intro}} T"


def test_a_function_gives_values_by_token() -> None:
    """A lookup function sees the whole token: its kind decides where the value comes from."""

    def lookup(token: Placeholder) -> str | None:
        return {Kind.CONFIG_KEY: "cfg", Kind.SNAPSHOT: "/skill/" + token.name}.get(token.kind)

    text = "{{.lang}} [[bmad-snapshot:s.md]] {x}"
    assert substitute(text, lookup, kinds=ALL) == "cfg /skill/s.md {x}"
    assert substitute(text, lookup, kinds={Kind.SNAPSHOT}) == "{{.lang}} /skill/s.md {x}"


def test_code_fences_and_json_templates_keep_their_literal_braces() -> None:
    """In a template, only the variables are filled: the JSON and the code around them are kept byte for byte."""
    template = ('```json\n{"title": "{{title}}", "tags": ["a"], "meta": {"root": "{project-root}"}}\n```\n'
                "```js\nconst url = `${base}/x`; if (a) { run(); }\n```\n")
    filled = substitute(template, {"title": "T", PROJECT_ROOT: "/p", "base": "B"})
    assert filled == template.replace("{{title}}", "T").replace("{project-root}", "/p")


def test_a_whole_token_keeps_its_type() -> None:
    values = {"flag": True, "n": 2, "later": 3}
    assert substitute_value("{flag}", values) is True
    assert substitute_value({"a": ["{n}", "x{n}"], "b": 1}, values) == {"a": [2, "x2"], "b": 1}
    assert substitute_value("{{later}}", values, kinds={Kind.VAR}) == "{{later}}"
    assert substitute_value("{{later}}", values, kinds=VARIABLES) == 3


def test_config_source_references() -> None:
    """``{config_source}:key`` is one token naming the key; ``{config_source}`` alone is a variable."""
    assert [(p.kind, p.name) for p in find("{config_source}:output_folder/x {config_source}", ALL)] == [
        (Kind.CONFIG_SOURCE, "output_folder"), (Kind.VAR, "config_source")]
    token = whole("{config_source}:output_folder", {Kind.CONFIG_SOURCE})
    assert token is not None and token.name == "output_folder"
    assert whole("{config_source}:a/b", {Kind.CONFIG_SOURCE}) is None
    assert whole("{output_folder}", {Kind.CONFIG_SOURCE}) is None
    assert substitute("{config_source}:out/x", {"out": "docs"}, kinds={Kind.CONFIG_SOURCE}) == "docs/x"


def test_resolve_fills_references_in_dependency_order() -> None:
    result = resolve({"c": "{b}/c", "b": "{a}/b", "a": "{root}/a", "n": {"x": ["{c}", "{{run}}"]}}, {"root": "/r"})
    assert result.values == {"c": "/r/a/b/c", "b": "/r/a/b", "a": "/r/a", "n": {"x": ["/r/a/b/c", "{{run}}"]}}
    assert result.cycles == [] and result.unresolved == {}


def test_resolve_reports_cycles_and_unknown_names() -> None:
    result = resolve({"a": "{b}", "b": "{a}", "c": "{nope}/x", "ask": "{ask}"})
    assert result.cycles == [["a", "b", "a"]]
    assert result.values["a"] == "{b}" and result.values["c"] == "{nope}/x"
    assert result.unresolved == {"c": ("nope",), "ask": ("ask",)}  # a key naming itself is asked for, no cycle
