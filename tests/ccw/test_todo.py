"""TODO_LIST.md: task lines with positions, containers, nesting, modules, and one-line rewrites."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline.ccw._todo import (
    mark_todo_completed,
    parse_todo_text,
    read_todo_file,
    read_todo_list,
    render_todo_line_completed,
)
from stepline.errors import ReaderError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ccw"
AUTH_TODO = FIXTURES / "project-active" / ".workflow" / "active" / "WFS-auth-system" / "TODO_LIST.md"
FLAT_TODO = FIXTURES / "project-flat" / ".workflow" / "active" / "WFS-report-export" / "TODO_LIST.md"


def test_entries_carry_state_links_and_positions() -> None:
    """Each task line gives its id, state, title, links, line number and checkbox column."""
    todo = read_todo_list(AUTH_TODO)
    assert [entry.task_id for entry in todo.entries] == ["IMPL-1", "IMPL-1.1", "IMPL-1.2", "IMPL-1.3", "IMPL-2",
                                                        "IMPL-3", "IMPL-4"]
    done = todo.by_id["IMPL-1.1"]
    assert (done.state, done.line, done.title) == ("completed", 5, "Build auth API")
    assert done.task_href == "./.task/IMPL-1.1.json"
    assert done.summary_href == "./.summaries/IMPL-1.1-summary.md"
    assert done.text[done.mark_col or 0] == "x"


def test_container_and_two_level_nesting() -> None:
    """A ▸ line is a container and the indented lines under it are its subtasks."""
    todo = read_todo_list(AUTH_TODO)
    assert todo.by_id["IMPL-1"].is_container
    assert [e.task_id for e in todo.entries if e.parent == "IMPL-1"] == ["IMPL-1.1", "IMPL-1.2", "IMPL-1.3"]
    assert todo.by_id["IMPL-2"].parent is None
    assert todo.containers == {"IMPL-1"}


def test_progress_counts_leaf_tasks_only() -> None:
    """done/total counts leaf task lines; legend lines and containers are not tasks."""
    assert read_todo_list(AUTH_TODO).progress() == (1, 6)


def test_module_headings_become_sections() -> None:
    """Multi-module lists record the module heading of each task; cross-module notes are not tasks."""
    todo = read_todo_list(FLAT_TODO)
    assert todo.by_id["IMPL-003"].section == "Module A (Backend)"
    assert todo.by_id["IMPL-005"].section == "Module B (Frontend)"
    assert len(todo.entries) == 5


def test_checkbox_parent_with_indented_children_is_a_container() -> None:
    """A checkbox line with indented subtasks counts as their container."""
    todo = parse_todo_text("- [ ] **IMPL-1**: parent\n  - [ ] **IMPL-1.1**: child\n", Path("TODO_LIST.md"))
    assert todo.by_id["IMPL-1.1"].parent == "IMPL-1"
    assert todo.containers == {"IMPL-1"}


def test_tolerant_line_shapes_and_code_fences() -> None:
    """Plain ids, in-progress marks and * bullets are read; lines inside code fences are not."""
    text = "* [~] IMPL-1: running\n- [X] **IMPL-2** done\n```\n- [ ] **IMPL-9**: example\n```\n- `- [ ]` = legend\n"
    todo = parse_todo_text(text, Path("TODO_LIST.md"))
    assert [(e.task_id, e.state) for e in todo.entries] == [("IMPL-1", "in_progress"), ("IMPL-2", "completed")]


def test_duplicates_are_kept_apart() -> None:
    """A task listed twice keeps its first line; the repeat is reported in duplicates."""
    todo = parse_todo_text("- [ ] **A-1**: x\n- [x] **A-1**: again\n", Path("TODO_LIST.md"))
    assert todo.by_id["A-1"].line == 1
    assert [dup.line for dup in todo.duplicates] == [2]


def test_render_ticks_the_box_and_adds_the_summary_link_once() -> None:
    """Completing a line ticks its box and appends the summary link after the task link."""
    todo = read_todo_list(AUTH_TODO)
    line = render_todo_line_completed(todo.by_id["IMPL-2"], "./.summaries/IMPL-2-summary.md")
    assert line == ("- [x] **IMPL-2**: Integration tests → [📋](./.task/IMPL-2.json) | "
                    "[✅](./.summaries/IMPL-2-summary.md)")
    again = render_todo_line_completed(todo.by_id["IMPL-1.1"], "./.summaries/IMPL-1.1-summary.md")
    assert again == todo.by_id["IMPL-1.1"].text


def test_mark_completed_changes_exactly_one_line() -> None:
    """mark_todo_completed rewrites the task's line and leaves every other byte (CRLF too) untouched."""
    original = AUTH_TODO.read_text(encoding="utf-8").replace("\n", "\r\n")
    updated = mark_todo_completed(original, "IMPL-1.2")
    before, after = original.split("\r\n"), updated.split("\r\n")
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [5]
    assert after[5] == ("  - [x] **IMPL-1.2**: Build user UI → [📋](./.task/IMPL-1.2.json) | "
                        "[✅](./.summaries/IMPL-1.2-summary.md)")


def test_mark_completed_refuses_containers_and_unknown_ids() -> None:
    """A container line has no box, and an id without a line is an error, not a silent no-op."""
    text = AUTH_TODO.read_text(encoding="utf-8")
    with pytest.raises(ReaderError, match="container"):
        mark_todo_completed(text, "IMPL-1")
    with pytest.raises(ReaderError, match="no line for task IMPL-99"):
        mark_todo_completed(text, "IMPL-99")


def test_line_without_links_gets_an_arrow_link() -> None:
    """A bare task line gets ``→ [✅](…)`` so it keeps the TODO_LIST link shape."""
    text = "- [ ] **IMPL-1**: bare\n"
    assert mark_todo_completed(text, "IMPL-1") == "- [x] **IMPL-1**: bare → [✅](./.summaries/IMPL-1-summary.md)\n"


def test_a_version_read_before_is_not_parsed_again_and_an_edit_is(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The session index and the run's writer read the same TODO_LIST.md: the second read of an unchanged
    file reuses the parse; any edit (here one of the same size, in place) is a new version, parsed anew."""
    import stepline.ccw._todo as todo_module

    path = tmp_path / "TODO_LIST.md"
    path.write_text("- [ ] **IMPL-1**: One\n- [ ] **IMPL-2**: Two\n", encoding="utf-8")
    parses: list[str] = []
    real = todo_module.parse_todo_text
    monkeypatch.setattr(todo_module, "parse_todo_text", lambda text, p: parses.append(text) or real(text, p))
    first = read_todo_file(path)
    assert read_todo_file(path)[1] is first[1] and len(parses) == 1
    import os

    stat = path.stat()
    with open(path, "r+", encoding="utf-8") as file:
        file.write("- [x]")  # same size, same inode: only the mtime tells
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    text, todo, _ = read_todo_file(path)
    assert len(parses) == 2 and todo.by_id["IMPL-1"].state == "completed" and text.startswith("- [x]")
