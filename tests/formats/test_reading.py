"""The reading kit: UTF-8 text whose failure names file:line and byte, and YAML parsed once with file:line errors."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml

from stepline._yaml import YamlLoader, compose_yaml_text, find_yaml_line, load_yaml_text
from stepline.bmad._config import parse_yaml
from stepline.ccw._check import check_ccw_session
from stepline.errors import ConfigError, ReaderError
from stepline.formats._files import decode_text, read_text
from stepline.formats._frontmatter import read_frontmatter, read_frontmatter_file
from stepline.native import load_native

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# -- text -------------------------------------------------------------------------------------------------
def test_bytes_that_are_not_utf8_name_the_file_the_line_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_bytes(b"one\ntwo caf\xe9\nthree\n")
    with pytest.raises(ReaderError) as info:
        read_text(path)
    assert str(info.value) == (f"{path}:2: not UTF-8 at byte 11 (invalid continuation byte: 0xe9) "
                               "(re-save the file as UTF-8)")
    assert info.value.line == 2 and info.value.path == str(path)


def test_read_text_reads_as_path_read_text_does(tmp_path: Path) -> None:
    """Universal newlines and a kept byte order mark, as ``Path.read_text(encoding="utf-8")``."""
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbfa\r\nb\rc\n")
    assert read_text(path) == path.read_text(encoding="utf-8") == "\ufeffa\nb\nc\n"
    assert read_text(path, strip_bom=True) == "a\nb\nc\n"
    assert decode_text(b"a\r\n", path) == "a\r\n"  # decode_text keeps the bytes' line ends


def test_a_missing_file_is_still_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "nope")


# -- YAML -------------------------------------------------------------------------------------------------
SEMANTICS = """\
yes_word: yes
off_word: off
date: 2024-01-02
stamp: 2024-01-02 10:11:12
octal: 0o17
old_octal: 017
hex: 0x1f
under: 1_000
sexagesimal: 1:30
inf: .inf
null_word: ~
dup: first
dup: second
quoted: 'yes'
anchored: &a [1, 2]
alias: *a
merged: {<<: {x: 1}, y: 2}
"""


def test_the_loader_builds_what_the_pure_python_safe_loader_builds() -> None:
    """libyaml (when present) changes the speed, not the values: YAML 1.1 words, dates, the last duplicate."""
    ours = load_yaml_text(SEMANTICS, path="x.yaml")
    assert ours == yaml.load(SEMANTICS, Loader=yaml.SafeLoader)
    assert ours["yes_word"] is True and ours["off_word"] is False and ours["quoted"] == "yes"
    assert ours["date"] == datetime.date(2024, 1, 2) and ours["dup"] == "second" and ours["sexagesimal"] == 90
    assert compose_yaml_text(SEMANTICS, path="x.yaml")[0] == ours
    assert parse_yaml(SEMANTICS, path="x.yaml").data == ours


def test_the_c_loader_is_used_when_libyaml_is_there() -> None:
    if getattr(yaml, "__with_libyaml__", False):
        assert issubclass(YamlLoader, yaml.CSafeLoader)
    else:
        assert issubclass(YamlLoader, yaml.SafeLoader)


@pytest.mark.parametrize(("text", "shown"), [
    ("a: 1\nb: 2024-13-45\n", "'2024-13-45' is not a valid timestamp"),
    ("a: 1\nb: 0x_\n", "'0x_' is not a valid int"),
    ("a: 1\nb: !!bool maybe\n", "'maybe' is not a valid bool"),
    ("a: 1\nb: !!float nope\n", "'nope' is not a valid float"),
])
def test_a_typed_scalar_that_does_not_convert_is_a_yaml_error_at_its_line(text: str, shown: str) -> None:
    """The safe constructors raise ValueError/KeyError on these; they are YAML errors at file:line here."""
    with pytest.raises(ReaderError) as info:
        load_yaml_text(text, path="x.yaml")
    assert str(info.value).startswith(f"x.yaml:2: YAML error: {shown}")


def test_syntax_and_character_errors_are_one_line_with_the_line() -> None:
    with pytest.raises(ConfigError) as info:
        load_yaml_text("a: 1\nb: [x\n", path="c.yaml", error=ConfigError)
    assert info.value.line == 3 and "while parsing a flow sequence" in str(info.value)
    with pytest.raises(ReaderError, match=r"^c\.yaml:2: YAML error: unacceptable character #x0001: "
                                          r"(control|special) characters are not allowed$"):
        load_yaml_text("a: é\nb: x\x01y\n", path="c.yaml")  # libyaml counts bytes, the line is still 2
    with pytest.raises(ReaderError) as deep:
        load_yaml_text("[" * 20000 + "]" * 20000, path="d.yaml")
    assert "\n" not in str(deep.value)


def test_find_yaml_line_in_text_or_in_the_nodes_already_composed() -> None:
    text = "id: x\nsteps:\n  - id: a\n  - id: b\n    retries: {max: -1}\n"
    data, root = compose_yaml_text(text, path="f.yaml")
    assert data["steps"][1]["retries"] == {"max": -1}
    for source in (text, root):
        assert find_yaml_line(source, ("steps", 1, "retries", "max")) == 5
        assert find_yaml_line(source, ("steps", 0)) == 3
        assert find_yaml_line(source, ("nope",)) is None


def test_first_line_offsets_a_block_inside_a_file() -> None:
    with pytest.raises(ReaderError) as info:
        compose_yaml_text("a: 1\nb: [x\n", path="s.md", first_line=10)
    assert info.value.line == 12


# -- readers ----------------------------------------------------------------------------------------------
def test_native_steps_get_their_lines_from_the_one_parse(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text("id: f\nsteps:\n  - id: a\n\n  - id: b\n    depends_on: [a]\n", encoding="utf-8")
    spec = load_native(path)
    assert [s.source.line for s in spec.steps if s.source] == [3, 5]
    json_path = tmp_path / "flow.json"
    json_path.write_text('{"id": "f",\n "steps": [\n  {"id": "a"},\n  {"id": "b"}]}\n', encoding="utf-8")
    assert [s.source.line for s in load_native(json_path).steps if s.source] == [3, 4]


def test_a_native_file_that_is_not_utf8_is_still_native_and_says_where(tmp_path: Path) -> None:
    from stepline.families import lint_path, load_workflow

    path = tmp_path / "flow.yaml"
    path.write_bytes(b"id: f\nsteps:\n  - id: \xff\n")
    with pytest.raises(ReaderError, match=r"flow\.yaml:3: not UTF-8 at byte 21 \(invalid start byte: 0xff\)"):
        load_workflow(path, project_root=tmp_path)
    [diagnostic] = lint_path(path, project_root=tmp_path)
    assert diagnostic.line == 3 and "not UTF-8 at byte 21" in diagnostic.message


def test_frontmatter_keeps_its_tolerance_and_reports_a_bad_scalar_per_key(tmp_path: Path) -> None:
    fm = read_frontmatter("---\na: 1\nwhen: 2024-13-45\nc: ok\n---\nbody\n", path="s.md")
    assert fm.data["a"] == 1 and fm.data["c"] == "ok" and fm.data["when"] == "2024-13-45"
    assert [(d.code, d.line) for d in fm.diagnostics] == [("yaml-syntax", 3)]
    bad = tmp_path / "step.md"
    bad.write_bytes(b"---\nname: x\n---\n\xc3(\n")
    with pytest.raises(ReaderError, match=r"step\.md:4: not UTF-8 at byte 16"):
        read_frontmatter_file(bad)


def test_ccw_check_reports_a_file_that_is_not_utf8_and_goes_on(tmp_path: Path) -> None:
    import shutil

    session = tmp_path / "WFS-tdd-parser"
    shutil.copytree(FIXTURES / "ccw" / "sessions" / "WFS-tdd-parser", session)
    task = session / ".task" / "IMPL-2.json"
    task.write_bytes(task.read_bytes().replace(b"{", b"{\xff", 1))
    todo = session / "TODO_LIST.md"
    todo.write_bytes(todo.read_bytes() + b"\n\xfe\n")
    found = {(d.code, Path(d.path).name) for d in check_ccw_session(session)}
    assert ("not-utf8", "IMPL-2.json") in found and ("not-utf8", "TODO_LIST.md") in found
