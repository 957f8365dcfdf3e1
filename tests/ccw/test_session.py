"""Reading CCW sessions in every layout into a WorkflowSpec, lazily, and discovering them (R-F5, R-E8)."""

from __future__ import annotations

import gc
import importlib.util
import json
import shutil
import tracemalloc
from pathlib import Path
from types import ModuleType

import pytest

from stepline.ccw._session import discover_sessions, find_session, load_ccw_session, read_ccw_session
from stepline.errors import NotFoundError, ReaderError, UsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ccw"
ACTIVE = FIXTURES / "project-active"
LEGACY = FIXTURES / "project-legacy"
AUTH = ACTIVE / ".workflow" / "active" / "WFS-auth-system"
PAYMENT = ACTIVE / ".workflow" / "active" / "WFS-payment-module"
FLAT = FIXTURES / "project-flat" / ".workflow" / "active" / "WFS-report-export"
SESSIONS = FIXTURES / "sessions"
BENCH_GEN = Path(__file__).resolve().parents[2] / "bench" / "ccw_gen.py"


def _ccw_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ccw_gen", BENCH_GEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy(src: Path, tmp_path: Path) -> Path:
    dest = tmp_path / ".workflow" / "active" / src.name
    shutil.copytree(src, dest)
    return dest


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


class TestLayouts:
    """Each layout reads into one ccw WorkflowSpec."""

    def test_active_session_becomes_a_workflow_spec(self) -> None:
        """One step per task in TODO_LIST order, with depends_on, group and the reader's meta."""
        spec = load_ccw_session(AUTH)
        assert (spec.format, spec.id, spec.name) == ("ccw", "WFS-auth-system", "Authentication System")
        assert [step.id for step in spec.steps] == ["IMPL-1", "IMPL-1.1", "IMPL-1.2", "IMPL-1.3", "IMPL-2",
                                                    "IMPL-3", "IMPL-4"]
        step = spec.step("IMPL-3")
        assert (step.depends_on, step.execution_group, step.name) == (["IMPL-1.3"], "parallel-db-schema",
                                                                      "Session store")
        assert step.meta["task_json"] == str(AUTH / ".task" / "IMPL-3.json")
        assert spec.step("IMPL-1").meta["container"] is True
        assert spec.step("IMPL-1").meta["children"] == ["IMPL-1.1", "IMPL-1.2", "IMPL-1.3"]
        assert spec.step("IMPL-1.2").meta["parent"] == "IMPL-1"
        assert spec.root == str(ACTIVE)

    def test_session_meta_carries_strategy_and_paths(self) -> None:
        """WorkflowSpec.meta names the session, layout, model, serialization, critical path and paths."""
        meta = load_ccw_session(AUTH).meta
        assert (meta["session_id"], meta["layout"], meta["task_schema"]) == ("WFS-auth-system", "active",
                                                                             "six-field")
        assert meta["execution_model"] == "parallel"
        assert meta["serialization"] == [["IMPL-2", "IMPL-3"]]
        assert meta["critical_path"] == ["IMPL-1.3", "IMPL-2", "IMPL-4"]
        assert meta["paths"]["todo_list"] == str(AUTH / "TODO_LIST.md")
        assert meta["paths"]["context_package"] == str(AUTH / ".process" / "context-package.json")
        assert meta["paths"]["plan_json"] is None

    def test_agents_are_declared_or_inferred(self) -> None:
        """meta.agent is kept; a task without one gets the agent its type implies."""
        spec = load_ccw_session(AUTH)
        assert spec.step("IMPL-1.2").meta["agent"] == "@code-developer"
        assert spec.step("IMPL-4").meta["agent"] == "@doc-generator"
        assert spec.step("IMPL-4").meta["agent_declared"] is False

    def test_legacy_layout(self) -> None:
        """A .workflow/WFS-* session reads as layout legacy; a plan without Section 4 names no model."""
        spec = load_ccw_session(LEGACY / ".workflow" / "WFS-user-auth")
        assert spec.meta["layout"] == "legacy"
        assert spec.meta["execution_model"] is None
        assert spec.step("IMPL-1").meta["status"] == "completed"

    def test_archived_layout(self) -> None:
        """A session under .workflow/archives reads as layout archived."""
        spec = load_ccw_session(ACTIVE / ".workflow" / "archives" / "WFS-old-feature")
        assert spec.meta["layout"] == "archived"

    def test_flat_2026_session_with_plan_json(self) -> None:
        """Flat task JSON and plan.json: schema flat, phases, groups from parallel_group, plan summary kept."""
        spec = load_ccw_session(FLAT)
        meta = spec.meta
        assert (meta["task_schema"], meta["execution_model"]) == ("flat", "phased")
        assert meta["execution_model_sources"] == {"impl_plan": "phased", "plan_json": None}
        assert meta["phases"]["IMPL-004"] == 2
        assert meta["plan"]["complexity"] == "Medium"
        assert spec.step("IMPL-004").execution_group == "2"
        assert spec.step("IMPL-003").phase == "Phase 2"
        assert spec.step("IMPL-003").meta["module"] == "Module A (Backend)"

    def test_detached_session_folder(self) -> None:
        """A session folder outside .workflow still reads, with no project root."""
        session = read_ccw_session(SESSIONS / "WFS-tdd-parser")
        assert (session.layout, session.project_root, session.strategy.model) == ("detached", None, "tdd")


class TestStatus:
    """Status spellings and the TODO_LIST/JSON relation."""

    def test_status_spellings_are_normalised(self) -> None:
        """A task JSON saying "active" is in_progress in the spec."""
        spec = load_ccw_session(PAYMENT)
        assert spec.step("IMPL-2").meta["status"] == "in_progress"
        assert spec.step("IMPL-2").meta["json_status"] == "in_progress"

    def test_container_status_follows_its_subtasks(self, tmp_path: Path) -> None:
        """A container is completed exactly when all its subtasks are."""
        assert read_ccw_session(AUTH).status["IMPL-1"] == "container"
        session_dir = _copy(AUTH, tmp_path)
        todo = session_dir / "TODO_LIST.md"
        todo.write_text(todo.read_text(encoding="utf-8").replace("- [ ]", "- [x]"), encoding="utf-8")
        assert read_ccw_session(session_dir).status["IMPL-1"] == "completed"

    def test_todo_box_decides_done_and_disagreement_is_recorded(self, tmp_path: Path) -> None:
        """TODO_LIST.md is the source of truth for done-or-not; a JSON that disagrees is listed as a conflict."""
        session_dir = _copy(PAYMENT, tmp_path)
        _edit_json(session_dir / ".task" / "IMPL-3.json", status="completed")
        todo = session_dir / "TODO_LIST.md"
        todo.write_text(todo.read_text(encoding="utf-8").replace("- [ ] **IMPL-1**", "- [x] **IMPL-1**"),
                        encoding="utf-8")
        session = read_ccw_session(session_dir)
        assert session.status["IMPL-1"] == "completed"
        assert session.status["IMPL-3"] == "pending"
        assert session.conflicts == ["IMPL-1", "IMPL-3"]
        assert session.to_workflow_spec().meta["status_conflicts"] == ["IMPL-1", "IMPL-3"]

    def test_without_todo_list_tasks_run_in_natural_id_order(self, tmp_path: Path) -> None:
        """Without TODO_LIST.md the order is by task id, IMPL-2 before IMPL-10."""
        session_dir = _copy(PAYMENT, tmp_path)
        (session_dir / "TODO_LIST.md").unlink()
        shutil.copy(session_dir / ".task" / "IMPL-3.json", session_dir / ".task" / "IMPL-10.json")
        _edit_json(session_dir / ".task" / "IMPL-10.json", id="IMPL-10")
        assert [s.id for s in load_ccw_session(session_dir).steps] == ["IMPL-1", "IMPL-2", "IMPL-3", "IMPL-10"]


class TestLaziness:
    """Task bodies are read when a task runs, never kept by the index."""

    def test_load_task_reads_the_whole_json(self) -> None:
        """load_task returns the full, validated task JSON."""
        task = read_ccw_session(AUTH).load_task("IMPL-1.3")
        assert task.data["flow_control"]["pre_analysis"][0]["step"] == "load_dependencies"

    def test_load_task_of_unknown_id(self) -> None:
        """Asking for a task the session does not have is NotFoundError."""
        with pytest.raises(NotFoundError, match="has no task IMPL-9"):
            read_ccw_session(AUTH).load_task("IMPL-9")

    def test_index_does_not_keep_padded_task_bodies(self, tmp_path: Path) -> None:
        """An index over 40 task JSONs of 100 KB each retains far less than one task body per task."""
        session_dir = _ccw_gen().generate_session(tmp_path, 40, seed=3, pad_bytes=100_000)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            session = read_ccw_session(session_dir)
            gc.collect()
            retained = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert len(session.tasks) == 40
        assert retained < 400_000, f"index retains {retained} bytes for 4 MB of task JSON"
        assert all(len(ref.title) <= 200 for ref in session.tasks.values())
        assert len(session.load_task("IMPL-7").data["context"]["notes"]) == 100_000


class TestErrors:
    """A session that cannot run is a ReaderError naming file:line and the fix."""

    def test_missing_session_file(self) -> None:
        """No workflow-session.json: the error names the file and how to recreate it."""
        with pytest.raises(ReaderError, match=r"workflow-session\.json is missing .*status \"active\""):
            read_ccw_session(SESSIONS / "WFS-broken")

    def test_cycle_names_the_tasks(self) -> None:
        """A dependency cycle is refused at load, naming the tasks in order."""
        with pytest.raises(ReaderError, match="dependency cycle: IMPL-1 → IMPL-2 → IMPL-3 → IMPL-1"):
            load_ccw_session(SESSIONS / "WFS-cycle")

    def test_corrupt_task_json(self) -> None:
        """A task JSON cut short is refused with its file and line."""
        with pytest.raises(ReaderError, match=r"WFS-corrupt/\.task/IMPL-2\.json:24: task JSON does not parse"):
            load_ccw_session(SESSIONS / "WFS-corrupt")

    def test_dangling_dependency(self, tmp_path: Path) -> None:
        """A depends_on naming a missing task points at the line in the task file."""
        session_dir = _copy(AUTH, tmp_path)
        data = json.loads((session_dir / ".task" / "IMPL-4.json").read_text(encoding="utf-8"))
        data["context"]["depends_on"].append("IMPL-99")
        (session_dir / ".task" / "IMPL-4.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
        with pytest.raises(ReaderError, match=r"IMPL-4\.json:\d+: task IMPL-4 depends on IMPL-99"):
            load_ccw_session(session_dir)

    def test_todo_line_naming_a_missing_task(self, tmp_path: Path) -> None:
        """A leaf TODO line without a task JSON is refused at its line."""
        session_dir = _copy(PAYMENT, tmp_path)
        (session_dir / ".task" / "IMPL-2.json").unlink()
        with pytest.raises(ReaderError, match=r"TODO_LIST\.md:5: TODO_LIST\.md names task IMPL-2"):
            load_ccw_session(session_dir)

    def test_duplicate_task_ids(self, tmp_path: Path) -> None:
        """Two task files with one id are refused."""
        session_dir = _copy(PAYMENT, tmp_path)
        shutil.copy(session_dir / ".task" / "IMPL-1.json", session_dir / ".task" / "IMPL-1-copy.json")
        with pytest.raises(ReaderError, match="task id IMPL-1 is also used by"):
            load_ccw_session(session_dir)

    def test_session_without_tasks(self, tmp_path: Path) -> None:
        """A session with neither task files nor TODO lines has nothing to run."""
        session_dir = tmp_path / "WFS-empty"
        session_dir.mkdir()
        (session_dir / "workflow-session.json").write_text('{"session_id": "WFS-empty"}', encoding="utf-8")
        with pytest.raises(ReaderError, match="session has no tasks"):
            load_ccw_session(session_dir)

    def test_missing_folder(self, tmp_path: Path) -> None:
        """A folder that does not exist is NotFoundError."""
        with pytest.raises(NotFoundError, match="no CCW session folder"):
            load_ccw_session(tmp_path / "WFS-nope")


class TestDiscovery:
    """Session discovery and selection by id (R-E8)."""

    def test_active_sessions_with_progress(self) -> None:
        """Active sessions are listed as ``id | project | done/total (%)``."""
        lines = [info.format_line() for info in discover_sessions(ACTIVE)]
        assert lines == ["WFS-auth-system | Authentication System | 1/6 tasks (16%)",
                         "WFS-payment-module | Payment Integration | 0/3 tasks (0%)"]

    def test_inactive_sessions_on_request(self) -> None:
        """Archived and unmarked legacy sessions appear only with include_inactive."""
        infos = discover_sessions(ACTIVE, include_inactive=True)
        assert [(i.id, i.layout, i.active) for i in infos][-1] == ("WFS-old-feature", "archived", False)

    def test_legacy_markers(self) -> None:
        """Legacy sessions are active when a .active-* marker names them; orphan markers are ignored."""
        assert [i.id for i in discover_sessions(LEGACY)] == ["WFS-user-auth"]
        infos = discover_sessions(LEGACY, include_inactive=True)
        assert {(i.id, i.active, i.status) for i in infos} == {("WFS-user-auth", True, "active"),
                                                              ("WFS-paused-work", False, "paused")}

    def test_no_session_names_the_fix(self, tmp_path: Path) -> None:
        """Zero sessions is NotFoundError telling how to create one."""
        with pytest.raises(NotFoundError, match=r"no active CCW workflow session .*/workflow:plan"):
            discover_sessions(tmp_path)

    def test_find_by_full_partial_and_case_insensitive_id(self) -> None:
        """Full ids, unique partial ids and different case all select the session."""
        assert find_session(ACTIVE, "WFS-auth-system").id == "WFS-auth-system"
        assert find_session(ACTIVE, "payment").id == "WFS-payment-module"
        assert find_session(ACTIVE, "wfs-AUTH-system").id == "WFS-auth-system"
        assert find_session(LEGACY, "paused").layout == "legacy"

    def test_ambiguous_partial_id_lists_candidates(self) -> None:
        """A partial id matching several active sessions is a UsageError naming them."""
        with pytest.raises(UsageError, match="matches several sessions: WFS-auth-system, WFS-payment-module"):
            find_session(ACTIVE, "WFS-")

    def test_unknown_id_suggests_close_matches(self) -> None:
        """An id matching nothing is NotFoundError with a did-you-mean."""
        with pytest.raises(NotFoundError, match="did you mean WFS-payment-module"):
            find_session(ACTIVE, "WFS-paymnt-module")

    def test_active_match_beats_archived_one(self, tmp_path: Path) -> None:
        """When a partial id matches one active and one archived session, the active one is chosen."""
        for folder in ("active/WFS-login", "archives/WFS-login-v1"):
            (tmp_path / ".workflow" / folder).mkdir(parents=True)
        info = find_session(tmp_path, "login")
        assert (info.id, info.active, info.project) == ("WFS-login", True, "Unknown")
