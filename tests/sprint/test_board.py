"""The sprint board reader/writer, the story plan, the project locator and `sprint run --dry-run`/`status`."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from sprint_kit import ARTIFACTS, BMAD, BOARD, make_project

from stepline.errors import NotFoundError, ReaderError, RunStateError
from stepline.interfaces.cli._app import run_cli
from stepline.sprint import find_project, plan_stories, read_board, set_status

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not BMAD.is_dir(), reason=f"no BMAD release at {BMAD}")]

OLD_ERA = BMAD.parent / "v6.0.0-alpha.23"


def _board(tmp_path: Path, text: str = BOARD) -> Path:
    path = tmp_path / "sprint-status.yaml"
    path.write_text(text.format(artifacts="stories"))
    return path


def test_the_board_lists_epics_stories_and_retrospectives_in_sprint_order(tmp_path: Path) -> None:
    board = read_board(_board(tmp_path))
    assert [s.key for s in board.stories] == ["1-1-add", "1-2-sub", "1-3-mul", "1-4-div", "2-1-mod"]
    assert board.entry("epic-2") is not None and board.entry("epic-2").kind == "epic"  # type: ignore[union-attr]
    assert board.entry("epic-1-retrospective").kind == "retrospective"  # type: ignore[union-attr]
    assert board.entry("1-3-mul").epic == 1 and board.entry("1-3-mul").line == 14  # type: ignore[union-attr]
    assert board.story_location == "stories"


def test_a_bad_board_is_one_error_naming_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ReaderError, match=r"sprint-status.yaml:13: 1-2-sub: unknown story status 'doing'"):
        read_board(_board(tmp_path, BOARD.replace("1-2-sub: ready-for-dev", "1-2-sub: doing")))
    with pytest.raises(ReaderError, match="no 'development_status:'"):
        read_board(_board(tmp_path, "project: x\n"))
    with pytest.raises(NotFoundError, match="no sprint board here"):
        read_board(tmp_path / "missing.yaml")


def test_a_status_only_moves_forward_and_the_rest_of_the_file_is_kept(tmp_path: Path) -> None:
    path = _board(tmp_path)
    lock = tmp_path / "board.lock"
    assert set_status(path, "1-1-add", "done", lock_path=lock)
    assert not set_status(path, "1-1-add", "in-progress", lock_path=lock)  # never backwards
    assert not set_status(path, "1-1-add", "done", lock_path=lock)
    text = path.read_text()
    assert "  1-1-add: done  # the honest one\n" in text and "# generated: 11-25-2026 10:00" in text
    assert text.replace("1-1-add: done", "1-1-add: ready-for-dev").splitlines()[4:] == \
        BOARD.format(artifacts="stories").splitlines()[4:]  # only that line (and last_updated) changed
    assert read_board(path).entry("1-1-add").status == "done"  # type: ignore[union-attr]


def test_writers_take_turns_and_no_update_is_lost(tmp_path: Path) -> None:
    path = _board(tmp_path)
    keys = ["1-1-add", "1-2-sub", "1-3-mul", "1-4-div", "2-1-mod"]
    threads = [threading.Thread(target=set_status, args=(path, key, "review"), kwargs={"lock_path": tmp_path / "l"})
               for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    board = read_board(path)
    assert all(board.entry(key).status == "review" for key in keys)  # type: ignore[union-attr]
    assert not list(tmp_path.glob("*.tmp*"))


def test_the_plan_takes_ready_stories_in_order_and_honours_the_filters(tmp_path: Path) -> None:
    board = read_board(_board(tmp_path, BOARD.replace("1-2-sub: ready-for-dev", "1-2-sub: done")
                              .replace("2-1-mod: backlog", "2-1-mod: ready-for-dev")))
    assert plan_stories(board) == ["1-1-add", "1-3-mul", "1-4-div", "2-1-mod"]
    assert plan_stories(board, epic=2) == ["2-1-mod"]
    assert plan_stories(board, max_stories=2) == ["1-1-add", "1-3-mul"]
    assert plan_stories(board, story="1-3") == ["1-3-mul"]
    assert plan_stories(board, settled={"1-1-add"}, unfinished={"1-2-sub"}) == ["1-2-sub", "1-3-mul", "1-4-div",
                                                                                "2-1-mod"]
    with pytest.raises(NotFoundError, match="epic 7 has no stories"):
        plan_stories(board, epic=7)
    with pytest.raises(NotFoundError, match="'9-9' names no single story"):
        plan_stories(board, story="9-9")
    # a story asked for by name that is not taken says why, rather than "nothing to do"
    with pytest.raises(RunStateError, match="1-2-sub is not taken: its status is done, not ready-for-dev"):
        plan_stories(board, story="1-2")
    with pytest.raises(RunStateError, match="1-3-mul is not taken: an earlier loop settled it"):
        plan_stories(board, story="1-3", settled={"1-3-mul"})


def test_the_project_finds_the_dev_workflow_of_each_era_and_the_review_layers(tmp_path: Path) -> None:
    from stepline.bmad import install_bmad

    new = make_project(tmp_path / "new")
    project = find_project(new)
    assert project.dev is not None and project.dev.name == "bmad-build-auto" and project.dev.era == "skill"
    assert [layer.id for layer in project.dev.review_layers] == [
        "blind-hunter", "edge-case-hunter", "verification-gap", "intent-alignment"]
    assert project.board_path == new / ARTIFACTS / "sprint-status.yaml"
    story = project.story_file("1-2-sub")
    assert story is not None and story.status == "ready-for-dev"
    custom = new / "_bmad" / "custom" / "bmad-build-auto.toml"  # a team override: one layer off, one added
    custom.write_text("[[workflow.review_layers]]\nid = 'blind-hunter'\ninstruction = ''\n\n"
                      "[[workflow.review_layers]]\nid = 'security'\nname = 'Security'\n"
                      "instruction = 'Look: {diff_output}'\n")
    assert [layer.id for layer in find_project(new).dev.review_layers] == [  # type: ignore[union-attr]
        "edge-case-hunter", "verification-gap", "intent-alignment", "security"]
    old = tmp_path / "old"
    install_bmad(OLD_ERA, old, {})
    dev = find_project(old).dev
    assert dev is not None and dev.name == "dev-story" and dev.era == "legacy" and dev.path.name == "workflow.yaml"
    (old / ARTIFACTS).mkdir(parents=True)
    (old / ARTIFACTS / "1-1-add.md").write_text("# Story 1.1: Add\n\nStatus: Ready for Review\n")
    assert find_project(old).story_file("1-1-add").status == "ready for review"  # type: ignore[union-attr]


def test_dry_run_prints_the_plan_and_status_shows_the_board(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p", layers=None)
    assert run_cli(["sprint", "run", "--dry-run", "--epic", "1", "--max-stories", "3", "-C", str(root), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [s["key"] for s in plan["stories"]] == ["1-1-add", "1-2-sub", "1-3-mul"]
    assert plan["review_layers"] == ["blind-hunter", "edge-case-hunter", "verification-gap", "intent-alignment"]
    assert plan["dev_workflow"].endswith("bmad-build-auto/SKILL.md") and plan["verify_commands"]
    assert not (root / ".stepline" / "runs").exists()  # a dry run runs nothing
    assert run_cli(["sprint", "status", "-C", str(root), "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)["entries"]}
    assert rows["1-1-add"]["status"] == "ready-for-dev" and rows["1-1-add"]["run"] is None
    assert rows["epic-2"]["kind"] == "epic"
    (root / "config" / "sprint.yaml").write_text("verify:\n  comands: [x]\n")
    assert run_cli(["sprint", "run", "--dry-run", "-C", str(root)]) == 4
    assert "sprint.yaml:2: verify.comands: Extra inputs are not permitted" in capsys.readouterr().err
