"""Planning CCW tasks into waves: Kahn levels, groups, models, serialization, containers (R-E7)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stepline.ccw._session import load_ccw_session
from stepline.ccw._waves import DagTask, TaskGraph, Wave, plan_waves, plan_workflow_waves, tasks_from_spec
from stepline.errors import NotFoundError, ReaderError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ccw"
AUTH = FIXTURES / "project-active" / ".workflow" / "active" / "WFS-auth-system"
FLAT = FIXTURES / "project-flat" / ".workflow" / "active" / "WFS-report-export"


def T(task_id: str, *deps: str, group: str | None = None, parent: str | None = None,
      container: bool = False) -> DagTask:
    return DagTask(id=task_id, depends_on=deps, execution_group=group, parent=parent, is_container=container)


def ids(waves: list[Wave]) -> list[list[str]]:
    return [list(wave.tasks) for wave in waves]


DIAMOND = [T("A"), T("B", "A"), T("C", "A"), T("D", "B", "C"), T("E")]


def _random_tasks(n: int, seed: int) -> list[DagTask]:
    rng = random.Random(seed)
    tasks = []
    for k in range(n):
        deps = tuple(f"T{d}" for d in rng.sample(range(k), min(k, rng.randint(0, 3))))
        tasks.append(T(f"T{k}", *deps, group=rng.choice([None, "g1", "g2"])))
    rng.shuffle(tasks)
    return tasks


def _assert_valid(tasks: list[DagTask], waves: list[Wave]) -> dict[str, int]:
    wave_of = {task_id: wave.index for wave in waves for task_id in wave.tasks}
    assert sorted(wave_of) == sorted(t.id for t in tasks)
    assert sum(len(w.tasks) for w in waves) == len(tasks)
    for task in tasks:
        assert all(wave_of[dep] < wave_of[task.id] for dep in task.depends_on)
    return wave_of


class TestWaves:
    """Kahn waves and execution groups."""

    def test_diamond_levels(self) -> None:
        """Tasks whose dependencies are done share a wave; independent tasks start at once."""
        assert ids(plan_waves(DIAMOND)) == [["A", "E"], ["B", "C"], ["D"]]

    def test_parallel_model_is_the_plain_dag(self) -> None:
        """The parallel model and no model both give the Kahn waves."""
        assert ids(plan_waves(DIAMOND, "parallel")) == ids(plan_waves(DIAMOND, None))

    def test_groups_by_execution_group(self) -> None:
        """Tasks of a wave are grouped by execution_group; a task without one is its own group."""
        (wave,) = plan_waves([T("A", group="api"), T("B"), T("C", group="api")])
        assert [(g.key, g.execution_group, g.tasks) for g in wave.groups] == [
            ("api", "api", ("A", "C")), ("B", None, ("B",))]

    def test_priority_starts_critical_path_first(self) -> None:
        """Critical-path tasks come first inside their wave; the rest keep document order."""
        assert ids(plan_waves(DIAMOND, priority=["C", "E"])) == [["E", "A"], ["C", "B"], ["D"]]

    def test_random_graphs_respect_dependencies(self) -> None:
        """Every task is planned once, after all its dependencies, for every model."""
        for seed in range(5):
            tasks = _random_tasks(200, seed)
            for model in (None, "parallel", "phased", "sequential", "tdd"):
                _assert_valid(tasks, plan_waves(tasks, model))

    def test_completed_tasks_are_not_planned(self) -> None:
        """A resumed plan leaves out completed tasks and keeps the rest in order."""
        assert ids(plan_waves(DIAMOND, completed={"A", "B"})) == [["C", "E"], ["D"]]


class TestSequential:
    """Sequential and TDD models run one task at a time."""

    @pytest.mark.parametrize("model", ["sequential", "tdd"])
    def test_one_task_per_wave_in_topological_document_order(self, model: str) -> None:
        """Ready tasks run one by one, the earliest in the document first."""
        assert ids(plan_waves(DIAMOND, model)) == [["A"], ["B"], ["C"], ["D"], ["E"]]  # type: ignore[arg-type]

    def test_dependencies_override_document_order(self) -> None:
        """A task listed first still waits for a dependency listed later."""
        assert ids(plan_waves([T("B", "A"), T("A")], "sequential")) == [["A"], ["B"]]


class TestSerializationAndPhases:
    """The strategy can only make the plan more sequential."""

    def test_serialized_tasks_never_share_a_wave(self) -> None:
        """At most one task of a serialization requirement runs per wave."""
        assert ids(plan_waves(DIAMOND, "parallel", [["B", "C"]])) == [["A", "E"], ["B"], ["C"], ["D"]]

    def test_overlapping_requirements_merge(self) -> None:
        """Requirements sharing a task form one exclusion group."""
        tasks = [T("A"), T("B"), T("C"), T("D")]
        assert ids(plan_waves(tasks, "parallel", [["A", "B"], ["B", "C"]])) == [["A", "D"], ["B"], ["C"]]

    def test_serialization_of_a_container_covers_its_subtasks(self) -> None:
        """Naming a container serializes its leaf subtasks with the other named tasks."""
        tasks = [T("P", container=True), T("P.1", parent="P"), T("P.2", parent="P"), T("Q")]
        assert ids(plan_waves(tasks, "parallel", [["P", "Q"]])) == [["P.1"], ["P.2"], ["Q"]]

    def test_serialization_never_loosens(self) -> None:
        """Adding serialization requirements never puts a task in an earlier wave."""
        tasks = _random_tasks(150, 7)
        plain = _assert_valid(tasks, plan_waves(tasks))
        strict = _assert_valid(tasks, plan_waves(tasks, "parallel", [["T1", "T2", "T3"], ["T4", "T5"]]))
        assert all(strict[task_id] >= plain[task_id] for task_id in plain)

    def test_phases_are_barriers_only_for_the_phased_model(self) -> None:
        """Under phased, no task of phase 2 starts before phase 1 is done; other models ignore phases."""
        tasks = [T("A"), T("B", "A"), T("C")]
        phases = {"A": 1, "B": 1, "C": 2}
        assert ids(plan_waves(tasks, "phased", phases=phases)) == [["A"], ["B"], ["C"]]
        assert ids(plan_waves(tasks, "parallel", phases=phases)) == [["A", "C"], ["B"]]

    def test_phases_contradicting_dependencies_are_an_error(self) -> None:
        """A phase-1 task depending on a phase-2 task cannot be planned; the error names the cycle."""
        with pytest.raises(ReaderError, match=r"phases contradict the dependencies: .*end of phase"):
            plan_waves([T("A", "B"), T("B")], "phased", phases={"A": 1, "B": 2})


class TestContainers:
    """Containers complete with their subtasks and are never planned themselves."""

    TASKS = (T("X"), T("P", "X", container=True), T("P.1", parent="P"), T("P.2", "P.1", parent="P"),
             T("Y", "P"))

    def test_subtasks_wait_for_the_container_dependencies(self) -> None:
        """Subtasks start after the container's dependencies; dependents wait for every subtask."""
        waves = plan_waves(self.TASKS)
        assert ids(waves) == [["X"], ["P.1"], ["P.2"], ["Y"]]
        assert [w.containers_completed for w in waves] == [(), (), ("P",), ()]

    def test_container_already_complete_is_reported_first(self) -> None:
        """When every subtask is done, a leading empty wave reports the container complete."""
        waves = plan_waves(self.TASKS, completed={"X", "P.1", "P.2"})
        assert [(w.tasks, w.containers_completed) for w in waves] == [((), ("P",)), (("Y",), ())]

    def test_graph_views(self) -> None:
        """The graph lists containers and their direct subtasks."""
        graph = TaskGraph(self.TASKS)
        assert graph.containers == ["P"]
        assert graph.children_of("P") == ["P.1", "P.2"]
        assert graph.children_of("X") == []

    def test_subtask_depending_on_its_container_is_a_cycle(self) -> None:
        """A subtask cannot wait for the container that waits for it."""
        with pytest.raises(ReaderError, match=r"dependency cycle: P → P\.1 → P"):
            TaskGraph([T("P", container=True), T("P.1", "P", parent="P")])


class TestDependents:
    """Skip propagation follows real dependencies only."""

    def test_dependents_through_containers(self) -> None:
        """A failed task takes its dependents, a container depending on it, its subtasks and their dependents."""
        graph = TaskGraph(tasks_from_spec(load_ccw_session(FIXTURES / "sessions" / "WFS-failing-deps")))
        assert graph.dependents_of("IMPL-1") == ["IMPL-2", "IMPL-3", "IMPL-5", "IMPL-5.1", "IMPL-6"]
        assert graph.dependents_of("IMPL-5.2") == ["IMPL-5", "IMPL-6"]
        assert graph.dependents_of("IMPL-4") == []

    def test_serialization_is_not_a_dependency(self) -> None:
        """dependents_of ignores ordering constraints; it is about what cannot run, not what waits."""
        assert TaskGraph(DIAMOND).dependents_of("B") == ["D"]

    def test_unknown_task(self) -> None:
        """Asking about a task that is not in the graph is NotFoundError."""
        with pytest.raises(NotFoundError):
            TaskGraph(DIAMOND).dependents_of("Z")


class TestErrors:
    """Graph errors name the tasks."""

    def test_cycle(self) -> None:
        """A cycle names its tasks in dependency order."""
        with pytest.raises(ReaderError, match="dependency cycle: A → C → B → A"):
            plan_waves([T("A", "B"), T("B", "C"), T("C", "A")])

    def test_dangling_dependencies_and_parents(self) -> None:
        """Every dependency or parent naming a missing task is listed in one error."""
        with pytest.raises(ReaderError, match="A → Z, B → parent Q"):
            plan_waves([T("A", "Z"), T("B", parent="Q")])

    def test_duplicate_ids(self) -> None:
        """Two tasks with one id are refused."""
        with pytest.raises(ReaderError, match="task id A appears twice"):
            plan_waves([T("A"), T("A")])


class TestScale:
    """Large graphs plan without recursion limits (timings live in bench/, not here)."""

    def test_ten_thousand_task_chain(self) -> None:
        """A 10,000-deep chain plans into 10,000 waves and reports a 10,000-long cycle when closed."""
        chain = [T("T0")] + [T(f"T{k}", f"T{k - 1}") for k in range(1, 10_000)]
        assert len(plan_waves(chain)) == 10_000
        with pytest.raises(ReaderError, match="dependency cycle"):
            TaskGraph([T("T0", "T9999"), *chain[1:]])

    def test_ten_thousand_random_tasks(self) -> None:
        """A random 10,000-task DAG plans with every dependency respected."""
        tasks = _random_tasks(10_000, 11)
        _assert_valid(tasks, plan_waves(tasks, "parallel", [["T1", "T2"]], priority=["T3"]))


class TestFromSpec:
    """Planning a WorkflowSpec read from a session."""

    def test_auth_session_plan(self) -> None:
        """The fixture session's strategy (parallel, IMPL-2/IMPL-3 serialized, critical path) shapes the waves."""
        waves = plan_workflow_waves(load_ccw_session(AUTH))
        assert ids(waves) == [["IMPL-1.3", "IMPL-1.2"], ["IMPL-2"], ["IMPL-3"], ["IMPL-4"]]
        assert waves[0].containers_completed == ("IMPL-1",)
        assert [g.key for g in waves[0].groups] == ["parallel-db-schema", "parallel-ui-comp"]

    def test_flat_phased_session_plan(self) -> None:
        """The flat session's phases hold IMPL-004 back until phase 1 is done."""
        assert ids(plan_workflow_waves(load_ccw_session(FLAT), completed=())) == [
            ["IMPL-001", "IMPL-002"], ["IMPL-003", "IMPL-004"], ["IMPL-005"]]

    def test_tasks_from_spec_reads_container_meta(self) -> None:
        """tasks_from_spec carries parent and container flags from step meta."""
        tasks = {t.id: t for t in tasks_from_spec(load_ccw_session(AUTH))}
        assert tasks["IMPL-1"].is_container and tasks["IMPL-1.2"].parent == "IMPL-1"
