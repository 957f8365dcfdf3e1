"""Tests for the BMAD micro-file reader on small fixture workflows written for stepline."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline.bmad._microfile import (
    Progress,
    completed_step_index,
    lint_bmad_microfile,
    load_bmad_microfile,
    load_csv_data,
    read_progress,
    resume_step_id,
)
from stepline.errors import NotFoundError, ReaderError, UsageError
from stepline.model import WorkflowSpec

PROJECT = (Path(__file__).parents[1] / "fixtures" / "microfile" / "project").resolve()
WORKFLOWS = PROJECT / "_bmad" / "demo" / "workflows"


def load(name: str, **kwargs: object) -> WorkflowSpec:
    return load_bmad_microfile(WORKFLOWS / name, project_root=PROJECT, **kwargs)  # type: ignore[arg-type]


def by_id(spec: WorkflowSpec) -> dict[str, dict[str, object]]:
    return {s.id: s.meta for s in spec.steps}


class TestLoad:
    def test_folder_and_file_give_the_same_spec(self) -> None:
        """Loading the folder or its workflow.md gives the same workflow."""
        assert load("mini") == load("mini/workflow.md")

    def test_steps_and_chain(self) -> None:
        """Every reachable step file becomes a step, in file order, linked by its next/alt paths."""
        spec = load("mini")
        assert spec.format == "bmad-microfile"
        assert [s.id for s in spec.steps] == [
            "step-01-init",
            "step-01b-continue",
            "step-02-draft",
            "step-02b-shortcut",
            "step-03-done",
        ]
        meta = by_id(spec)
        steps = WORKFLOWS / "mini" / "steps"
        assert meta["step-01-init"]["next"] == str(steps / "step-02-draft.md")
        assert meta["step-02-draft"]["next"] == str(steps / "step-03-done.md")
        assert meta["step-02-draft"]["alt"] == str(steps / "step-02b-shortcut.md")
        assert meta["step-03-done"]["next"] is None
        assert spec.meta["first_step"] == "step-01-init"

    def test_prose_chain_without_frontmatter(self) -> None:
        """A step without frontmatter is chained by the single later step its prose loads."""
        meta = by_id(load("mini"))["step-02b-shortcut"]
        assert meta["next"] == str(WORKFLOWS / "mini" / "steps" / "step-03-done.md")
        assert meta["frontmatter"] == {}

    def test_just_in_time_no_bodies(self) -> None:
        """No step body is embedded in the spec: the engine reads a step file only when it runs."""
        spec = load("mini")
        assert all(s.body == "" for s in spec.steps)
        assert "SENTINEL-BODY-TEXT-OF-STEP-TWO" not in spec.model_dump_json()
        assert all(Path(str(s.meta["file"])).is_file() for s in spec.steps)

    def test_frontmatter_variables_resolved_in_order(self) -> None:
        """Config keys, chained step variables and ./ paths resolve; ``{{runtime}}`` variables stay."""
        fm = by_id(load("mini"))["step-01-init"]["frontmatter"]
        assert isinstance(fm, dict)
        mini = WORKFLOWS / "mini"
        assert fm["workflow_path"] == str(mini)
        assert fm["thisStepFile"] == str(mini / "steps" / "step-01-init.md")
        assert fm["outputFile"] == f"{PROJECT}/out/planning/mini-{{{{date}}}}.md"
        assert fm["miniTemplate"] == str(mini / "mini.template.md")
        assert fm["csvFile"] == str(mini / "data" / "items.csv")

    def test_workflow_meta(self) -> None:
        """The workflow records its file, output pattern, template, config and continuation step."""
        spec = load("mini")
        assert spec.meta["workflow_file"] == str(WORKFLOWS / "mini" / "workflow.md")
        assert spec.meta["output_file"] == f"{PROJECT}/out/planning/mini-{{{{date}}}}.md"
        assert spec.meta["template"] == str(WORKFLOWS / "mini" / "mini.template.md")
        assert spec.meta["config"] == {"path": str(PROJECT / "_bmad" / "demo" / "config.yaml")}
        assert spec.meta["continuation_step"] == "step-01b-continue"
        assert spec.meta["router"] is None
        assert spec.meta["diagnostics"] == []
        assert spec.variables["user_name"] == "Tester"
        assert spec.steps[0].templates == [str(WORKFLOWS / "mini" / "mini.template.md")]

    def test_continuation_step(self) -> None:
        """The step-01b-continue file is flagged and is a branch of step 1, not its next."""
        meta = by_id(load("mini"))
        assert meta["step-01b-continue"]["is_continuation"] is True
        assert meta["step-01-init"]["is_continuation"] is False
        assert "step-01b-continue" in meta["step-01-init"]["branches"]  # type: ignore[operator]

    def test_menu(self) -> None:
        """The A/P/C menu and a custom option are parsed with labels, kinds and handlers."""
        menu = by_id(load("mini"))["step-02-draft"]["menu"]
        assert isinstance(menu, list)
        assert [(m["key"], m["label"], m["kind"]) for m in menu] == [
            ("A", "Advanced Elicitation", "advanced-elicitation"),
            ("P", "Party Mode", "party-mode"),
            ("S", "Shortcut", "custom"),
            ("C", "Continue", "continue"),
        ]
        assert menu[2]["handler"] == "Load, read entire file, then execute {altStepFile}"

    def test_variables_override_config(self) -> None:
        """Caller variables win over the module config."""
        spec = load("mini", variables={"planning_artifacts": "/elsewhere"})
        assert spec.meta["output_file"] == "/elsewhere/mini-{{date}}.md"

    def test_single_file_workflow(self) -> None:
        """A workflow.md without a steps folder is one step whose file is the workflow itself."""
        spec = load("single")
        assert [s.id for s in spec.steps] == ["workflow"]
        assert spec.steps[0].meta["file"] == str(WORKFLOWS / "single" / "workflow.md")
        assert spec.meta["first_step"] == "workflow"

    def test_missing_path(self) -> None:
        """A path that does not exist is a NotFoundError."""
        with pytest.raises(NotFoundError):
            load("nope")


class TestModes:
    def test_router_without_mode(self) -> None:
        """Without a mode every mode is loaded and the router's options are recorded for the engine."""
        spec = load("trimodal")
        router = spec.meta["router"]
        assert spec.meta["first_step"] is None
        assert [(o["mode"], o["key"], o["label"], o["entry"]) for o in router["options"]] == [
            ("create", "C", "Create", "step-01-start"),
            ("edit", "E", "Edit", "step-e-01-load"),
            ("validate", "V", "Validate", "step-v-01-check"),
        ]
        assert router["selected"] is None
        assert {s.id for s in spec.steps} == {"step-01-start", "step-02-finish", "step-e-01-load", "step-v-01-check"}

    @pytest.mark.parametrize("mode", ["edit", "-e", "E", "--edit"])
    def test_mode_spellings(self, mode: str) -> None:
        """A mode can be named, given as a flag, or as its menu key."""
        spec = load("trimodal", mode=mode)
        assert spec.meta["mode"] == "edit"
        assert spec.meta["first_step"] == "step-e-01-load"
        assert [s.id for s in spec.steps] == ["step-e-01-load"]

    def test_mode_follows_cross_mode_branches(self) -> None:
        """Create mode includes the validate step its last step links to, after its own steps."""
        spec = load("trimodal", mode="create")
        assert [(s.id, s.phase) for s in spec.steps] == [
            ("step-01-start", "create"),
            ("step-02-finish", "create"),
            ("step-v-01-check", "create"),
        ]

    def test_unknown_mode(self) -> None:
        """An unknown mode is a usage error listing the modes there are."""
        with pytest.raises(UsageError, match="create, edit, validate"):
            load("trimodal", mode="publish")

    def test_mode_for_single_mode_workflow(self) -> None:
        """Asking for a mode of a workflow without a router is a usage error."""
        with pytest.raises(UsageError, match="no modes"):
            load("mini", mode="create")


class TestLint:
    def test_clean_fixture(self) -> None:
        """A correct workflow lints without diagnostics."""
        assert lint_bmad_microfile(WORKFLOWS / "mini", PROJECT) == []
        assert lint_bmad_microfile(WORKFLOWS / "trimodal", PROJECT) == []

    def test_broken_fixture(self) -> None:
        """Each defect is reported once with its code, file and line."""
        found = {
            (d.code, Path(d.path).name, d.line, d.severity) for d in lint_bmad_microfile(WORKFLOWS / "broken", PROJECT)
        }
        assert found == {
            ("yaml-syntax", "step-01-first.md", 3, "error"),
            ("yaml-syntax", "step-01-first.md", 5, "error"),
            ("broken-chain", "step-01-first.md", 4, "error"),
            ("missing-file", "step-01-first.md", 6, "error"),
            ("unknown-variable", "step-01-first.md", 5, "warning"),
            ("unknown-variable", "step-01-first.md", 7, "warning"),
            ("unreachable-step", "step-03-orphan.md", 1, "warning"),
            ("yaml-syntax", "step-03-orphan.md", 3, "error"),
        }

    def test_broken_chain_message(self) -> None:
        """The broken-chain message names the key, the reference and the resolved path."""
        (diag,) = [d for d in lint_bmad_microfile(WORKFLOWS / "broken", PROJECT) if d.code == "broken-chain"]
        assert "nextStepFile './step-02-missing.md'" in diag.message
        assert str(diag).startswith(f"{WORKFLOWS}/broken/steps/step-01-first.md:4: error:")

    def test_broken_workflow_still_loads(self) -> None:
        """Defects do not stop loading: the diagnostics travel in the spec's meta."""
        spec = load("broken")
        assert [s.id for s in spec.steps] == ["step-01-first"]
        assert spec.steps[0].meta["next"] == str(WORKFLOWS / "broken" / "steps" / "step-02-missing.md")
        assert spec.steps[0].meta["frontmatter"]["description"] == "Ensure we don't crash"
        codes = {d["code"] for d in spec.meta["diagnostics"]}
        assert {"yaml-syntax", "broken-chain", "missing-file"} <= codes


class TestProgress:
    def write(self, tmp_path: Path, frontmatter: str) -> Path:
        doc = tmp_path / "out.md"
        doc.write_text(f"---\n{frontmatter}---\n\n# Output\n", encoding="utf-8")
        return doc

    def test_numbers(self, tmp_path: Path) -> None:
        """Numbered stepsCompleted map to the step files with those numbers."""
        doc = self.write(tmp_path, "stepsCompleted: [1, 2]\ninputDocuments: ['docs/a.md']\n")
        progress = read_progress(doc)
        assert progress == Progress((1, 2), None, ("docs/a.md",), str(doc))
        spec = load("mini")
        assert spec.steps[completed_step_index(progress, spec.steps)].id == "step-02-draft"
        assert resume_step_id(progress, spec) == "step-03-done"

    def test_names(self, tmp_path: Path) -> None:
        """Named stepsCompleted (with or without .md) map to the steps of those names."""
        doc = self.write(tmp_path, "stepsCompleted: ['step-01-init.md']\nlastStep: 1\n")
        spec = load("mini")
        progress = read_progress(doc)
        assert progress.last_step == 1
        assert completed_step_index(progress, spec.steps) == 0
        assert resume_step_id(progress, spec) == "step-02-draft"

    def test_nothing_completed(self) -> None:
        """No completed step means position -1 and a resume at the first step."""
        spec = load("mini")
        assert completed_step_index(Progress(), spec.steps) == -1
        assert resume_step_id(Progress(), spec) == "step-01-init"

    def test_last_step_only(self) -> None:
        """``lastStep`` is used when ``stepsCompleted`` is empty."""
        spec = load("mini")
        assert resume_step_id(Progress(last_step=2), spec) == "step-03-done"

    def test_finished(self) -> None:
        """After the final step there is nothing to resume."""
        spec = load("mini")
        assert resume_step_id(Progress((1, 2, 3)), spec) is None

    def test_continuation_never_counts(self) -> None:
        """A ``1b`` continuation file is not step 1 and never marks progress."""
        spec = load("mini")
        assert completed_step_index(Progress(("step-01b-continue",)), spec.steps) == -1

    def test_bad_steps_completed(self, tmp_path: Path) -> None:
        """A malformed stepsCompleted is a ReaderError at its line."""
        doc = self.write(tmp_path, "title: x\nstepsCompleted: 3\n")
        with pytest.raises(ReaderError, match=r"out\.md:3: stepsCompleted must be a list"):
            read_progress(doc)

    def test_missing_document(self, tmp_path: Path) -> None:
        """No output document means a fresh run: NotFoundError."""
        with pytest.raises(NotFoundError):
            read_progress(tmp_path / "absent.md")


class TestCsv:
    def test_rows(self) -> None:
        """A CSV data file becomes one dict per row, keyed by its header."""
        rows = load_csv_data(WORKFLOWS / "mini" / "data" / "items.csv")
        assert rows == [{"id": "1", "label": "first"}, {"id": "2", "label": "second"}]

    def test_missing(self, tmp_path: Path) -> None:
        """A missing CSV file names the file and who referenced it."""
        with pytest.raises(NotFoundError, match=r"missing\.csv: CSV data file not found \(referenced from s\.md:7\)"):
            load_csv_data(tmp_path / "missing.csv", referenced_from="s.md:7")

    def test_not_utf8(self, tmp_path: Path) -> None:
        """A CSV file that is not UTF-8 is a ReaderError naming it."""
        bad = tmp_path / "bad.csv"
        bad.write_bytes(b"a,b\n\xff\xfe,1\n")
        with pytest.raises(ReaderError, match=r"bad\.csv"):
            load_csv_data(bad)


def test_fences_follow_commonmark_and_a_next_step_in_an_open_fence_is_still_found(tmp_path: Path) -> None:
    """A ```` block may quote ``` lines; a next-step line left inside an unclosed fence is followed, with a warning."""
    from stepline.bmad._microfile import load_bmad_microfile

    folder = tmp_path / "wf"
    (folder / "steps").mkdir(parents=True)
    (folder / "workflow.md").write_text("---\nname: w\n---\nLoad `./steps/step-01-a.md`\n", encoding="utf-8")
    (folder / "steps" / "step-01-a.md").write_text(
        "# A\n\n````markdown\n```bash\necho hi\n```\n````\n\n```\nLoad `./step-02-b.md`\n", encoding="utf-8")
    (folder / "steps" / "step-02-b.md").write_text("# B\n\nDone.\n", encoding="utf-8")
    spec = load_bmad_microfile(folder, project_root=tmp_path)
    assert [s.id for s in spec.steps] == ["step-01-a", "step-02-b"]
    assert Path(spec.steps[0].meta["next"]).name == "step-02-b.md"
    codes = [d["code"] for d in spec.meta["diagnostics"]]
    assert "fenced-next-step" in codes


def test_a_workflow_md_naming_only_a_later_step_starts_at_the_step_that_leads_there(tmp_path: Path) -> None:
    """Issue 25 (v6.0.4's party-mode shape): workflow.md names only `./steps/step-02-discuss.md` (in a late
    section); step-01 leads to it, so the chain starts at step-01, not in its middle."""
    wf = tmp_path / "_bmad" / "demo" / "workflows" / "party"
    (wf / "steps").mkdir(parents=True)
    (wf / "workflow.md").write_text("---\nname: party\ndescription: talk\n---\n\n# Party\n\n## ORCHESTRATION\n\n"
                                    "Load step: `./steps/step-02-discuss.md`\n", encoding="utf-8")
    (wf / "steps" / "step-01-load.md").write_text("# Load\n\n[C] Continue\n\n#### If 'C' (Continue):\n\n"
                                                  "- Load: `./step-02-discuss.md`\n", encoding="utf-8")
    (wf / "steps" / "step-02-discuss.md").write_text("# Discuss\n\nTalk.\n", encoding="utf-8")
    spec = load_bmad_microfile(wf, project_root=tmp_path)
    assert spec.meta["first_step"] == "step-01-load"
    assert [s.id for s in spec.steps] == ["step-01-load", "step-02-discuss"]


def test_a_menu_is_read_without_inline_code_and_without_a_menu_under_a_condition() -> None:
    """Issue 25: `stepsCompleted: [1]` in a handler is no option [1] (alpha.16's prd step-01-init); options
    indented under "If existing session files are found:" are not the step's menu when it has its own (v6.0.4's
    brainstorming step-01); an option written as code (`[E] Exit`) still is one."""
    from stepline.stepchain._read import parse_menu, prose_lines

    text = ("### Present MENU OPTIONS\n\n\"[C] Continue - Save and go on\"\n\n#### Menu Handling Logic:\n\n"
            "- IF C: Update frontmatter `stepsCompleted: [1]`, then load {nextStepFile}\n\n"
            "### 2. Existing Sessions\n\nIf existing session files are found:\n\n  **[2]** Continue this session\n\n"
            "### 3. Fresh Setup\n\n`[E] Exit - End the session`\n")
    menu = parse_menu(prose_lines(text, 1))
    assert [(o["key"], o["label"]) for o in menu] == [("C", "Continue"), ("E", "Exit")]
    only_conditional = parse_menu(prose_lines("If files are found:\n\n  **[1]** Continue this session\n", 1))
    assert [(o["key"], o["label"]) for o in only_conditional] == [("1", "Continue this session")]


def test_a_missing_first_step_named_by_a_frontmatter_key_is_an_error(tmp_path: Path) -> None:
    """Issue 25 (bmad-builder's workflow-edit-module.md shape): `editWorkflow: './steps-e/step-01-assess.md'`,
    loaded as `{editWorkflow}`, names no file: validate says so (error), naming the key and the file."""
    wf = tmp_path / "_bmad" / "demo" / "workflows" / "edit"
    (wf / "steps-e").mkdir(parents=True)
    (wf / "workflow.md").write_text("---\nname: edit\ndescription: d\neditWorkflow: './steps-e/step-01-assess.md'\n"
                                    "---\n\n# Edit\n\nThen load, read completely, and execute `{editWorkflow}`\n",
                                    encoding="utf-8")
    (wf / "steps-e" / "step-01-load-target.md").write_text("# Load\n\nAsk.\n", encoding="utf-8")
    errors = [d for d in lint_bmad_microfile(wf, tmp_path) if d.severity == "error"]
    assert [(d.code, d.line) for d in errors] == [("broken-chain", 9)]
    assert "editWorkflow '{editWorkflow}'" in errors[0].message and "step-01-assess.md" in errors[0].message
