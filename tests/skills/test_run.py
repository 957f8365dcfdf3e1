"""Running skills: runtime activation, just-in-time step files, routes decided and journaled, intent, shims,
scripts through the tool pipeline."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine
from stepline.executors import StepSession
from stepline.families import load_workflow, register_drivers
from stepline.model import Event, Run, StepStatus

from .conftest import Recorder

register_drivers()


def _run(project: Path, path: Path, executor: Recorder, variables: dict[str, Any] | None = None,
         mode: str | None = None) -> tuple[Run, list[Event]]:
    engine = Engine(project_root=project, executor=executor, mode="yolo")
    workflow = load_workflow(path, project_root=project, variables=variables, mode=mode)
    run = asyncio.run(engine.start(workflow, variables))
    return run, list(engine.store.open(run.run_id).events())


def _calls(events: list[Event], op: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "CallRecorded" and e.data.get("op") == op]


def _path(run: Run) -> list[str]:
    return [sid for sid, step in run.steps.items() if step.status == StepStatus.COMPLETED]


def test_a_route_shown_by_a_status_is_decided_by_the_runtime(mini: Path) -> None:
    """spec_file names a spec whose status the step's route line maps: the runtime takes that route, unasked."""
    (mini / "out").mkdir()
    (mini / "out" / "spec.md").write_text("---\ntitle: x\nstatus: in-review\n---\n# Spec\n", encoding="utf-8")
    recorder = Recorder()
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", recorder, {"spec_file": "out/spec.md"})
    assert run.status == "completed"
    assert _path(run) == ["activate", "on-activation", "step-01-route", "step-04-review"]
    route = _calls(events, "route")[0]["result"]
    assert route["next"] == "step-04-review" and route["by"] == "runtime"
    assert "status 'in-review'" in route["reason"] and "step-01-route.md:12" in route["reason"]
    assert [r.step_id for r in recorder.requests if r.kind == "decide"] == ["step-04-review"]  # only the loop


def test_other_routes_are_the_executors_decisions(mini: Path) -> None:
    """Without a status fact each alternative route is a decide request; a yes takes it, a loop revisits a step."""
    answers = {"step-01-route:step-03-do.md": [True], "step-04-review:step-03-do.md": [True, False]}

    class Deciding(Recorder):
        async def perform(self, request: Any, session: StepSession) -> None:
            if request.kind == "decide":
                self.requests.append(request)
                key = request.step_id.split("@")[0] + ":" + request.title.split(" to ")[-1]
                queue = answers.get(key, [])
                await session.decide(queue.pop(0) if queue else False, f"answer for {key}")
                return
            await super().perform(request, session)

    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", Deciding())
    assert _path(run) == ["activate", "on-activation", "step-01-route", "step-03-do", "step-04-review",
                          "step-03-do@2", "step-04-review@2"]
    assert run.steps["step-02-plan"].status == StepStatus.SKIPPED
    routes = [(c["key"].split("/")[0], c["result"]["next"], c["result"]["by"]) for c in _calls(events, "route")]
    assert routes == [("step-01-route", "step-03-do", "executor"), ("step-03-do", "step-04-review", "runtime"),
                      ("step-04-review", "step-03-do", "executor"), ("step-03-do@2", "step-04-review", "runtime"),
                      ("step-04-review@2", None, "runtime")]


def test_just_in_time_the_executor_holds_only_the_current_step(mini: Path) -> None:
    """Each step file is handed over when its step runs, never earlier; a reference is not inlined."""
    recorder = Recorder()
    _, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", recorder)
    titles = {"step-01-route": "# Step 1: Route", "step-02-plan": "# Step 2: Plan", "step-03-do": "# Step 3: Do",
              "step-04-review": "# Step 4: Review"}
    for request in recorder.work():  # a step's file, or nothing (the request for its checkpoint's choice)
        held = [step for step, title in titles.items() if title in request.content]
        assert held in ([request.step_id], []), request.step_id
    assert {r.step_id for r in recorder.work() if any(t in r.content for t in titles.values())} == set(titles)
    review = next(r for r in recorder.work() if r.step_id == "step-04-review")
    assert "references/guide.md" in review.content and "Look for missing tests." not in review.content
    started: set[str] = set()
    for event in events:
        if event.type == "WorkflowStepStarted":
            started.add(str(event.step_id))
        if event.type == "CallRecorded" and event.data["op"] == "handover" and event.data["args"]["role"] == "step":
            step = Path(event.data["args"]["path"]).stem
            assert step in started and event.step_id == step, "a step file was handed over before its turn"
    assert len([c for c in _calls(events, "handover") if c["args"]["role"] == "step"]) == 4


def test_activation_is_the_runtimes_and_instructions_are_steps(mini: Path) -> None:
    """Customization layers journaled, facts read from file: globs, prepend/append entries run as steps, and the
    step text is rendered with the customization and config values."""
    (mini / "docs").mkdir()
    (mini / "docs" / "house-rules.md").write_text("Tabs are forbidden.\n", encoding="utf-8")
    for ignored in ("node_modules/pkg", ".cache", "_bmad/mini"):  # not the project's own facts
        (mini / ignored).mkdir(parents=True, exist_ok=True)
        (mini / ignored / "house-rules.md").write_text("not a fact\n", encoding="utf-8")
    (mini / "_bmad" / "custom" / "tiny-build.toml").write_text(
        '[workflow]\nactivation_steps_prepend = ["Check out a branch."]\ngreeting = "Hi from the team"\n',
        encoding="utf-8")
    recorder = Recorder()
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", recorder)
    assert _path(run)[:4] == ["activate", "prepend-1", "on-activation", "step-01-route"]
    assert next(r for r in recorder.work() if r.step_id == "prepend-1").content == "Check out a branch."
    custom = _calls(events, "customization")[0]
    assert [Path(p).name for p in custom["args"]["layers"]] == ["customize.toml", "tiny-build.toml"]
    assert custom["result"]["values"]["greeting"] == "Hi from the team"
    facts = run.variables["persistent_facts"]
    assert {"fact": "Prefer small diffs."} in facts
    assert [f["path"] for f in facts if f.get("path")] == [str(mini / "docs" / "house-rules.md")]
    assert any(f.get("path", "") and f["text"] == "Tabs are forbidden.\n" for f in facts)
    plan = next(r for r in recorder.work() if r.step_id == "step-02-plan")
    assert "Greeting: Hi from the team." in plan.content
    route = next(r for r in recorder.work() if r.step_id == "step-01-route")
    assert f"Speak in `English`; work goes to `{mini}/out/work`" in route.content
    assert all(r.variables["persistent_facts"] == facts for r in recorder.work()[1:])


@pytest.mark.parametrize("entry", ["file:/etc/hostname", "file:../outside/*.md"])
def test_a_fact_file_outside_the_project_fails_activation_saying_so(mini: Path, entry: str) -> None:
    """persistent_facts' file: entries are "paths or globs under {project-root}": one naming a file elsewhere is
    not read into every request; the run fails at activation naming the entry."""
    (mini / "_bmad" / "custom" / "tiny-build.toml").write_text(f'[workflow]\npersistent_facts = ["{entry}"]\n',
                                                                encoding="utf-8")
    run, _ = _run(mini, mini / "_bmad" / "mini" / "tiny-build", Recorder())
    assert run.status.value == "failed"
    error = run.steps["activate"].error or ""
    assert entry in error and "outside the project root" in error
    assert "persistent_facts" not in run.variables


def test_a_fact_file_that_is_a_symlink_out_of_the_project_fails_activation(mini: Path, tmp_path_factory:
                                                                            pytest.TempPathFactory) -> None:
    """A file: entry under the project that is a symlink to a file elsewhere is not read either (issue 28 item 3:
    it was read into every request and journaled); the run fails at activation naming the entry."""
    outside = tmp_path_factory.mktemp("elsewhere") / "secret-notes.md"
    outside.write_text("not the project's\n", encoding="utf-8")
    (mini / "docs").mkdir()
    (mini / "docs" / "rules.md").symlink_to(outside)
    (mini / "_bmad" / "custom" / "tiny-build.toml").write_text(
        '[workflow]\npersistent_facts = ["file:docs/*.md"]\n', encoding="utf-8")
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", Recorder())
    assert run.status.value == "failed"
    error = run.steps["activate"].error or ""
    assert "docs/rules.md" in error and "outside the project root" in error
    assert "persistent_facts" not in run.variables
    assert not any("not the project's" in json.dumps(e.data) for e in events)


def test_intent_create_is_decided_from_the_disk(mini: Path) -> None:
    """No earlier document in the skill's output folder: Create, by the runtime; its sections run in order."""
    recorder = Recorder()
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-doc", recorder)
    assert _path(run) == ["activate", "on-activation", "intent", "section-drafting", "section-finish"]
    intent = _calls(events, "intent")[0]["result"]
    assert intent["intent"] == "Create" and intent["by"] == "runtime"
    drafting = next(r for r in recorder.work() if r.step_id == "section-drafting")
    assert "## Checklist" in drafting.content and "## Finish" not in drafting.content  # referenced section only


def test_with_earlier_documents_the_executor_picks_the_intent(mini: Path) -> None:
    """With a finished document in the output folder (nothing to resume) the executor picks the intent in #yolo;
    a document in progress is the resume offer's (tests/skills/test_resume_offer.py)."""
    final = mini / "out" / "work" / "docs" / "doc-1" / "doc.md"
    final.parent.mkdir(parents=True)
    final.write_text("---\nstatus: final\n---\n# Doc\n", encoding="utf-8")
    recorder = Recorder()
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-doc", recorder)
    asked = next(r for r in recorder.requests if r.kind == "answer")
    assert asked.choices == ["C", "U", "V"] and "Select an option: [C] Create  [U] Update  [V] Validate" in str(
        asked.question)
    assert "resume_candidates" not in run.variables and not _calls(events, "resume")
    assert _calls(events, "intent")[0]["result"]["by"] == "executor"


def test_in_normal_mode_the_person_picks_the_intent(mini: Path) -> None:
    """Not in #yolo, with nobody at a terminal, the intent question is a gate the run blocks on."""
    draft = mini / "out" / "work" / "docs" / "doc-1" / "doc.md"
    draft.parent.mkdir(parents=True)
    draft.write_text("---\nstatus: final\n---\n# Doc\n", encoding="utf-8")
    engine = Engine(project_root=mini, executor=Recorder(), mode="normal")
    run = asyncio.run(engine.start(load_workflow(mini / "_bmad" / "mini" / "tiny-doc", project_root=mini)))
    assert run.status == "blocked" and run.steps["intent"].status == StepStatus.BLOCKED
    assert "resume_candidates" not in run.variables  # a final document is not in progress


def test_a_shim_forwards_with_its_intent_and_fields(mini: Path) -> None:
    """tiny-old runs its notice, then tiny-doc with intent create and the shim's on_complete."""
    recorder = Recorder()
    run, _ = _run(mini, mini / "_bmad" / "mini" / "v6-shims" / "tiny-old", recorder)
    assert _path(run) == ["shim", "activate", "on-activation", "intent", "section-drafting", "section-finish"]
    finish = next(r for r in recorder.work() if r.step_id == "section-finish")
    assert "Run `Tell the user the old name still works.` if non-empty." in finish.content
    assert run.variables["intent"] == "create"


def test_mode_flag_preresolves_the_intent(mini: Path) -> None:
    """--mode validate runs the Validate mode, which names no section: its route (``load `assets/rubric.md```) is
    the next step, the rubric's text its request."""
    recorder = Recorder()
    run, _ = _run(mini, mini / "_bmad" / "mini" / "tiny-doc", recorder, mode="validate")
    assert _path(run) == ["activate", "on-activation", "intent", "route-assets-rubric"]
    assert any("assets/rubric.md" in r.content for r in recorder.work() if r.step_id == "intent")
    rubric = (mini / "_bmad" / "mini" / "tiny-doc" / "assets" / "rubric.md").read_text(encoding="utf-8").strip()
    assert [rubric in r.content for r in recorder.work() if r.step_id == "route-assets-rubric"] == [True]


def test_scripts_run_as_tools_through_the_pipeline(mini: Path) -> None:
    """The step lists its script; the executor's runScript call runs it in the project root, journaled."""

    async def note(session: StepSession) -> None:
        result = await session.call_tool("runScript", {"script": "_bmad/scripts/note.py", "args": ["--text", "did"]})
        assert result["status"] == "ok", result

    recorder = Recorder(calls={"step-03-do": note})
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", recorder)
    assert run.status == "completed"
    do = next(r for r in recorder.work() if r.step_id == "step-03-do")
    assert do.context["scripts"] == [{"script": str(mini / "_bmad" / "scripts" / "note.py"), "line": 3,
                                      "exists": True, "tool": "runScript"}]
    assert (mini / "notes.txt").read_text(encoding="utf-8") == "did\n"
    assert [e.data["args"]["name"] for e in events if e.type == "CallStarted"] == ["runScript"]


def test_subagent_layers_are_parallel_executor_calls(mini: Path) -> None:
    """Layers whose instruction launches a subagent run as their own requests, at the same time, each with only
    its instruction (the value the step set substituted); the step then continues with their results."""
    (mini / "_bmad" / "custom" / "tiny-build.toml").write_text(
        '[[workflow.checks]]\nid = "lint"\nname = "Linter"\ninstruction = "Launch a subagent: lint {change}."\n'
        '[[workflow.checks]]\nid = "tests"\nname = "Tests"\ninstruction = "Launch a subagent: test {change}."\n',
        encoding="utf-8")
    both_started = asyncio.Event()
    running: list[str] = []

    class Layered(Recorder):
        async def perform(self, request: Any, session: StepSession) -> None:
            if request.step_id == "step-04-review" and request.title.startswith("subagent:"):
                self.requests.append(request)
                running.append(request.title)
                if len(running) == 2:
                    both_started.set()
                await asyncio.wait_for(both_started.wait(), 5)  # only returns if the other layer runs meanwhile
                await session.finish(summary=f"{request.title}: 1 finding")
                return
            if request.step_id == "step-04-review" and "set_var('change'" in request.content:
                await session.set_var("change", "CHANGE-7")
            await super().perform(request, session)

    executor = Layered()
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", executor)
    assert run.status == "completed"
    review = [r for r in executor.work() if r.step_id == "step-04-review"]
    assert [r.title for r in review] == ["step-04-review.md", "subagent: Linter", "subagent: Tests",
                                         "step-04-review.md"]  # the continuation repeats the step's request
    assert review[3].content.startswith(review[0].content) and "## After the subagents" in review[3].content
    assert "runs these 2 layers as parallel subagents" in review[0].content and "lint" not in review[0].content
    assert [r.content for r in review[1:3]] == ["Launch a subagent: lint CHANGE-7.",
                                                "Launch a subagent: test CHANGE-7."]
    assert "#### Linter (`lint`) — its subagent returned:\n\nsubagent: Linter: 1 finding" in review[3].content
    assert _calls(events, "subagents")[0]["result"][1] == {"id": "tests", "name": "Tests",
                                                          "result": "subagent: Tests: 1 finding"}


def test_the_modules_config_user_yaml_names_the_user(mini: Path) -> None:
    """`{user_name}` in the prose comes from _bmad/<module>/config.yaml with config.user.yaml over it."""
    (mini / "_bmad" / "mini" / "config.user.yaml").write_text("user_name: Grace\n", encoding="utf-8")
    recorder = Recorder()
    _run(mini, mini / "_bmad" / "mini" / "tiny-doc", recorder)
    activation = next(r for r in recorder.work() if r.step_id == "on-activation")
    assert "2. Greet Grace in English." in activation.content


def test_a_route_that_hinges_on_a_file_is_decided_by_the_disk(mini: Path) -> None:
    """"If `{{.work_folder}}/STOP.md` exists → step-04": the runtime looks, and takes the route when it does."""
    recorder = Recorder()
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", recorder)
    assert "step-02-plan" in _path(run)  # no STOP.md: not taken, and not asked
    assert not any("STOP.md" in (r.condition or "") for r in recorder.requests if r.kind == "decide")
    (mini / "out" / "work").mkdir(parents=True)
    (mini / "out" / "work" / "STOP.md").write_text("stop\n", encoding="utf-8")
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", Recorder())
    assert _path(run) == ["activate", "on-activation", "step-01-route", "step-04-review"]
    route = _calls(events, "route")[0]["result"]
    assert route["by"] == "runtime" and route["reason"].startswith(f"{mini}/out/work/STOP.md exists")


def test_a_checkpoint_is_asked_by_the_runtime(mini: Path) -> None:
    """`HALT and ask human: [A] Approve | [E] Edit`: in #yolo the executor answers as the user and then does what
    the step says for the choice; the step's own request is told not to ask it."""
    recorder = Recorder()
    run, events = _run(mini, mini / "_bmad" / "mini" / "tiny-build", recorder)
    plan = [r for r in recorder.requests if r.step_id == "step-02-plan"]
    assert [r.kind for r in plan] == ["work", "answer", "work"]
    # the step's text first (the same in each of its requests), the runtime's notes to this request after it
    assert plan[0].content.startswith("# Step 2: Plan\n\nWrite the plan to")
    assert "\n\n## This request\nThe runtime presents this step's checkpoint(s) to the person" in plan[0].content
    assert plan[1].choices == ["A", "E"]
    assert plan[1].question == "step-02-plan.md:9: Select an option: [A] Approve  [E] Edit"
    assert plan[2].content.endswith("Do what the step says for it:\n\nSet `status: approved` in `{spec_file}`.")
    assert _calls(events, "checkpoint")[0]["result"] == {"choice": "A", "by": "executor"}
    assert run.steps["step-02-plan"].choice == "A"


def test_in_normal_mode_the_checkpoint_waits_for_the_person(mini: Path) -> None:
    """Nobody at a terminal: the run blocks on the checkpoint; [E] is acted on and asks again, [A] moves on."""
    from stepline.interfaces.cli._app import run_cli

    def drive(resume: str | None = None) -> Run:
        engine = Engine(project_root=mini, executor=Recorder(), mode="normal")
        if resume is not None:
            return asyncio.run(engine.resume(resume))
        return asyncio.run(engine.start(load_workflow(mini / "_bmad" / "mini" / "tiny-build", project_root=mini)))

    run = drive()
    assert run.status == "blocked" and run.steps["step-02-plan"].status == StepStatus.BLOCKED
    assert run_cli(["answer", run.run_id, "E", "--project-root", str(mini)]) == 0
    run = drive(run.run_id)
    assert run.status == "blocked"  # E: changes applied, the checkpoint is asked again
    assert run_cli(["answer", run.run_id, "A", "--project-root", str(mini)]) == 0
    run = drive(run.run_id)
    assert run.status == "completed"
    events = list(Engine(project_root=mini).store.open(run.run_id).events())
    assert [c["result"]["choice"] for c in _calls(events, "checkpoint")] == ["E", "A"]
    assert {c["result"]["by"] for c in _calls(events, "checkpoint")} == {"person"}
